"""Patterns from architectures nobody here designed (issue #15), each in a small network.

Every block is written the way its paper's reference code (and the public zoos) write it, so
the exported graph has the same reshapes, reductions and broadcasts: split attention
(ResNeSt), selective kernels (SKNet), global context (GCNet), efficient channel attention
(ECA-Net), a MobileViT block (unfold to patches, attention, fold back), ResNet-D / Inception
pooling (average pooling with ``ceil_mode`` after a strided block, max pooling after
``F.pad``), a learnable scalar scale and shift, a VGG flatten → Linear head, and a sinusoidal
positional encoding that floor-divides float positions by a Python int.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from zoo._common import ConvNormAct, finalize


def _stem(width: int) -> nn.Module:
    return ConvNormAct(3, width, 3, stride=2)


class RadixSoftmax(nn.Module):
    """ResNeSt's rSoftMax: softmax across the radix splits of each cardinal group."""

    def __init__(self, radix: int, groups: int) -> None:
        super().__init__()
        self.radix, self.groups = radix, groups

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.size(0)
        x = x.view(n, self.groups, self.radix, -1).transpose(1, 2)
        return F.softmax(x, dim=1).reshape(n, -1, 1, 1)


class SplitAttention(nn.Module):
    """ResNeSt's SplAtConv2d: ``radix`` splits of the channels, attention over the splits."""

    def __init__(self, channels: int, radix: int = 2, groups: int = 1) -> None:
        super().__init__()
        self.radix = radix
        inter = max(channels * radix // 4, 8)
        self.conv = ConvNormAct(channels, channels * radix, 3, groups=groups * radix)
        self.fc1 = nn.Sequential(nn.Conv2d(channels, inter, 1, groups=groups),
                                 nn.BatchNorm2d(inter), nn.ReLU())
        self.fc2 = nn.Conv2d(inter, channels * radix, 1, groups=groups)
        self.rsoftmax = RadixSoftmax(radix, groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        n, rc, h, w = x.shape
        splits = x.view(n, self.radix, rc // self.radix, h, w)
        gap = F.adaptive_avg_pool2d(splits.sum(dim=1), 1)
        attn = self.rsoftmax(self.fc2(self.fc1(gap))).view(n, self.radix, rc // self.radix, 1, 1)
        return (splits * attn).sum(dim=1).contiguous()


class SelectiveKernel(nn.Module):
    """SKNet's SKConv: 3×3 and dilated 3×3 branches, fused, softmax attention over the two."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.paths = nn.ModuleList([
            ConvNormAct(channels, channels, 3),
            nn.Sequential(nn.Conv2d(channels, channels, 3, padding=2, dilation=2, bias=False),
                          nn.BatchNorm2d(channels), nn.ReLU()),
        ])
        inter = max(channels // 2, 8)
        self.reduce = ConvNormAct(channels, inter, 1)
        self.select = nn.Conv2d(inter, channels * 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c = x.shape[:2]
        feats = torch.stack([p(x) for p in self.paths], dim=1)  # (n, 2, c, h, w)
        attn = self.select(self.reduce(feats.sum(1).mean((2, 3), keepdim=True)))
        attn = torch.softmax(attn.view(n, 2, c, 1, 1), dim=1)
        return (feats * attn).sum(1)


class ContextBlock(nn.Module):
    """GCNet's context block: attention pooling over H·W, a bottleneck transform, added back."""

    def __init__(self, channels: int, ratio: float = 0.25) -> None:
        super().__init__()
        hidden = max(int(channels * ratio), 4)
        self.mask = nn.Conv2d(channels, 1, 1)
        self.transform = nn.Sequential(nn.Conv2d(channels, hidden, 1),
                                       nn.LayerNorm([hidden, 1, 1]), nn.ReLU(),
                                       nn.Conv2d(hidden, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        inp = x.view(n, c, h * w).unsqueeze(1)  # (n, 1, c, hw)
        mask = F.softmax(self.mask(x).view(n, 1, h * w), dim=2).unsqueeze(-1)  # (n, 1, hw, 1)
        context = torch.matmul(inp, mask).view(n, c, 1, 1)
        return x + self.transform(context)


class ECA(nn.Module):
    """ECA-Net's eca_layer as published: a 1-D conv across the pooled channel vector."""

    def __init__(self, channels: int, gamma: int = 2, b: int = 1) -> None:
        super().__init__()
        t = int(abs((math.log2(channels) + b) / gamma))
        k = t if t % 2 else t + 1
        self.conv = nn.Conv1d(1, 1, k, padding=(k - 1) // 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.adaptive_avg_pool2d(x, 1)
        y = self.conv(y.squeeze(-1).transpose(-1, -2)).transpose(-1, -2).unsqueeze(-1)
        return x * torch.sigmoid(y).expand_as(x)


class Attention(nn.Module):
    """Multi-head self-attention written out (timm's Attention): the model's own transposes."""

    def __init__(self, dim: int, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        x = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(x)


class MobileViTBlock(nn.Module):
    """MobileViT's block: local conv, unfold into patches, a transformer layer, fold back."""

    def __init__(self, channels: int, dim: int, patch: int = 2) -> None:
        super().__init__()
        self.patch = patch
        self.local = nn.Sequential(ConvNormAct(channels, channels, 3), nn.Conv2d(channels, dim, 1))
        self.norm1, self.attn = nn.LayerNorm(dim), Attention(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.SiLU(), nn.Linear(2 * dim, dim))
        self.proj = ConvNormAct(dim, channels, 1, act=nn.SiLU)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.local(x)
        b, c, h, w = x.shape
        p = self.patch
        nh, nw = h // p, w // p
        # [B, C, H, W] -> [B*C*nh, nw, p, p] -> [B*P, N, C]
        x = x.reshape(b * c * nh, p, nw, p).transpose(1, 2)
        x = x.reshape(b, c, nh * nw, p * p).transpose(1, 3).reshape(b * p * p, nh * nw, -1)
        x = x + self.attn(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        # [B*P, N, C] -> [B, C, H, W]
        x = x.contiguous().view(b, p * p, nh * nw, -1)
        x = x.transpose(1, 3).reshape(b * c * nh, nw, p, p)
        x = x.transpose(1, 2).reshape(b, c, nh * p, nw * p)
        return self.proj(x)


class Pools(nn.Module):
    """ResNet-D's average-pool shortcut after a strided block (``ceil_mode``, no padded
    zeros counted) and an Inception-style max pool after an asymmetric ``F.pad``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.block = ConvNormAct(width, width, 3, stride=2)
        self.down = nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False)
        self.conv = ConvNormAct(width, width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.down(self.block(x))
        x = F.max_pool2d(F.pad(x, (0, 1, 0, 1)), 3, 2, ceil_mode=True)
        return self.conv(x)


class ScalarAffine(nn.Module):
    """``x * self.scale + self.bias`` with one-element parameters (learnable scalar affine)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv = ConvNormAct(width, width, 3)
        self.scale = nn.Parameter(torch.full((1,), 0.75))
        self.bias = nn.Parameter(torch.full((1,), 0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) * self.scale + self.bias


class PoolHead(nn.Module):
    """Global average pool and a Linear classifier, as most ImageNet models end."""

    def __init__(self, width: int, num_classes: int = 10) -> None:
        super().__init__()
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Net(nn.Module):
    """Stem, one pattern block, a 1×1 conv and a classifier head: what remains besides the
    model's own permutes is the NCHW input's one transform (none with NHWC input)."""

    def __init__(self, width: int, block: nn.Module, head: nn.Module | None = None) -> None:
        super().__init__()
        self.stem, self.block = _stem(width), block
        self.out = ConvNormAct(width, width, 1)
        self.head = PoolHead(width) if head is None else head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.out(self.block(self.stem(x))))


class VGGHead(nn.Module):
    """VGG's classifier: max pool, ``torch.flatten(x, 1)`` of the C×H×W map, Linear layers."""

    def __init__(self, width: int, spatial: int, num_classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width * spatial * spatial, 32)
        self.fc2 = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(F.max_pool2d(x, 2), 1)
        return self.fc2(F.relu(self.fc1(x)))


class PositionalEncoding(nn.Module):
    """A sinusoidal 2-D encoding added to the map; the channel pairing uses ``//`` on float
    positions (``torch.floor_divide(pos, 2)``), as transformer helpers write it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c, w = x.shape[1], x.shape[-1]
        pos = torch.arange(w, dtype=torch.float32)
        dim = torch.arange(c, dtype=torch.float32)
        freq = torch.pow(10000.0, 2 * torch.floor_divide(dim, 2) / c)
        angle = pos.view(1, w) / freq.view(c, 1)
        enc = torch.where(torch.remainder(dim, 2).view(c, 1) == 0, torch.sin(angle),
                          torch.cos(angle))
        return x + enc.view(1, c, 1, w)


_CALIB = (2, 3, 32, 32)


def split_attention(width: int = 16) -> nn.Module:
    return finalize(Net(width, SplitAttention(width)), _CALIB)


def selective_kernel(width: int = 16) -> nn.Module:
    return finalize(Net(width, SelectiveKernel(width)), _CALIB)


def global_context(width: int = 16) -> nn.Module:
    return finalize(Net(width, ContextBlock(width)), _CALIB)


def eca(width: int = 16) -> nn.Module:
    return finalize(Net(width, nn.Sequential(ConvNormAct(width, width, 3), ECA(width))),
                    _CALIB)


def mobilevit(width: int = 16, dim: int = 16) -> nn.Module:
    return finalize(Net(width, MobileViTBlock(width, dim)), _CALIB)


def pools(width: int = 16) -> nn.Module:
    return finalize(Net(width, Pools(width)), _CALIB)


def scalar_affine(width: int = 16) -> nn.Module:
    return finalize(Net(width, ScalarAffine(width)), _CALIB)


def vgg_head(width: int = 16, num_classes: int = 10) -> nn.Module:
    return finalize(Net(width, ConvNormAct(width, width, 3), VGGHead(width, 8, num_classes)),
                    _CALIB)


def positional(width: int = 16) -> nn.Module:
    return finalize(Net(width, PositionalEncoding()), _CALIB)
