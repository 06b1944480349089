"""Newer mobile / efficient / hybrid designs for `benchmarks/zoo_floor.py`, reduced in size.

Written here from the papers' structure (random weights): MobileViT (inverted residuals and
MobileViT blocks), GhostNet (ghost modules: a cheap depthwise half concatenated and sliced,
hard-sigmoid squeeze-excite), ConvMixer (depthwise + pointwise with GELU), PoolFormer
(GroupNorm, ``avgpool(x) - x`` token mixer, per-channel layer scales) and a hybrid conv +
transformer classifier whose sinusoidal encoding floor-divides float positions (as ViT-style
helpers do). The families the bundled cases already hold (MobileNetV2/V3, EfficientNet,
ShuffleNetV2, DenseNet, ConvNeXt) come from `model_cases/zoo` at reduced width.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F
from zoo import convnext, densenet, efficientnet, mobilenet, shufflenet
from zoo._common import ConvNormAct, finalize
from zoo.wild import Attention, MobileViTBlock

CALIB = (2, 3, 64, 64)


class _Classifier(nn.Module):
    def __init__(self, features: nn.Module, channels: int, num_classes: int) -> None:
        super().__init__()
        self.features, self.fc = features, nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, expand: int = 2) -> None:
        super().__init__()
        mid = c_in * expand
        self.body = nn.Sequential(ConvNormAct(c_in, mid, 1, act=nn.SiLU),
                                  ConvNormAct(mid, mid, 3, stride, groups=mid, act=nn.SiLU),
                                  ConvNormAct(mid, c_out, 1, act=None))
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


def mobilevit_xxs(width: int = 8, num_classes: int = 10) -> nn.Module:
    w = width
    features = nn.Sequential(
        ConvNormAct(3, 2 * w, 3, 2, act=nn.SiLU), InvertedResidual(2 * w, 2 * w, 1),
        InvertedResidual(2 * w, 3 * w, 2), InvertedResidual(3 * w, 4 * w, 2),
        MobileViTBlock(4 * w, 4 * w), InvertedResidual(4 * w, 6 * w, 2),
        MobileViTBlock(6 * w, 6 * w), ConvNormAct(6 * w, 8 * w, 1, act=nn.SiLU))
    return finalize(_Classifier(features, 8 * w, num_classes), CALIB)


class GhostModule(nn.Module):
    """Half the channels from a 1×1 conv, the other half from a cheap depthwise 3×3 of
    them, concatenated and sliced to the wanted count (GhostNet's ``out[:, :oup]``)."""

    def __init__(self, c_in: int, c_out: int, relu: bool = True) -> None:
        super().__init__()
        self.c_out = c_out
        init = math.ceil(c_out / 2)
        act = nn.ReLU if relu else None
        self.primary = ConvNormAct(c_in, init, 1, act=act)
        self.cheap = ConvNormAct(init, init, 3, groups=init, act=act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.primary(x)
        return torch.cat([y, self.cheap(y)], 1)[:, :self.c_out]


class GhostBottleneck(nn.Module):
    def __init__(self, c_in: int, mid: int, c_out: int, stride: int, se: bool) -> None:
        super().__init__()
        self.ghost1 = GhostModule(c_in, mid)
        self.dw = (ConvNormAct(mid, mid, 3, stride, groups=mid, act=None) if stride > 1
                   else nn.Identity())
        self.se_reduce = nn.Conv2d(mid, max(mid // 4, 4), 1) if se else None
        self.se_expand = nn.Conv2d(max(mid // 4, 4), mid, 1) if se else None
        self.ghost2 = GhostModule(mid, c_out, relu=False)
        self.shortcut = (nn.Identity() if stride == 1 and c_in == c_out else nn.Sequential(
            ConvNormAct(c_in, c_in, 3, stride, groups=c_in, act=None),
            ConvNormAct(c_in, c_out, 1, act=None)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(self.ghost1(x))
        if self.se_reduce is not None and self.se_expand is not None:
            s = self.se_expand(F.relu(self.se_reduce(F.adaptive_avg_pool2d(y, 1))))
            y = y * F.hardsigmoid(s)
        return self.ghost2(y) + self.shortcut(x)


def ghostnet(width: int = 8, num_classes: int = 10) -> nn.Module:
    w = width
    features = nn.Sequential(
        ConvNormAct(3, 2 * w, 3, 2), GhostBottleneck(2 * w, 2 * w, 2 * w, 1, False),
        GhostBottleneck(2 * w, 6 * w, 3 * w, 2, False),
        GhostBottleneck(3 * w, 9 * w, 5 * w, 2, True),
        GhostBottleneck(5 * w, 15 * w, 10 * w, 2, True), ConvNormAct(10 * w, 12 * w, 1))
    return finalize(_Classifier(features, 12 * w, num_classes), CALIB)


class Residual(nn.Module):
    def __init__(self, fn: nn.Module) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x) + x


def convmixer(dim: int = 32, depth: int = 3, kernel: int = 5, patch: int = 4,
              num_classes: int = 10) -> nn.Module:
    """ConvMixer as in its paper's listing: patch conv, then depthwise (residual) + pointwise."""
    layers: list[nn.Module] = [nn.Conv2d(3, dim, patch, patch), nn.GELU(), nn.BatchNorm2d(dim)]
    for _ in range(depth):
        layers += [Residual(nn.Sequential(nn.Conv2d(dim, dim, kernel, groups=dim, padding="same"),
                                          nn.GELU(), nn.BatchNorm2d(dim))),
                   nn.Conv2d(dim, dim, 1), nn.GELU(), nn.BatchNorm2d(dim)]
    return finalize(_Classifier(nn.Sequential(*layers), dim, num_classes), CALIB)


class PoolFormerBlock(nn.Module):
    """PoolFormer: ``x + ls1 * (avgpool(norm(x)) - norm(x))``, then an MLP of 1×1 convs,
    layer scales as per-channel parameters unsqueezed to (C, 1, 1)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.GroupNorm(1, dim), nn.GroupNorm(1, dim)
        self.pool = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.mlp = nn.Sequential(nn.Conv2d(dim, 2 * dim, 1), nn.GELU(), nn.Conv2d(2 * dim, dim, 1))
        self.ls1 = nn.Parameter(torch.full((dim,), 0.5))
        self.ls2 = nn.Parameter(torch.full((dim,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm1(x)
        x = x + self.ls1.unsqueeze(-1).unsqueeze(-1) * (self.pool(y) - y)
        return x + self.ls2.unsqueeze(-1).unsqueeze(-1) * self.mlp(self.norm2(x))


def poolformer(width: int = 16, num_classes: int = 10) -> nn.Module:
    layers: list[nn.Module] = []
    c_in = 3
    for i in range(3):
        c_out = width * 2 ** i
        layers += [nn.Conv2d(c_in, c_out, 7 if i == 0 else 3, 4 if i == 0 else 2,
                             2 if i == 0 else 1), PoolFormerBlock(c_out)]
        c_in = c_out
    layers.append(nn.GroupNorm(1, c_in))
    return finalize(_Classifier(nn.Sequential(*layers), c_in, num_classes), CALIB)


class HybridViT(nn.Module):
    """A conv stem, patches flattened to tokens, sinusoidal encodings whose frequency index
    is ``floor_divide(i, 2)`` of a float range, transformer layers, a mean-token head."""

    def __init__(self, dim: int = 32, depth: int = 2, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(ConvNormAct(3, dim // 2, 3, 2), ConvNormAct(dim // 2, dim, 3, 2),
                                  nn.Conv2d(dim, dim, 2, 2))
        self.blocks = nn.ModuleList(nn.ModuleList([nn.LayerNorm(dim), Attention(dim),
                                                   nn.LayerNorm(dim), nn.Linear(dim, dim)])
                                    for _ in range(depth))
        self.head = nn.Linear(dim, num_classes)

    @staticmethod
    def encoding(n: int, dim: int) -> torch.Tensor:
        pos = torch.arange(n, dtype=torch.float32).unsqueeze(1)
        i = torch.arange(dim, dtype=torch.float32)
        angle = pos / torch.pow(10000.0, 2 * torch.floor_divide(i, 2) / dim)
        return torch.where(torch.remainder(i, 2) == 0, torch.sin(angle), torch.cos(angle))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x).flatten(2).transpose(1, 2)  # (B, N, C), the model's own transpose
        x = x + self.encoding(x.shape[1], x.shape[2])
        for norm1, attn, norm2, mlp in self.blocks:  # type: ignore[misc]
            x = x + attn(norm1(x))
            x = x + F.gelu(mlp(norm2(x)))
        return self.head(x.mean(1))


def hybrid_vit(dim: int = 32, num_classes: int = 10) -> nn.Module:
    return finalize(HybridViT(dim, num_classes=num_classes), CALIB)


MODELS: dict[str, Callable[[], nn.Module]] = {
    "mobilevit_xxs": mobilevit_xxs, "ghostnet": ghostnet, "convmixer": convmixer,
    "poolformer": poolformer, "hybrid_vit": hybrid_vit,
    "mobilenet_v2": lambda: mobilenet.mobilenet_v2(width_mult=0.5, num_classes=10),
    "mobilenet_v3_small": lambda: mobilenet.mobilenet_v3_small(num_classes=10, width_mult=0.5),
    "efficientnet_b0": lambda: efficientnet.efficientnet_b0_like(num_classes=10, width_mult=0.5,
                                                                 depth_mult=0.5),
    "shufflenet_v2": lambda: shufflenet.shufflenet_v2(num_classes=10, repeats=(2, 2, 2),
                                                      channels=(16, 32, 64, 128, 256)),
    "densenet": lambda: densenet.densenet_small(growth_rate=8, block_config=(2, 2, 2),
                                                num_init_features=16, num_classes=10),
    "convnext": lambda: convnext.convnext_stage(num_classes=10, depths=(1, 1, 2, 1),
                                                dims=(16, 32, 64, 128)),
}
