"""gpucourse.models: the small CNN learns the shapes in seconds on a CPU."""

import pytest
import torch
from torch import nn

import gpucourse


def test_output_shape_and_width():
    model = gpucourse.SmallCNN(width=8)
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 4)
    assert model(torch.zeros(2, 3, 64, 64)).shape == (2, 4), "any image size from 32 up"
    assert sum(p.numel() for p in gpucourse.SmallCNN(width=16).parameters()) > sum(
        p.numel() for p in model.parameters()
    )


@pytest.mark.slow  # trains for about half a minute on one CPU thread
def test_learns_the_shapes_quickly():
    gpucourse.set_seed(0)
    train = gpucourse.shapes_dataset(2048, image_size=32, seed=0)
    test_x, test_y = gpucourse.shapes_dataset(256, image_size=32, seed=1)[:]
    model = gpucourse.SmallCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loader = torch.utils.data.DataLoader(train, batch_size=32, shuffle=True)
    for _ in range(4):
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
    assert accuracy > 0.7, f"the shapes should be learnable (chance is 0.25), got {accuracy:.2f}"
