"""Minimal graphs from TVM reports: a lone strided conv and the ConvertLayout design-note graph."""

from __future__ import annotations

import torch
from torch import nn


def conv3x3_s2(in_channels: int = 3, out_channels: int = 32) -> nn.Module:
    """A single ``Conv2d(3, 32, 3, stride=2, padding=1)`` (the TVM forum report).

    Layout feature: one conv with NCHW model input and output, so under NHWC the only transforms
    are the two at the graph boundary.
    """
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=2, padding=1).eval()


class TwoConvNHWC(nn.Module):
    """NHWC in → permute to NCHW → (conv3x3 + ReLU) × 2 → permute back → NHWC out.

    Layout feature: the model's *own* input and output are already NHWC, so converting the
    convs to NHWC should cancel the user's permutes and leave zero layout transforms (the graph
    from TVM's ConvertLayout design note).
    """

    def __init__(self, channels: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.permute(0, 3, 1, 2)
        y = torch.relu(self.conv1(y))
        y = torch.relu(self.conv2(y))
        return y.permute(0, 2, 3, 1)


def two_conv_nhwc(channels: int = 64) -> nn.Module:
    """`TwoConvNHWC` taking (N, H, W, channels) input, e.g. 1×56×56×64."""
    return TwoConvNHWC(channels).eval()
