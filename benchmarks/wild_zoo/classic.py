"""Classic ImageNet classifiers for `benchmarks/zoo_floor.py`, at reduced width and depth.

Written from the papers' structure the way the public zoos write them (random weights; no
weights can be downloaded here): VGG-11-BN, ResNet-50-D (average-pool shortcut with
``ceil_mode``), ResNeSt (split attention), SK-ResNet (selective kernels), GCNet (context
blocks), ECA-ResNet, GoogLeNet (inception modules, ``ceil_mode`` max pools), RegNetY
(group convs + squeeze-excite), RepVGG (train-time 3×3 + 1×1 + identity branches),
Inception-v3 (``transform_input`` slicing the input's channels, InceptionA modules) and
Res2Net (channel splits feeding each other, concatenated).
The attention blocks are the ones `model_cases/zoo/wild.py` writes after their reference code.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F
from zoo._common import ConvNormAct, finalize
from zoo.wild import ECA, ContextBlock, SelectiveKernel, SplitAttention

CALIB = (2, 3, 64, 64)
Attn = Callable[[int], nn.Module]


class _Classifier(nn.Module):
    def __init__(self, features: nn.Module, channels: int, num_classes: int) -> None:
        super().__init__()
        self.features, self.fc = features, nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.fc(torch.flatten(x, 1))


def vgg11_bn(width: int = 8, num_classes: int = 10) -> nn.Module:
    """VGG-11 with BatchNorm: max pools, then ``torch.flatten(x, 1)`` of a 2×2 map into FCs."""
    layers: list[nn.Module] = []
    c_in = 3
    for v in (1, "M", 2, "M", 4, 4, "M", 8, 8, "M", 8, 8, "M"):
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers.append(ConvNormAct(c_in, width * int(v), 3))
            c_in = width * int(v)
    head = nn.Sequential(nn.Flatten(1), nn.Linear(c_in * 2 * 2, 64), nn.ReLU(),
                         nn.Dropout(), nn.Linear(64, num_classes))
    return finalize(nn.Sequential(*layers, head), CALIB)


class Bottleneck(nn.Module):
    """ResNet bottleneck with the D-variant shortcut (avg pool, ``ceil_mode``, then 1×1) and
    an optional attention module after the 3×3 (``attn``) or replacing it (``conv``)."""

    def __init__(self, c_in: int, planes: int, stride: int,
                 attn: Attn | None = None, conv: Attn | None = None) -> None:
        super().__init__()
        out = planes * 4
        self.reduce = ConvNormAct(c_in, planes, 1)
        mid: list[nn.Module] = [conv(planes) if conv else ConvNormAct(planes, planes, 3)]
        if stride > 1:
            mid.append(nn.AvgPool2d(3, stride, padding=1))  # ResNeSt/ResNet-D style
        if attn is not None:
            mid.append(attn(planes))
        self.mid = nn.Sequential(*mid)
        self.expand = ConvNormAct(planes, out, 1, act=None)
        self.shortcut: nn.Module = nn.Identity()
        if stride > 1 or c_in != out:
            self.shortcut = nn.Sequential(
                nn.AvgPool2d(stride, stride, ceil_mode=True, count_include_pad=False)
                if stride > 1 else nn.Identity(),
                ConvNormAct(c_in, out, 1, act=None))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.expand(self.mid(self.reduce(x))) + self.shortcut(x))


def _resnet(width: int, depths: tuple[int, ...], num_classes: int,
            attn: Attn | None = None, conv: Attn | None = None) -> nn.Module:
    stem = nn.Sequential(ConvNormAct(3, width // 2, 3, 2), ConvNormAct(width // 2, width // 2),
                         ConvNormAct(width // 2, width), nn.MaxPool2d(3, 2, 1))
    blocks: list[nn.Module] = [stem]
    c_in = width
    for i, depth in enumerate(depths):
        for j in range(depth):
            blocks.append(Bottleneck(c_in, width * 2 ** i, 2 if i and not j else 1, attn, conv))
            c_in = width * 2 ** i * 4
    return finalize(_Classifier(nn.Sequential(*blocks), c_in, num_classes), CALIB)


def resnet50d(width: int = 8, num_classes: int = 10) -> nn.Module:
    return _resnet(width, (2, 2, 2, 1), num_classes)


def resnest(width: int = 8, num_classes: int = 10) -> nn.Module:
    return _resnet(width, (1, 1, 1, 1), num_classes, conv=SplitAttention)


def sk_resnet(width: int = 8, num_classes: int = 10) -> nn.Module:
    return _resnet(width, (1, 1, 1, 1), num_classes, conv=SelectiveKernel)


def gcnet(width: int = 8, num_classes: int = 10) -> nn.Module:
    return _resnet(width, (1, 1, 1, 1), num_classes, attn=ContextBlock)


def eca_resnet(width: int = 8, num_classes: int = 10) -> nn.Module:
    return _resnet(width, (1, 1, 1, 1), num_classes, attn=ECA)


class Inception(nn.Module):
    """GoogLeNet's inception module: 1×1, 1×1→3×3, 1×1→3×3, 3×3 max pool (ceil) → 1×1."""

    def __init__(self, c_in: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, cp: int
                 ) -> None:
        super().__init__()
        self.b1 = ConvNormAct(c_in, c1, 1)
        self.b2 = nn.Sequential(ConvNormAct(c_in, c3r, 1), ConvNormAct(c3r, c3, 3))
        self.b3 = nn.Sequential(ConvNormAct(c_in, c5r, 1), ConvNormAct(c5r, c5, 3))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), ConvNormAct(c_in, cp, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


def googlenet(width: int = 8, num_classes: int = 10) -> nn.Module:
    w = width
    features = nn.Sequential(
        ConvNormAct(3, 2 * w, 7, 2), nn.MaxPool2d(3, 2, ceil_mode=True),
        ConvNormAct(2 * w, 2 * w, 1), ConvNormAct(2 * w, 4 * w, 3),
        nn.MaxPool2d(3, 2, ceil_mode=True),
        Inception(4 * w, w, w, 2 * w, w // 2, w, w), Inception(5 * w, 2 * w, w, 2 * w, w, w, w),
        nn.MaxPool2d(3, 2, ceil_mode=True),
        Inception(6 * w, 2 * w, w, 2 * w, w, w, w))
    return finalize(_Classifier(features, 6 * w, num_classes), CALIB)


class SE(nn.Module):
    def __init__(self, c: int, reduced: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, reduced, 1), nn.Conv2d(reduced, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.fc2(F.relu(self.fc1(s))))


class RegNetYBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, group: int = 8) -> None:
        super().__init__()
        self.a = ConvNormAct(c_in, c_out, 1)
        self.b = ConvNormAct(c_out, c_out, 3, stride, groups=c_out // group)
        self.se = SE(c_out, max(c_in // 4, 4))
        self.c = ConvNormAct(c_out, c_out, 1, act=None)
        self.proj = (nn.Identity() if stride == 1 and c_in == c_out
                     else ConvNormAct(c_in, c_out, 1, stride, act=None))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.c(self.se(self.b(self.a(x)))) + self.proj(x))


def regnety(width: int = 8, num_classes: int = 10) -> nn.Module:
    blocks: list[nn.Module] = [ConvNormAct(3, 4 * width, 3, 2)]
    c_in = 4 * width
    for i, depth in enumerate((1, 1, 2, 1)):
        for j in range(depth):
            c_out = 4 * width * 2 ** i
            blocks.append(RegNetYBlock(c_in, c_out, 2 if j == 0 else 1))
            c_in = c_out
    return finalize(_Classifier(nn.Sequential(*blocks), c_in, num_classes), CALIB)


class RepVGGBlock(nn.Module):
    """RepVGG's training-time block: 3×3-BN + 1×1-BN (+ BN identity) summed, then ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.dense = ConvNormAct(c_in, c_out, 3, stride, act=None)
        self.one = ConvNormAct(c_in, c_out, 1, stride, act=None)
        self.identity = nn.BatchNorm2d(c_in) if c_in == c_out and stride == 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dense(x) + self.one(x)
        return F.relu(y if self.identity is None else y + self.identity(x))


def repvgg(width: int = 8, num_classes: int = 10) -> nn.Module:
    blocks: list[nn.Module] = []
    c_in = 3
    for i, depth in enumerate((1, 2, 2, 2, 1)):
        for j in range(depth):
            c_out = width * 2 ** min(i, 3)
            blocks.append(RepVGGBlock(c_in, c_out, 2 if j == 0 else 1))
            c_in = c_out
    return finalize(_Classifier(nn.Sequential(*blocks), c_in, num_classes), CALIB)


class InceptionV3(nn.Module):
    """Inception-v3's front: ``transform_input`` (each input channel sliced, rescaled and
    concatenated again, as torchvision does for ported weights), the stem, two InceptionA
    modules (5×5 and double 3×3 branches, 3×3 average pool), a strided reduction."""

    def __init__(self, width: int, num_classes: int) -> None:
        super().__init__()
        w = width
        self.stem = nn.Sequential(ConvNormAct(3, 2 * w, 3, 2), ConvNormAct(2 * w, 2 * w, 3),
                                  ConvNormAct(2 * w, 4 * w, 3), nn.MaxPool2d(3, 2),
                                  ConvNormAct(4 * w, 6 * w, 1), ConvNormAct(6 * w, 8 * w, 3))
        self.mixed = nn.ModuleList([self._a(8 * w, w), self._a(9 * w, w)])
        self.reduce = ConvNormAct(9 * w, 12 * w, 3, 2)
        self.fc = nn.Linear(12 * w, num_classes)

    @staticmethod
    def _a(c_in: int, w: int) -> nn.ModuleList:
        return nn.ModuleList([
            ConvNormAct(c_in, 2 * w, 1),
            nn.Sequential(ConvNormAct(c_in, w, 1), ConvNormAct(w, 2 * w, 5)),
            nn.Sequential(ConvNormAct(c_in, 2 * w, 1), ConvNormAct(2 * w, 3 * w, 3),
                          ConvNormAct(3 * w, 3 * w, 3)),
            ConvNormAct(c_in, 2 * w, 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_ch0 = torch.unsqueeze(x[:, 0], 1) * (0.229 / 0.5) + (0.485 - 0.5) / 0.5
        x_ch1 = torch.unsqueeze(x[:, 1], 1) * (0.224 / 0.5) + (0.456 - 0.5) / 0.5
        x_ch2 = torch.unsqueeze(x[:, 2], 1) * (0.225 / 0.5) + (0.406 - 0.5) / 0.5
        x = self.stem(torch.cat((x_ch0, x_ch1, x_ch2), 1))
        for b1, b5, b3, pool in self.mixed:  # type: ignore[misc]
            p = pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
            x = torch.cat([b1(x), b5(x), b3(x), p], 1)
        x = F.adaptive_avg_pool2d(self.reduce(x), (1, 1))
        return self.fc(torch.flatten(F.dropout(x, training=self.training), 1))


def inception_v3(width: int = 8, num_classes: int = 10) -> nn.Module:
    return finalize(InceptionV3(width, num_classes), (2, 3, 75, 75))


class Res2NetBlock(nn.Module):
    """Res2Net's bottle2neck: the 1×1 output split into ``scale`` groups, each 3×3 conv fed
    the previous group's result; the last group average-pooled in a strided block."""

    def __init__(self, c_in: int, width: int, scale: int, stride: int) -> None:
        super().__init__()
        self.scale, self.width, self.stride = scale, width, stride
        self.reduce = ConvNormAct(c_in, width * scale, 1)
        self.convs = nn.ModuleList(ConvNormAct(width, width, 3, stride)
                                   for _ in range(scale - 1))
        self.pool = nn.AvgPool2d(3, stride, 1)
        self.expand = ConvNormAct(width * scale, 4 * width, 1, act=None)
        self.shortcut = (nn.Identity() if stride == 1 and c_in == 4 * width
                         else ConvNormAct(c_in, 4 * width, 1, stride, act=None))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spx = torch.split(self.reduce(x), self.width, 1)
        outs: list[torch.Tensor] = []
        sp = spx[0]
        for i, conv in enumerate(self.convs):
            sp = conv(spx[i] if i == 0 or self.stride > 1 else sp + spx[i])
            outs.append(sp)
        outs.append(self.pool(spx[-1]) if self.stride > 1 else spx[-1])
        return F.relu(self.expand(torch.cat(outs, 1)) + self.shortcut(x))


def res2net(width: int = 8, num_classes: int = 10) -> nn.Module:
    blocks: list[nn.Module] = [ConvNormAct(3, 4 * width, 3, 2), nn.MaxPool2d(3, 2, 1)]
    c_in = 4 * width
    for i in range(3):
        for j in range(2):
            blocks.append(Res2NetBlock(c_in, width * 2 ** i, 4, 2 if i and not j else 1))
            c_in = 4 * width * 2 ** i
    return finalize(_Classifier(nn.Sequential(*blocks), c_in, num_classes), CALIB)


#: name -> factory, in the order the report lists them
MODELS: dict[str, Callable[[], nn.Module]] = {
    "vgg11_bn": vgg11_bn, "resnet50d": resnet50d, "resnest": resnest, "sk_resnet": sk_resnet,
    "gcnet": gcnet, "eca_resnet": eca_resnet, "googlenet": googlenet, "regnety": regnety,
    "repvgg": repvgg, "inception_v3": inception_v3, "res2net": res2net,
}
