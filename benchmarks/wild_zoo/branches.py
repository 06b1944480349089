"""Convolutional idioms as deployed code writes them, small, random weights: CBAM (channel
attention from average and max pools through one MLP, spatial attention from the channel
mean and max), HRNet's multi-resolution fusion (strided convs down, 1x1 conv + nearest
upsample up), CondConv's per-sample kernels (a routing MLP
mixes an expert bank; the batch folded into the groups of one convolution), EfficientNetV2's
fused MBConv, MobileOne's train-time branches, DANet's position and channel attention
(``bmm`` on ``view(B, C, H·W)``), the fast style-transfer net (reflection pad, InstanceNorm,
nearest upsample), CoordConv (coordinate channels concatenated) and a space-to-depth stem
(``pixel_unshuffle``) with a bilinear ``align_corners`` upsampler.
Their floors come from the exported graph (`graph_floor`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


def _cbr(i: int, o: int, k: int = 3, s: int = 1, g: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(i, o, k, s, k // 2, groups=g, bias=False),
                         nn.BatchNorm2d(o), nn.ReLU())


class CBAM(nn.Module):
    """Woo et al.: ``sigmoid(mlp(avgpool) + mlp(maxpool))`` per channel, then
    ``sigmoid(conv7x7(cat[x.mean(1), x.max(1)[0]]))`` per pixel, on a small ResNet stage."""

    def __init__(self, c: int = 32) -> None:
        super().__init__()
        self.stem, self.body = _cbr(3, c, 3, 2), _cbr(c, c)
        self.mlp = nn.Sequential(nn.Conv2d(c, c // 4, 1, bias=False), nn.ReLU(),
                                 nn.Conv2d(c // 4, c, 1, bias=False))
        self.spatial = nn.Conv2d(2, 1, 7, padding=3, bias=False)
        self.head = nn.Linear(c, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = self.body(x)
        ca = torch.sigmoid(self.mlp(F.adaptive_avg_pool2d(y, 1))
                           + self.mlp(F.adaptive_max_pool2d(y, 1)))
        y = y * ca
        sa = torch.cat([y.mean(1, keepdim=True), y.max(1, keepdim=True)[0]], dim=1)
        y = y * torch.sigmoid(self.spatial(sa))
        return self.head(F.relu(x + y).mean((2, 3)))


class HRFusion(nn.Module):
    """HRNet's exchange unit on two branches: high → low by a strided conv-BN, low → high by
    a 1x1 conv-BN and ``F.interpolate(scale_factor=2, mode="nearest")``, each summed, ReLU."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.stem = _cbr(3, c, 3, 2)
        self.hi, self.lo = _cbr(c, c), _cbr(c, 2 * c, 3, 2)
        self.down = nn.Sequential(nn.Conv2d(c, 2 * c, 3, 2, 1, bias=False), nn.BatchNorm2d(2 * c))
        self.up = nn.Sequential(nn.Conv2d(2 * c, c, 1, bias=False), nn.BatchNorm2d(c))
        self.head = nn.Conv2d(3 * c, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        h, l_ = self.hi(x), self.lo(x)
        h2 = F.relu(h + F.interpolate(self.up(l_), scale_factor=2, mode="nearest"))
        l2 = F.relu(l_ + self.down(h))
        up = F.interpolate(l2, size=h2.shape[-2:], mode="bilinear", align_corners=False)
        return self.head(torch.cat([h2, up], 1))


class CondConv(nn.Module):
    """Yang et al.'s conditionally parameterized conv: routing ``sigmoid(fc(gap(x)))`` mixes
    K expert kernels per sample; the batch folded into the groups of one convolution
    (``x.view(1, B·C, H, W)``, weights ``(B·O, C, k, k)``, ``groups=B``), as the reference
    implementation runs it."""

    def __init__(self, c: int = 16, o: int = 24, experts: int = 4) -> None:
        super().__init__()
        self.stem = _cbr(3, c, 3, 2)
        self.route = nn.Linear(c, experts)
        self.weight = nn.Parameter(torch.randn(experts, o * c * 9) * 0.1)
        self.c, self.o = c, o
        self.bn = nn.BatchNorm2d(o)
        self.head = nn.Linear(o, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        b, c, h, w = x.shape
        r = torch.sigmoid(self.route(x.mean((2, 3))))
        weight = (r @ self.weight).view(b * self.o, c, 3, 3)
        y = F.conv2d(x.reshape(1, b * c, h, w), weight, padding=1, groups=b)
        y = F.relu(self.bn(y.view(b, self.o, h, w)))
        return self.head(y.mean((2, 3)))


class FusedMBConv(nn.Module):
    """EfficientNetV2's early stages: a 3x3 expand conv-BN-SiLU, squeeze-excite, a 1x1
    projection, the residual (stochastic depth is the identity at inference)."""

    def __init__(self, c: int = 24, expand: int = 4) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c),
                                  nn.SiLU())
        e = c * expand
        self.expand = nn.Sequential(nn.Conv2d(c, e, 3, 1, 1, bias=False), nn.BatchNorm2d(e),
                                    nn.SiLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(e, c // 4, 1), nn.SiLU(),
                                nn.Conv2d(c // 4, e, 1), nn.Sigmoid())
        self.project = nn.Sequential(nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c))
        self.head = nn.Linear(c, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = self.expand(x)
        x = x + self.project(y * self.se(y))
        return self.head(x.mean((2, 3)))


class MobileOne(nn.Module):
    """Vasu et al.'s train-time block before re-parameterization: k 3x3 depthwise conv-BN
    branches, a 1x1 conv-BN branch and a BN-only identity branch, summed, ReLU; then the
    same for the 1x1 pointwise part."""

    def __init__(self, c: int = 24, k: int = 3) -> None:
        super().__init__()
        self.stem = _cbr(3, c, 3, 2)

        def bn_conv(ks: int, g: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(c, c, ks, 1, ks // 2, groups=g, bias=False),
                                 nn.BatchNorm2d(c))

        self.dw = nn.ModuleList([bn_conv(3, c) for _ in range(k)] + [bn_conv(1, c)])
        self.dw_id = nn.BatchNorm2d(c)
        self.pw = nn.ModuleList(bn_conv(1, 1) for _ in range(k))
        self.pw_id = nn.BatchNorm2d(c)
        self.head = nn.Linear(c, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = F.relu(sum((b(x) for b in self.dw), self.dw_id(x)))
        x = F.relu(sum((b(x) for b in self.pw), self.pw_id(x)))
        return self.head(x.mean((2, 3)))


class DANet(nn.Module):
    """Fu et al.'s dual attention head: position attention (``bmm`` of ``query.view(B, C',
    N).permute(0, 2, 1)`` and ``key.view(B, C', N)``, softmax, ``bmm(value.view(B, C, N),
    attention.permute(0, 2, 1))``) and channel attention (``energy.max(-1)`` minus energy,
    softmax, ``bmm`` with ``x.view(B, C, N)``), each ``gamma · out + x``, summed."""

    def __init__(self, c: int = 32) -> None:
        super().__init__()
        self.stem = nn.Sequential(_cbr(3, c, 3, 2), _cbr(c, c, 3, 2))
        self.q, self.k, self.v = nn.Conv2d(c, c // 8, 1), nn.Conv2d(c, c // 8, 1), nn.Conv2d(
            c, c, 1)
        self.gamma_p, self.gamma_c = nn.Parameter(torch.tensor(0.5)), nn.Parameter(
            torch.tensor(0.7))
        self.out = nn.Conv2d(c, 5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        b, c, h, w = x.shape
        q = self.q(x).view(b, -1, h * w).permute(0, 2, 1)
        att = torch.softmax(torch.bmm(q, self.k(x).view(b, -1, h * w)), dim=-1)
        pos = torch.bmm(self.v(x).view(b, -1, h * w), att.permute(0, 2, 1)).view(b, c, h, w)
        pos = self.gamma_p * pos + x
        flat = x.view(b, c, -1)
        energy = torch.bmm(flat, flat.permute(0, 2, 1))
        energy = torch.max(energy, -1, keepdim=True)[0].expand_as(energy) - energy
        chan = torch.bmm(torch.softmax(energy, dim=-1), flat).view(b, c, h, w)
        chan = self.gamma_c * chan + x
        return self.out(pos + chan)


class StyleTransfer(nn.Module):
    """The fast neural style net (Johnson et al., PyTorch's example): reflection-padded
    convs with InstanceNorm, a residual block, nearest-upsampled convs back to RGB."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()

        def conv(i: int, o: int, k: int, s: int = 1) -> nn.Sequential:
            return nn.Sequential(nn.ReflectionPad2d(k // 2), nn.Conv2d(i, o, k, s))

        self.c1, self.n1 = conv(3, c, 9), nn.InstanceNorm2d(c, affine=True)
        self.c2, self.n2 = conv(c, 2 * c, 3, 2), nn.InstanceNorm2d(2 * c, affine=True)
        self.r1, self.rn1 = conv(2 * c, 2 * c, 3), nn.InstanceNorm2d(2 * c, affine=True)
        self.r2, self.rn2 = conv(2 * c, 2 * c, 3), nn.InstanceNorm2d(2 * c, affine=True)
        self.u1, self.un1 = conv(2 * c, c, 3), nn.InstanceNorm2d(c, affine=True)
        self.out = conv(c, 3, 9)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.n1(self.c1(x)))
        y = F.relu(self.n2(self.c2(y)))
        y = y + self.rn2(self.r2(F.relu(self.rn1(self.r1(y)))))
        y = F.interpolate(y, scale_factor=2, mode="nearest")
        y = F.relu(self.un1(self.u1(y)))
        return self.out(y)


class CoordSpaceToDepth(nn.Module):
    """CoordConv (``cat`` of x and y coordinate planes built with ``linspace``) after a
    space-to-depth stem (``F.pixel_unshuffle``), a bilinear ``align_corners=True``
    upsampler back to the input size."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(12 + 2, c, 3, 1, 1), nn.ReLU(),
                                  nn.Conv2d(c, c, 3, 1, 1))
        self.out = nn.Conv2d(c, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.pixel_unshuffle(x, 2)
        b, _, h, w = s.shape
        ys = torch.linspace(-1, 1, h).view(1, 1, h, 1).expand(b, 1, h, w)
        xs = torch.linspace(-1, 1, w).view(1, 1, 1, w).expand(b, 1, h, w)
        y = self.body(torch.cat([s, ys, xs], 1))
        return F.interpolate(self.out(y), scale_factor=2, mode="bilinear", align_corners=True)


MODELS: dict[str, Callable[[], nn.Module]] = {
    "cbam": lambda: CBAM(),
    "hrnet_fusion": lambda: HRFusion(),
    "condconv": lambda: CondConv(),
    "fused_mbconv": lambda: FusedMBConv(),
    "mobileone_train": lambda: MobileOne(),
    "danet": lambda: DANet(),
    "style_transfer": lambda: StyleTransfer(),
    "coordconv_s2d": lambda: CoordSpaceToDepth(),
}
