"""The course's small CNN: learns the shapes in seconds on a CPU."""

import torch
from torch import nn


class SmallCNN(nn.Module):
    """Three conv-GroupNorm-ReLU-pool blocks (``width``, 2x and 4x channels), pooled to 4 x 4, one
    linear layer.

    GroupNorm, not BatchNorm: a sample's gradient does not depend on the rest of its batch, so
    gradient accumulation and data-parallel training reproduce full-batch gradients exactly, as the
    lessons check. The 4 x 4 map keeps where the corners are, which tells a square from a circle.
    Any image size from 32 pixels up works.
    """

    def __init__(self, num_classes: int = 4, width: int = 16, in_channels: int = 3):
        super().__init__()
        layers = []
        channels = in_channels
        for out in (width, 2 * width, 4 * width):
            layers += [
                nn.Conv2d(channels, out, 3, padding=1, bias=False),
                nn.GroupNorm(4, out),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            channels = out
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(16 * channels, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))
