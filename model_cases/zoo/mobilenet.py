"""MobileNetV2 (Sandler et al. 2018) and MobileNetV3-Small (Howard et al. 2019).

Layout features: depthwise 3×3/5×5 convs (groups == channels, weight layout OHWI vs HWOI
matters), inverted residuals, ReLU6 (clip), Hardswish / Hardsigmoid, and squeeze-excite blocks
whose global pool → 1×1 convs → channel-wise multiply must broadcast along the channel axis
of whichever layout the feature map is in.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo._common import ConvNormAct, finalize, make_divisible

# ---------------------------------------------------------------------------- MobileNetV2


class InvertedResidual(nn.Module):
    """1×1 expand (ReLU6) → 3×3 depthwise (ReLU6) → 1×1 linear projection, residual if shapes
    match."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = round(in_ch * expand_ratio)
        self.use_residual = stride == 1 and in_ch == out_ch
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvNormAct(in_ch, hidden, 1, act=nn.ReLU6))
        layers += [
            ConvNormAct(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
            nn.Conv2d(hidden, out_ch, 1, bias=False),
            nn.BatchNorm2d(out_ch),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return x + y if self.use_residual else y


# (expansion t, output channels c, repeats n, first stride s), from the paper's Table 2.
_V2_SETTINGS: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


class MobileNetV2(nn.Module):
    def __init__(self, width_mult: float = 1.0, num_classes: int = 1000) -> None:
        super().__init__()
        in_ch = make_divisible(32 * width_mult)
        last_ch = make_divisible(1280 * max(1.0, width_mult))
        layers: list[nn.Module] = [ConvNormAct(3, in_ch, 3, 2, act=nn.ReLU6)]
        for t, c, n, s in _V2_SETTINGS:
            out_ch = make_divisible(c * width_mult)
            for i in range(n):
                layers.append(InvertedResidual(in_ch, out_ch, s if i == 0 else 1, t))
                in_ch = out_ch
        layers.append(ConvNormAct(in_ch, last_ch, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last_ch, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v2(width_mult: float = 1.0, num_classes: int = 1000) -> nn.Module:
    """MobileNetV2 (ReLU6, depthwise, inverted residuals); input N×3×H×W, H, W ≥ 32."""
    return finalize(MobileNetV2(width_mult, num_classes), (4, 3, 64, 64))


# ---------------------------------------------------------------------- MobileNetV3-Small


class SqueezeExcite(nn.Module):
    """Global avg pool → 1×1 conv (ReLU) → 1×1 conv (Hardsigmoid) → channel-wise scale."""

    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.gate = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.gate(self.fc2(self.relu(self.fc1(self.pool(x)))))
        return x * s


class V3Block(nn.Module):
    """MobileNetV3 bneck: optional 1×1 expand → k×k depthwise → optional SE → 1×1 project."""

    def __init__(self, in_ch: int, kernel: int, exp_ch: int, out_ch: int, use_se: bool,
                 use_hs: bool, stride: int) -> None:
        super().__init__()
        act = nn.Hardswish if use_hs else nn.ReLU
        self.use_residual = stride == 1 and in_ch == out_ch
        layers: list[nn.Module] = []
        if exp_ch != in_ch:
            layers.append(ConvNormAct(in_ch, exp_ch, 1, act=act))
        layers.append(ConvNormAct(exp_ch, exp_ch, kernel, stride, groups=exp_ch, act=act))
        if use_se:
            layers.append(SqueezeExcite(exp_ch, make_divisible(exp_ch / 4)))
        layers.append(ConvNormAct(exp_ch, out_ch, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.use_residual else y


# (kernel, expansion channels, output channels, SE, hardswish, stride): the paper's Table 2.
_V3_SMALL: tuple[tuple[int, int, int, bool, bool, int], ...] = (
    (3, 16, 16, True, False, 2),
    (3, 72, 24, False, False, 2),
    (3, 88, 24, False, False, 1),
    (5, 96, 40, True, True, 2),
    (5, 240, 40, True, True, 1),
    (5, 240, 40, True, True, 1),
    (5, 120, 48, True, True, 1),
    (5, 144, 48, True, True, 1),
    (5, 288, 96, True, True, 2),
    (5, 576, 96, True, True, 1),
    (5, 576, 96, True, True, 1),
)


class MobileNetV3Small(nn.Module):
    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0,
                 last_channel: int = 1024) -> None:
        super().__init__()

        def ch(c: int) -> int:
            return make_divisible(c * width_mult)

        in_ch = ch(16)
        layers: list[nn.Module] = [ConvNormAct(3, in_ch, 3, 2, act=nn.Hardswish)]
        for k, exp, out, se, hs, s in _V3_SMALL:
            layers.append(V3Block(in_ch, k, ch(exp), ch(out), se, hs, s))
            in_ch = ch(out)
        head_ch = 6 * in_ch  # 96 → 576
        layers.append(ConvNormAct(in_ch, head_ch, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(head_ch, last_channel),
            nn.Hardswish(inplace=True),
            nn.Dropout(0.2),
            nn.Linear(last_channel, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v3_small(num_classes: int = 1000, width_mult: float = 1.0,
                       last_channel: int = 1024) -> nn.Module:
    """MobileNetV3-Small (Hardswish, Hardsigmoid SE, 5×5 depthwise); input N×3×H×W, H, W ≥ 32."""
    return finalize(MobileNetV3Small(num_classes, width_mult, last_channel), (4, 3, 64, 64))
