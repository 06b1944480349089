"""ShuffleNetV2 (Ma et al. 2018): channel split, concat and channel shuffle.

Layout features: ``chunk`` along the channel axis, ``cat`` along channels, and the channel
shuffle reshape(N, g, C/g, H, W) → transpose(1, 2) → reshape(N, C, H, W). That 5-D reshape /
transpose pair is written against NCHW; under NHWC it cannot simply be re-indexed, so it is a
classic source of leftover layout transforms.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo._common import ConvNormAct, finalize

# Output channels of (stem, stage2, stage3, stage4, conv5) per width multiplier (paper Table 5).
_WIDTHS: dict[float, tuple[int, int, int, int, int]] = {
    0.5: (24, 48, 96, 192, 1024),
    1.0: (24, 116, 232, 464, 1024),
    1.5: (24, 176, 352, 704, 1024),
    2.0: (24, 244, 488, 976, 2048),
}


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Interleave channel groups: reshape → transpose → reshape (NCHW)."""
    n, c, h, w = x.shape
    x = x.reshape(n, groups, c // groups, h, w)
    x = x.transpose(1, 2).contiguous()
    return x.reshape(n, c, h, w)


class ShuffleUnit(nn.Module):
    """Stride 1: split channels, transform one half, concat, shuffle.
    Stride 2: both branches see the full input (left: dw 3×3/2 + 1×1), concat, shuffle."""

    def __init__(self, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        if stride == 1 and in_ch != out_ch:
            raise ValueError("a stride-1 unit keeps the channel count")
        self.stride = stride
        branch = out_ch // 2
        self.branch1: nn.Module = nn.Identity()
        if stride == 2:
            self.branch1 = nn.Sequential(
                ConvNormAct(in_ch, in_ch, 3, 2, groups=in_ch, act=None),
                ConvNormAct(in_ch, branch, 1),
            )
        b2_in = in_ch if stride == 2 else branch
        self.branch2 = nn.Sequential(
            ConvNormAct(b2_in, branch, 1),
            ConvNormAct(branch, branch, 3, stride, groups=branch, act=None),
            ConvNormAct(branch, branch, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            left, right = x.chunk(2, dim=1)
            out = torch.cat((left, self.branch2(right)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, channels: tuple[int, int, int, int, int],
                 repeats: tuple[int, int, int] = (4, 8, 4), num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(ConvNormAct(3, channels[0], 3, 2), nn.MaxPool2d(3, 2, 1))
        stages: list[nn.Module] = []
        in_ch = channels[0]
        for n, out_ch in zip(repeats, channels[1:4], strict=True):
            units = [ShuffleUnit(in_ch, out_ch, 2)]
            units += [ShuffleUnit(out_ch, out_ch, 1) for _ in range(n - 1)]
            stages.append(nn.Sequential(*units))
            in_ch = out_ch
        self.stages = nn.Sequential(*stages)
        self.conv5 = ConvNormAct(in_ch, channels[4], 1)
        self.fc = nn.Linear(channels[4], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv5(self.stages(self.stem(x)))
        return self.fc(x.mean((2, 3)))


def shufflenet_v2(
    width: float = 1.0,
    num_classes: int = 1000,
    repeats: tuple[int, int, int] = (4, 8, 4),
    channels: tuple[int, int, int, int, int] | None = None,
) -> nn.Module:
    """ShuffleNetV2 at `width` ∈ {0.5, 1.0, 1.5, 2.0}; `channels` overrides the width table.

    Input N×3×H×W with H, W ≥ 32.
    """
    if channels is None:
        if width not in _WIDTHS:
            raise ValueError(f"width must be one of {sorted(_WIDTHS)}, got {width}")
        channels = _WIDTHS[width]
    return finalize(ShuffleNetV2(channels, repeats, num_classes), (4, 3, 64, 64))
