"""Attention and layout variants of round two (issue #42), written from the public model code
at reduced size, with random weights: transformers' SAM vision encoder block (heads folded
into the batch), timm's MaxViT block (BatchNorm after the model's own permute back to NCHW),
transformers' MobileViTV2 layer (tiling ``F.unfold``/``F.fold`` around linear attention) and
timm's XCiT (q, k and v transposed after their split from one projection). Their floors come
from the exported graph (`graph_floor`), not from here.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


def _blocks(dim: int, attention: Callable[[], nn.Module], depth: int = 2) -> nn.ModuleList:
    """Pre-norm transformer blocks: LayerNorm, `attention`, LayerNorm, a GELU MLP."""
    return nn.ModuleList(nn.ModuleDict({
        "norm1": nn.LayerNorm(dim), "attn": attention(), "norm2": nn.LayerNorm(dim),
        "mlp": nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim)),
    }) for _ in range(depth))


def _run_blocks(blocks: nn.ModuleList, t: torch.Tensor) -> torch.Tensor:
    for blk in blocks:
        t = t + blk["attn"](blk["norm1"](t))
        t = t + blk["mlp"](blk["norm2"](t))
    return t


class SamAttention(nn.Module):
    """SAM's vision attention: one qkv Linear, heads folded into the batch
    (``reshape(3, B*H, N, D).unbind(0)``), attention written out, ``view(B, H, h, w, D)``
    back (relative positions left out)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, _ = x.shape
        qkv = self.qkv(x).reshape(b, h * w, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.reshape(3, b * self.heads, h * w, -1).unbind(0)
        attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
        out = (attn @ v).view(b, self.heads, h, w, -1).permute(0, 2, 3, 1, 4)
        return self.proj(out.reshape(b, h, w, -1))


class SamEncoder(nn.Module):
    """Patch embedding (a conv, then channels last), two SAM blocks, the neck's convs."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.blocks = _blocks(dim, lambda: SamAttention(dim, heads))
        self.neck = nn.Sequential(nn.Conv2d(dim, 16, 1, bias=False), nn.Conv2d(16, 16, 3, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).permute(0, 2, 3, 1)
        t = _run_blocks(self.blocks, t)
        return self.neck(t.permute(0, 3, 1, 2))


class MBConv(nn.Module):
    """MaxViT's MBConv: BatchNorm pre-norm, 1x1 expand, depthwise 3x3, 1x1 project."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.pre_norm = nn.BatchNorm2d(c)
        self.expand, self.dw = nn.Conv2d(c, 2 * c, 1), nn.Conv2d(2 * c, 2 * c, 3, 1, 1,
                                                                  groups=2 * c)
        self.project = nn.Conv2d(2 * c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.project(F.gelu(self.dw(F.gelu(self.expand(self.pre_norm(x))))))


class MaxViTBlock(nn.Module):
    """MBConv, then attention over the map channels-last (the model permutes to NHWC and back,
    as timm's MaxxVit partition does), then the next MBConv's BatchNorm reads the NCHW map."""

    def __init__(self, c: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, 2, 1)
        self.conv1, self.conv2 = MBConv(c), MBConv(c)
        self.norm = nn.LayerNorm(c)
        self.attn = nn.MultiheadAttention(c, heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(self.stem(x))
        b, c, h, w = x.shape
        t = x.permute(0, 2, 3, 1).reshape(b, h * w, c)
        n = self.norm(t)
        t = t + self.attn(n, n, n, need_weights=False)[0]
        x = t.reshape(b, h, w, c).permute(0, 3, 1, 2)
        return self.conv2(x)


class LinearSelfAttention(nn.Module):
    """MobileViTV2's separable self-attention on (B, C, pixels, patches)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.d = d
        self.qkv, self.out = nn.Conv2d(d, 1 + 2 * d, 1), nn.Conv2d(d, d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = torch.split(self.qkv(x), [1, self.d, self.d], dim=1)
        context = (k * F.softmax(q, dim=-1)).sum(-1, keepdim=True)
        return self.out(F.relu(v) * context.expand_as(v))


class MobileViTV2Layer(nn.Module):
    """A conv stem, then MobileViTV2's layer: depthwise kxk, 1x1, ``F.unfold`` into 2x2
    patches, a transformer layer (GroupNorm(1), linear attention, 1x1-conv FFN), GroupNorm,
    ``F.fold`` back, 1x1 projection."""

    def __init__(self, c: int = 32, d: int = 32) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, 2, 1)
        self.kxk, self.c1 = nn.Conv2d(c, c, 3, 1, 1, groups=c), nn.Conv2d(c, d, 1, bias=False)
        self.n1, self.attn = nn.GroupNorm(1, d), LinearSelfAttention(d)
        self.n2 = nn.GroupNorm(1, d)
        self.ffn = nn.Sequential(nn.Conv2d(d, 2 * d, 1), nn.SiLU(), nn.Conv2d(2 * d, d, 1))
        self.norm, self.proj = nn.GroupNorm(1, d), nn.Conv2d(d, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.c1(self.kxk(self.stem(x)))
        b, d, h, w = f.shape
        p = F.unfold(f, kernel_size=2, stride=2).reshape(b, d, 4, -1)
        p = p + self.attn(self.n1(p))
        p = p + self.ffn(self.n2(p))
        p = self.norm(p).reshape(b, d * 4, -1)
        return self.proj(F.fold(p, output_size=(h, w), kernel_size=2, stride=2))


class XCAttention(nn.Module):
    """timm's XCiT cross-covariance attention: q, k, v split from one projection with the
    tokens last, q and k L2-normalized, a per-head temperature; attention over channels."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.temperature = nn.Parameter(torch.rand(heads, 1, 1) + 0.5)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 4, 1)
        q, k, v = qkv.unbind(0)
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        attn = ((q @ k.transpose(-2, -1)) * self.temperature).softmax(dim=-1)
        return self.proj((attn @ v).permute(0, 3, 1, 2).reshape(b, n, c))


class XCiT(nn.Module):
    """A conv patch embedding, two XCiT blocks (cross-covariance attention, MLP), a head."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.blocks = _blocks(dim, lambda: XCAttention(dim, heads))
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = _run_blocks(self.blocks, t)
        return self.head(t.mean(1))


MODELS: dict[str, Callable[[], nn.Module]] = {
    "sam_encoder": lambda: SamEncoder(),
    "maxvit_block": lambda: MaxViTBlock(),
    "mobilevitv2_layer": lambda: MobileViTV2Layer(),
    "xcit": lambda: XCiT(),
}
