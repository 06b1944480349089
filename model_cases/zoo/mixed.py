"""A plain conv + ReLU stack for mixed-layout cases (some convs kept NCHW by the case file).

Layout features: nothing special in the model itself — consecutive convs with ReLU, one of them
strided, so a case that pins some convs to NCHW and others to NHWC creates layout boundaries
*inside* the graph whose transforms the budget then counts.
"""

from __future__ import annotations

import torch
from torch import nn


class MixedLayoutNet(nn.Module):
    """conv3×3 (3→c) → ReLU → conv3×3/2 (c→2c) → ReLU → conv3×3 (2c→2c) → ReLU → conv1×1 (2c→c)."""

    def __init__(self, channels: int = 32) -> None:
        super().__init__()
        c = channels
        self.conv1 = nn.Conv2d(3, c, 3, padding=1)
        self.conv2 = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(2 * c, 2 * c, 3, padding=1)
        self.conv4 = nn.Conv2d(2 * c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.relu(self.conv3(x))
        return self.conv4(x)


def mixed_layout_net(channels: int = 32) -> nn.Module:
    """`MixedLayoutNet`: N×3×H×W → N×channels×H/2×W/2."""
    return MixedLayoutNet(channels).eval()
