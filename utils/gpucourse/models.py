"""The course's small CNN: learns the shapes in seconds on a CPU."""

from __future__ import annotations

import torch
from torch import nn


class SmallCNN(nn.Module):
    """Three conv-BN-ReLU-pool blocks, global average pooling, one linear layer.

    ``width`` scales the channels (16, 32, 64 by default) so a lesson can make
    the same model heavier on a GPU.
    """

    def __init__(self, num_classes: int = 4, width: int = 16, in_channels: int = 3):
        super().__init__()
        layers, channels = [], in_channels
        for out in (width, 2 * width, 4 * width):
            layers += [nn.Conv2d(channels, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
            layers.append(nn.MaxPool2d(2))
            channels = out
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))
