"""Multi-branch, multi-scale and restoration idioms as their reference code writes them,
small, random weights: GoogLeNet's inception module and SqueezeNet's fire modules (branches
concatenated, ``ceil_mode`` pools), SSDLite's and YOLOX's detection heads (per-level
``permute``/``reshape`` or ``flatten`` then ``cat`` and ``permute``), PSPNet's pyramid pooling
(adaptive pools with uneven bins, bilinear back), LR-ASPP's gated head, DLA's IDA-up
(depthwise transposed convs), RegNetY's grouped X-blocks with squeeze-excite, ESRGAN's
residual-in-residual dense block (a nearest upsampler), NAFNet's block (a hand-written
channel LayerNorm, SimpleGate, simplified channel attention), Restormer's transposed
attention (channel-by-channel attention, LayerNorm through ``to_3d``/``to_4d``).
Norm affines are randomized and BatchNorm calibrated on one batch (`finalize`); the floors
come from the exported graph (`graph_floor`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from zoo._common import finalize

CALIB = (2, 3, 64, 64)


def _cbr(i: int, o: int, k: int = 3, s: int = 1, g: int = 1,
         act: Callable[[], nn.Module] = nn.ReLU) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(i, o, k, s, k // 2, groups=g, bias=False),
                         nn.BatchNorm2d(o), act())


class InceptionV1(nn.Module):
    """Szegedy et al.'s GoogLeNet: a 7x7/2 stem with ``ceil_mode`` max pools, one inception
    module (1x1; 1x1 → 3x3; 1x1 → 5x5; 3x3 max pool (stride 1) → 1x1, concatenated on the
    channels), a ``MaxPool2d(3, 2, ceil_mode=True)``, adaptive average pool and a Linear."""

    def __init__(self, c: int = 16, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            _cbr(3, c, 7, 2), nn.MaxPool2d(3, 2, ceil_mode=True),
            _cbr(c, c, 1), _cbr(c, 2 * c, 3), nn.MaxPool2d(3, 2, ceil_mode=True))
        i = 2 * c
        self.b1 = _cbr(i, 16, 1)
        self.b2 = nn.Sequential(_cbr(i, 16, 1), _cbr(16, 24, 3))
        self.b3 = nn.Sequential(_cbr(i, 8, 1), _cbr(8, 8, 5))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1), _cbr(i, 8, 1))
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.avg = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16 + 24 + 8 + 8, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)
        x = self.avg(self.pool(x))
        return self.fc(torch.flatten(x, 1))


class Fire(nn.Module):
    def __init__(self, i: int, squeeze: int, expand: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(i, squeeze, 1)
        self.e1 = nn.Conv2d(squeeze, expand, 1)
        self.e3 = nn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.squeeze(x))
        return torch.cat([F.relu(self.e1(x)), F.relu(self.e3(x))], 1)


class SqueezeNetFire(nn.Module):
    """Iandola et al.'s SqueezeNet 1.1: an unpadded 3x3/2 stem, ``ceil_mode`` max pools, two
    fire modules (1x1 squeeze; 1x1 and 3x3 expands concatenated), a 1x1 conv classifier,
    ReLU, adaptive average pool and ``flatten``."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(32, 8, 16), Fire(32, 8, 16), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(32, 12, 24))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(48, num_classes, 1),
                                        nn.ReLU(), nn.AdaptiveAvgPool2d(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


class SSDLiteHead(nn.Module):
    """Liu et al.'s SSD with MobileNetV2's SSDLite heads on two backbone levels: per level a
    depthwise 3x3 conv-BN-ReLU6 then a 1x1 conv for the boxes (A·4) and the scores (A·K),
    each ``permute(0, 2, 3, 1).reshape(B, -1, 4)`` (``-1, K``), levels concatenated on
    dim 1; returns (boxes, scores)."""

    def __init__(self, anchors: int = 6, num_classes: int = 5) -> None:
        super().__init__()
        self.k = num_classes
        self.body = nn.Sequential(_cbr(3, 16, 3, 2, act=nn.ReLU6),
                                  _cbr(16, 24, 3, 2, act=nn.ReLU6),
                                  _cbr(24, 32, 3, 2, act=nn.ReLU6))  # 8x8
        self.extra = _cbr(32, 48, 3, 2, act=nn.ReLU6)  # 4x4

        def head(i: int, o: int) -> nn.Sequential:
            return nn.Sequential(_cbr(i, i, 3, 1, i, act=nn.ReLU6), nn.Conv2d(i, o, 1))

        self.box = nn.ModuleList([head(32, anchors * 4), head(48, anchors * 4)])
        self.cls = nn.ModuleList([head(32, anchors * num_classes),
                                  head(48, anchors * num_classes)])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f1 = self.body(x)
        f2 = self.extra(f1)
        b = x.shape[0]
        boxes, scores = [], []
        for f, bh, ch in zip((f1, f2), self.box, self.cls, strict=True):
            boxes.append(bh(f).permute(0, 2, 3, 1).reshape(b, -1, 4))
            scores.append(ch(f).permute(0, 2, 3, 1).reshape(b, -1, self.k))
        return torch.cat(boxes, 1), torch.cat(scores, 1)


class PSPNetPPM(nn.Module):
    """Zhao et al.'s PSPNet pyramid pooling module on a 16x16 map: ``AdaptiveAvgPool2d``
    bins 1, 2, 3, 6 (3 and 6 uneven on 16), each a 1x1 conv-BN-ReLU and
    ``F.interpolate(mode="bilinear", align_corners=False)`` back, concatenated with the
    input, a 3x3 conv-BN-ReLU and a 1x1 classifier."""

    def __init__(self, c: int = 32, num_classes: int = 6) -> None:
        super().__init__()
        self.body = nn.Sequential(_cbr(3, 16, 3, 2), _cbr(16, c, 3, 2))
        self.stages = nn.ModuleList(
            nn.Sequential(nn.AdaptiveAvgPool2d(b), _cbr(c, c // 4, 1)) for b in (1, 2, 3, 6))
        self.bottleneck = _cbr(2 * c, c, 3)
        self.cls = nn.Conv2d(c, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.body(x)
        size = x.shape[-2:]
        pyramid = [x] + [F.interpolate(s(x), size=size, mode="bilinear", align_corners=False)
                         for s in self.stages]
        return self.cls(self.bottleneck(torch.cat(pyramid, 1)))


class LayerNorm2d(nn.Module):
    """NAFNet's channel LayerNorm, written out: mean and variance over dim 1."""

    def __init__(self, c: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(c) + 0.5)
        self.bias = nn.Parameter(torch.randn(c) * 0.2)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.shape[1]
        mu = x.mean(1, keepdim=True)
        var = (x - mu).pow(2).mean(1, keepdim=True)
        y = (x - mu) / (var + self.eps).sqrt()
        return self.weight.view(1, c, 1, 1) * y + self.bias.view(1, c, 1, 1)


class NAFBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = LayerNorm2d(c), LayerNorm2d(c)
        self.conv1 = nn.Conv2d(c, 2 * c, 1)
        self.conv2 = nn.Conv2d(2 * c, 2 * c, 3, padding=1, groups=2 * c)
        self.sca = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, c, 1))
        self.conv3 = nn.Conv2d(c, c, 1)
        self.conv4 = nn.Conv2d(c, 2 * c, 1)
        self.conv5 = nn.Conv2d(c, c, 1)
        # zero-initialised in NAFNet; random here so both halves count
        self.beta = nn.Parameter(torch.randn(1, c, 1, 1) * 0.5)
        self.gamma = nn.Parameter(torch.randn(1, c, 1, 1) * 0.5)

    @staticmethod
    def gate(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=1)
        return x1 * x2

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        x = self.gate(self.conv2(self.conv1(self.norm1(inp))))
        x = self.conv3(x * self.sca(x))
        y = inp + x * self.beta
        x = self.conv5(self.gate(self.conv4(self.norm2(y))))
        return y + x * self.gamma


class NAFNet(nn.Module):
    """Chen et al.'s NAFNet (nonlinear-activation-free restoration): an intro 3x3 conv, two
    NAF blocks (hand-written channel LayerNorm with ``(1, C, 1, 1)`` weight views, 1x1 conv,
    3x3 depthwise, SimpleGate ``x1 * x2`` of ``chunk(2, dim=1)``, simplified channel
    attention, 1x1 conv, ``beta``-scaled residual; the FFN half likewise with ``gamma``), an
    ending 3x3 conv plus the input image."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.intro = nn.Conv2d(3, c, 3, padding=1)
        self.blocks = nn.Sequential(NAFBlock(c), NAFBlock(c))
        self.ending = nn.Conv2d(c, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ending(self.blocks(self.intro(x)))


class DenseBlock5(nn.Module):
    def __init__(self, nf: int, gc: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(nf + i * gc, gc if i < 4 else nf, 3, 1, 1)
                                   for i in range(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = [x]
        for i, conv in enumerate(self.convs):
            y = conv(torch.cat(feats, 1))
            if i < 4:
                feats.append(F.leaky_relu(y, 0.2))
        return y * 0.2 + x


class ESRGANRRDB(nn.Module):
    """Wang et al.'s ESRGAN generator with one residual-in-residual dense block (three dense
    blocks of five convs on ``cat`` of all earlier features, LeakyReLU(0.2), residuals
    scaled by 0.2), the trunk conv, an upsampler of ``F.interpolate(scale_factor=2,
    mode="nearest")`` + conv + LeakyReLU, an HR conv and the last conv."""

    def __init__(self, nf: int = 16, gc: int = 16) -> None:
        super().__init__()
        self.first = nn.Conv2d(3, nf, 3, 1, 1)
        self.rdbs = nn.ModuleList(DenseBlock5(nf, gc) for _ in range(3))
        self.trunk = nn.Conv2d(nf, nf, 3, 1, 1)
        self.up = nn.Conv2d(nf, nf, 3, 1, 1)
        self.hr = nn.Conv2d(nf, nf, 3, 1, 1)
        self.last = nn.Conv2d(nf, 3, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fea = self.first(x)
        y = fea
        for rdb in self.rdbs:
            y = rdb(y)
        fea = fea + self.trunk(y * 0.2 + fea)
        fea = F.leaky_relu(self.up(F.interpolate(fea, scale_factor=2, mode="nearest")), 0.2)
        return self.last(F.leaky_relu(self.hr(fea), 0.2))


class XBlockSE(nn.Module):
    def __init__(self, i: int, o: int, group_width: int = 8, se_ratio: float = 0.25) -> None:
        super().__init__()
        self.a = _cbr(i, o, 1)
        self.b = _cbr(o, o, 3, 2, o // group_width)
        se = max(1, round(i * se_ratio))
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(o, se, 1), nn.ReLU(),
                                nn.Conv2d(se, o, 1), nn.Sigmoid())
        self.c = nn.Sequential(nn.Conv2d(o, o, 1, bias=False), nn.BatchNorm2d(o))
        self.proj = nn.Sequential(nn.Conv2d(i, o, 1, 2, bias=False), nn.BatchNorm2d(o))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b(self.a(x))
        y = self.c(y * self.se(y))
        return F.relu(self.proj(x) + y)


class RegNetYBlock(nn.Module):
    """Radosavovic et al.'s RegNetY: a 3x3/2 stem and two X-blocks with SE (1x1 conv-BN-ReLU,
    3x3 group conv of group width 8 at stride 2, squeeze-excite, 1x1 conv-BN, a strided 1x1
    conv-BN shortcut, ReLU of the sum), average pool and a Linear."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = _cbr(3, 16, 3, 2)
        self.blocks = nn.Sequential(XBlockSE(16, 32), XBlockSE(32, 48))
        self.fc = nn.Linear(48, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class LRASPPHead(nn.Module):
    """Howard et al.'s MobileNetV3 LR-ASPP segmentation head on a stride-8 and a stride-16
    feature: 1x1 conv-BN-ReLU times a gate ``sigmoid(conv1x1(AdaptiveAvgPool2d(1)))``,
    bilinear to the low-level size, a high classifier plus a low-level 1x1 classifier,
    bilinear to the input size."""

    def __init__(self, inter: int = 32, num_classes: int = 5) -> None:
        super().__init__()
        self.low = nn.Sequential(_cbr(3, 16, 3, 2, act=nn.Hardswish),
                                 _cbr(16, 16, 3, 2, act=nn.Hardswish),
                                 _cbr(16, 24, 3, 2, act=nn.Hardswish))
        self.high = nn.Sequential(_cbr(24, 24, 3, 1, 24, act=nn.Hardswish),
                                  _cbr(24, 48, 1, act=nn.Hardswish),
                                  _cbr(48, 48, 3, 2, 48, act=nn.Hardswish))
        self.cbr = _cbr(48, inter, 1)
        self.scale = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(48, inter, 1, bias=False),
                                   nn.Sigmoid())
        self.low_classifier = nn.Conv2d(24, num_classes, 1)
        self.high_classifier = nn.Conv2d(inter, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low = self.low(x)
        high = self.high(low)
        y = self.cbr(high) * self.scale(high)
        y = F.interpolate(y, size=low.shape[-2:], mode="bilinear", align_corners=False)
        y = self.low_classifier(low) + self.high_classifier(y)
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


class YOLOXHead(nn.Module):
    """Ge et al.'s YOLOX decoupled head on three backbone levels (strides 8, 16, 32): a 1x1
    stem, a classification branch (two 3x3 conv-BN-SiLU, 1x1 prediction) and a regression
    branch (two 3x3 conv-BN-SiLU; box (4) and objectness (1) predictions); per level
    ``cat([reg, obj.sigmoid(), cls.sigmoid()], 1)``, ``flatten(start_dim=2)``, levels
    ``cat`` on dim 2 and ``permute(0, 2, 1)``."""

    def __init__(self, width: int = 32, num_classes: int = 5) -> None:
        super().__init__()
        act = nn.SiLU
        self.s1 = nn.Sequential(_cbr(3, 16, 3, 2, act=act), _cbr(16, 16, 3, 2, act=act),
                                _cbr(16, 16, 3, 2, act=act))
        self.s2 = _cbr(16, 32, 3, 2, act=act)
        self.s3 = _cbr(32, 64, 3, 2, act=act)
        chans = (16, 32, 64)
        self.stems = nn.ModuleList(_cbr(c, width, 1, act=act) for c in chans)
        self.cls_convs = nn.ModuleList(
            nn.Sequential(_cbr(width, width, 3, act=act), _cbr(width, width, 3, act=act))
            for _ in chans)
        self.reg_convs = nn.ModuleList(
            nn.Sequential(_cbr(width, width, 3, act=act), _cbr(width, width, 3, act=act))
            for _ in chans)
        self.cls_preds = nn.ModuleList(nn.Conv2d(width, num_classes, 1) for _ in chans)
        self.reg_preds = nn.ModuleList(nn.Conv2d(width, 4, 1) for _ in chans)
        self.obj_preds = nn.ModuleList(nn.Conv2d(width, 1, 1) for _ in chans)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.s1(x)
        p4 = self.s2(p3)
        p5 = self.s3(p4)
        outputs = []
        for k, f in enumerate((p3, p4, p5)):
            f = self.stems[k](f)
            cls = self.cls_preds[k](self.cls_convs[k](f))
            reg_feat = self.reg_convs[k](f)
            reg, obj = self.reg_preds[k](reg_feat), self.obj_preds[k](reg_feat)
            outputs.append(torch.cat([reg, obj.sigmoid(), cls.sigmoid()], 1))
        return torch.cat([o.flatten(start_dim=2) for o in outputs], dim=2).permute(0, 2, 1)


class MDTA(nn.Module):
    """Restormer's multi-Dconv head transposed attention: attention across channels."""

    def __init__(self, c: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.temperature = nn.Parameter(torch.rand(heads, 1, 1) + 0.5)
        self.qkv = nn.Conv2d(c, 3 * c, 1, bias=False)
        self.qkv_dw = nn.Conv2d(3 * c, 3 * c, 3, padding=1, groups=3 * c, bias=False)
        self.project_out = nn.Conv2d(c, c, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        q, k, v = self.qkv_dw(self.qkv(x)).chunk(3, dim=1)
        q = q.reshape(b, self.heads, c // self.heads, h * w)
        k = k.reshape(b, self.heads, c // self.heads, h * w)
        v = v.reshape(b, self.heads, c // self.heads, h * w)
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        attn = ((q @ k.transpose(-2, -1)) * self.temperature).softmax(dim=-1)
        return self.project_out((attn @ v).reshape(b, c, h, w))


class GDFN(nn.Module):
    def __init__(self, c: int, factor: float = 2.66) -> None:
        super().__init__()
        hidden = int(c * factor)
        self.project_in = nn.Conv2d(c, 2 * hidden, 1, bias=False)
        self.dw = nn.Conv2d(2 * hidden, 2 * hidden, 3, padding=1, groups=2 * hidden,
                            bias=False)
        self.project_out = nn.Conv2d(hidden, c, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1, x2 = self.dw(self.project_in(x)).chunk(2, dim=1)
        return self.project_out(F.gelu(x1) * x2)


def to_3d(x: torch.Tensor) -> torch.Tensor:
    b, c, h, w = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, h * w, c)


def to_4d(x: torch.Tensor, h: int, w: int) -> torch.Tensor:
    b, _, c = x.shape
    return x.reshape(b, h, w, c).permute(0, 3, 1, 2)


class RestormerBlock(nn.Module):
    """Zamir et al.'s Restormer: a 3x3 patch embed, one transformer block (LayerNorm through
    ``to_3d``/``to_4d`` rearranges; MDTA: 1x1 qkv + 3x3 depthwise, q, k, v as (B, heads,
    C/heads, H·W), ``F.normalize`` on q and k, ``q @ kᵀ`` times a (heads, 1, 1)
    temperature, softmax, ``@ v``, 1x1 projection; GDFN: a GELU-gated depthwise FFN; both
    residual), a 3x3 output conv plus the input image."""

    def __init__(self, c: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, c, 3, padding=1, bias=False)
        self.norm1, self.norm2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.attn, self.ffn = MDTA(c, heads), GDFN(c)
        self.out = nn.Conv2d(c, 3, 3, padding=1, bias=False)

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        x = self.embed(inp)
        h, w = x.shape[-2:]
        x = x + self.attn(to_4d(self.norm1(to_3d(x)), h, w))
        x = x + self.ffn(to_4d(self.norm2(to_3d(x)), h, w))
        return self.out(x) + inp


class DLAIDAUp(nn.Module):
    """Yu et al.'s DLA iterative deep aggregation as CenterNet's ``IDAUp`` runs it on strides
    4, 8, 16: each deeper map projected by a 3x3 conv-BN-ReLU, upsampled by a depthwise
    ``ConvTranspose2d`` (kernel 2f, stride f, padding f/2, no bias), added to the shallower
    (already aggregated) map, a 3x3 conv-BN-ReLU node; a 1x1 heatmap head."""

    def __init__(self, o: int = 16, num_classes: int = 4) -> None:
        super().__init__()
        self.s4 = nn.Sequential(_cbr(3, 16, 3, 2), _cbr(16, 16, 3, 2))
        self.s8 = _cbr(16, 32, 3, 2)
        self.s16 = _cbr(32, 64, 3, 2)
        chans, factors = (32, 64), (2, 4)
        self.proj = nn.ModuleList(_cbr(c, o, 3) for c in chans)
        self.up = nn.ModuleList(nn.ConvTranspose2d(o, o, 2 * f, stride=f, padding=f // 2,
                                                   groups=o, bias=False) for f in factors)
        self.node = nn.ModuleList(_cbr(o, o, 3) for _ in chans)
        self.head = nn.Conv2d(o, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = [self.s4(x)]
        layers.append(self.s8(layers[0]))
        layers.append(self.s16(layers[1]))
        for i in range(1, 3):
            up = self.up[i - 1](self.proj[i - 1](layers[i]))
            layers[i] = self.node[i - 1](up + layers[i - 1])
        return self.head(layers[-1])


def _built(cls: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    return lambda: finalize(cls(), CALIB)


MODELS: dict[str, Callable[[], nn.Module]] = {
    "inception_v1": _built(InceptionV1),
    "squeezenet_fire": _built(SqueezeNetFire),
    "ssdlite_head": _built(SSDLiteHead),
    "pspnet_ppm": _built(PSPNetPPM),
    "nafnet_block": _built(NAFNet),
    "esrgan_rrdb": _built(ESRGANRRDB),
    "regnety_block": _built(RegNetYBlock),
    "lraspp_head": _built(LRASPPHead),
    "yolox_head": _built(YOLOXHead),
    "restormer_mdta": _built(RestormerBlock),
    "dla_ida_up": _built(DLAIDAUp),
}
