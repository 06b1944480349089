"""EfficientNet-B0 (Tan & Le 2019): MBConv blocks with squeeze-excite and SiLU.

Layout features: SiLU (x · sigmoid(x)) everywhere, 3×3 and 5×5 depthwise convs, SE blocks
(global pool → 1×1 conv SiLU → 1×1 conv sigmoid → channel-wise multiply) and residual adds —
lots of elementwise ops between convs that must all follow the feature map's layout.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from zoo._common import ConvNormAct, finalize, make_divisible


class SqueezeExcite(nn.Module):
    """SE with SiLU squeeze and sigmoid gate; squeeze width is a quarter of the block input."""

    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.act = nn.SiLU(inplace=True)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.fc2(self.act(self.fc1(s))))


class MBConv(nn.Module):
    """1×1 expand (SiLU) → k×k depthwise (SiLU) → SE → 1×1 project (linear), + identity."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = in_ch * expand
        self.use_residual = stride == 1 and in_ch == out_ch
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(ConvNormAct(in_ch, hidden, 1, act=nn.SiLU))
        layers += [
            ConvNormAct(hidden, hidden, kernel, stride, groups=hidden, act=nn.SiLU),
            SqueezeExcite(hidden, max(1, in_ch // 4)),
            ConvNormAct(hidden, out_ch, 1, act=None),
        ]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)  # stochastic depth is the identity in eval mode
        return x + y if self.use_residual else y


# (expand ratio, kernel, first stride, output channels, repeats): B0 stages 2-8.
_B0: tuple[tuple[int, int, int, int, int], ...] = (
    (1, 3, 1, 16, 1),
    (6, 3, 2, 24, 2),
    (6, 5, 2, 40, 2),
    (6, 3, 2, 80, 3),
    (6, 5, 1, 112, 3),
    (6, 5, 2, 192, 4),
    (6, 3, 1, 320, 1),
)


class EfficientNet(nn.Module):
    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0,
                 depth_mult: float = 1.0, num_stages: int = 7) -> None:
        super().__init__()

        def ch(c: int) -> int:
            return make_divisible(c * width_mult)

        in_ch = ch(32)
        layers: list[nn.Module] = [ConvNormAct(3, in_ch, 3, 2, act=nn.SiLU)]
        for expand, k, s, c, n in _B0[:num_stages]:
            out_ch = ch(c)
            for i in range(math.ceil(n * depth_mult)):
                layers.append(MBConv(in_ch, out_ch, k, s if i == 0 else 1, expand))
                in_ch = out_ch
        head_ch = 4 * ch(320)  # 1280 at width 1.0
        layers.append(ConvNormAct(in_ch, head_ch, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(head_ch, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def efficientnet_b0_like(num_classes: int = 1000, width_mult: float = 1.0,
                         depth_mult: float = 1.0, num_stages: int = 7) -> nn.Module:
    """EfficientNet-B0 (all 7 MBConv stages by default); input N×3×H×W, H, W ≥ 32."""
    return finalize(EfficientNet(num_classes, width_mult, depth_mult, num_stages),
                    (4, 3, 64, 64))
