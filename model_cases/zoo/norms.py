"""Normalisation and pixel-rearranging nets: GroupNorm + SiLU blocks, PixelShuffle head.

Layout features: GroupNorm reshapes channels into (groups, C/groups) — a reduction over a
channel *sub-axis* that TVM must express in NHWC; PixelShuffle is a depth-to-space
reshape/transpose written against NCHW.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo._common import finalize


class GNBlock(nn.Module):
    """Diffusion-UNet style residual block: (GroupNorm → SiLU → conv3×3) × 2, + x."""

    def __init__(self, channels: int, groups: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, channels)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv1(self.act(self.norm1(x)))
        y = self.conv2(self.act(self.norm2(y)))
        return x + y


class GroupNormNet(nn.Module):
    """conv stem → GN blocks → strided conv (2× channels) → GN blocks → GN → SiLU → conv out."""

    def __init__(self, channels: int = 64, groups: int = 32, blocks_per_stage: int = 2,
                 out_channels: int = 3) -> None:
        super().__init__()
        c = channels
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.stage1 = nn.Sequential(*(GNBlock(c, groups) for _ in range(blocks_per_stage)))
        self.down = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1)
        self.stage2 = nn.Sequential(*(GNBlock(2 * c, groups) for _ in range(blocks_per_stage)))
        self.out = nn.Sequential(nn.GroupNorm(groups, 2 * c), nn.SiLU(),
                                 nn.Conv2d(2 * c, out_channels, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.stage2(self.down(self.stage1(self.stem(x)))))


def groupnorm_net(channels: int = 64, groups: int = 32, blocks_per_stage: int = 2,
                  out_channels: int = 3) -> nn.Module:
    """`GroupNormNet`: N×3×H×W → N×out_channels×H/2×W/2 (channels divisible by groups)."""
    return finalize(GroupNormNet(channels, groups, blocks_per_stage, out_channels))


class PixelShuffleNet(nn.Module):
    """ESPCN-style super-resolution: conv5×5 → conv3×3 → conv3×3 (3·r² maps) → PixelShuffle(r)."""

    def __init__(self, channels: int = 64, upscale: int = 2) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, channels, 5, padding=2),
            nn.ReLU(inplace=True),
            nn.Conv2d(channels, channels // 2, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(channels // 2, 3 * upscale**2, 3, padding=1),
        )
        self.shuffle = nn.PixelShuffle(upscale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shuffle(self.body(x))


def pixelshuffle_net(channels: int = 64, upscale: int = 2) -> nn.Module:
    """`PixelShuffleNet`: N×3×H×W → N×3×(upscale·H)×(upscale·W)."""
    return finalize(PixelShuffleNet(channels, upscale))
