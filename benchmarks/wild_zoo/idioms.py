"""Idioms of deployed model code that the other zoo files do not use, each in a small network
with random weights: attention written with ``torch.einsum`` (lucidrains-style code), rotary
positions as complex numbers (Meta's LLaMA reference: ``view_as_complex``; SAM 2's axial
positions, a complex constant viewed and repeated), ALiBi scores by
``torch.baddbmm`` (BLOOM), a learned position grid resized bicubically (DINOv2's
``interpolate_pos_encoding``), an ESPCN-style super-resolution head (``PixelShuffle``), a
VGG-style ``AdaptiveAvgPool2d((7, 7))`` head on a map it does not divide, and bilinear
upsampling with ``align_corners=True`` into a concat (DeepLab's decoder). Their floors come
from the exported graph (`graph_floor`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class EinsumAttention(nn.Module):
    """Patch tokens; q, k, v by one Linear, heads by reshape/permute, scores and output by
    ``einsum``."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.qkv, self.out = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)
        b, n, c = t.shape
        q, k, v = (u.reshape(b, n, self.heads, -1).permute(0, 2, 1, 3)
                   for u in self.qkv(t).chunk(3, dim=-1))
        dots = torch.einsum("bhid,bhjd->bhij", q, k) * (c // self.heads) ** -0.5
        out = torch.einsum("bhij,bhjd->bhid", dots.softmax(dim=-1), v)
        t = t + self.out(out.permute(0, 2, 1, 3).reshape(b, n, c))
        return self.head(t.mean(1))


class ComplexRope(nn.Module):
    """Meta's LLaMA reference: rotary positions applied as complex products
    (``view_as_complex`` of pairs, times ``freqs_cis``, ``view_as_real``), then SDPA."""

    def __init__(self, dim: int = 32, heads: int = 4, tokens: int = 64) -> None:
        super().__init__()
        self.heads, hd = heads, dim // heads
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.wq, self.wk, self.wv = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.wo, self.head = nn.Linear(dim, dim, bias=False), nn.Linear(dim, 10)
        freqs = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        angles = torch.outer(torch.arange(tokens).float(), freqs)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def _rotate(self, t: torch.Tensor) -> torch.Tensor:
        freqs_cis = torch.complex(self.cos, self.sin)[None, :, None, :]
        tc = torch.view_as_complex(t.float().reshape(*t.shape[:-1], -1, 2))
        return torch.view_as_real(tc * freqs_cis).flatten(3).type_as(t)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)
        b, n, c = t.shape
        q, k, v = (w(t).view(b, n, self.heads, -1) for w in (self.wq, self.wk, self.wv))
        q, k = self._rotate(q), self._rotate(k)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2))
        t = t + self.wo(out.transpose(1, 2).reshape(b, n, c))
        return self.head(t.mean(1))


class AxialComplexRope(nn.Module):
    """SAM 2's memory attention: axial rotary positions as a complex constant (an attribute
    computed once, ``torch.polar``), viewed to the query's shape, repeated for keys from
    more memory tokens, applied as in ``apply_rotary_enc``."""

    def __init__(self, dim: int = 32, heads: int = 2, grid: int = 8) -> None:
        super().__init__()
        self.heads, hd = heads, dim // heads
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.q, self.k, self.v, self.out = (nn.Linear(dim, dim) for _ in range(4))
        freqs = 1.0 / (10000 ** (torch.arange(0, hd, 4)[: hd // 4].float() / hd))
        ys, xs = torch.meshgrid(torch.arange(grid).float(), torch.arange(grid).float(),
                                indexing="ij")
        fx = torch.outer(xs.flatten(), freqs)
        fy = torch.outer(ys.flatten(), freqs)
        self.freqs_cis = torch.cat([torch.polar(torch.ones_like(fx), fx),
                                    torch.polar(torch.ones_like(fy), fy)], dim=-1)
        self.head = nn.Linear(dim, 10)

    @staticmethod
    def _rotate(t: torch.Tensor, freqs_cis: torch.Tensor, repeat: int = 1) -> torch.Tensor:
        tc = torch.view_as_complex(t.float().reshape(*t.shape[:-1], -1, 2))
        f = freqs_cis.view(1, 1, *freqs_cis.shape)
        if repeat > 1:
            f = f.repeat(1, 1, repeat, 1)
        return torch.view_as_real(tc * f).flatten(3).type_as(t)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)
        b, n, c = t.shape
        mem = torch.cat([t, t.flip(1)], dim=1)  # keys from two memory frames
        q = self.q(t).view(b, n, self.heads, -1).transpose(1, 2)
        k = self.k(mem).view(b, 2 * n, self.heads, -1).transpose(1, 2)
        v = self.v(mem).view(b, 2 * n, self.heads, -1).transpose(1, 2)
        q, k = self._rotate(q, self.freqs_cis), self._rotate(k, self.freqs_cis, repeat=2)
        out = F.scaled_dot_product_attention(q, k, v)
        t = t + self.out(out.transpose(1, 2).reshape(b, n, c))
        return self.head(t.mean(1))


class AlibiAttention(nn.Module):
    """BLOOM: scores as ``baddbmm(alibi, q, kᵀ, beta=1, alpha=1/sqrt(d))`` on heads folded
    into the batch, a causal mask by ``masked_fill``, softmax, ``bmm`` with v."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.hd = heads, dim // heads
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.qkv, self.dense = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        slopes = torch.tensor([2 ** (-8 * (i + 1) / heads) for i in range(heads)])
        self.register_buffer("slopes", slopes, persistent=False)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)
        b, n, c = t.shape
        fused = self.qkv(t).view(b, n, self.heads, 3, self.hd)
        q = fused[..., 0, :].transpose(1, 2).reshape(b * self.heads, n, self.hd)
        k = fused[..., 1, :].permute(0, 2, 3, 1).reshape(b * self.heads, self.hd, n)
        v = fused[..., 2, :].transpose(1, 2).reshape(b * self.heads, n, self.hd)
        alibi = (self.slopes[:, None] * torch.arange(n, device=x.device)[None]).repeat(b, 1)
        scores = torch.baddbmm(alibi[:, None, :], q, k, beta=1.0, alpha=self.hd ** -0.5)
        causal = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(causal, torch.finfo(scores.dtype).min)
        out = torch.bmm(scores.softmax(-1), v).view(b, self.heads, n, self.hd)
        t = t + self.dense(out.permute(0, 2, 1, 3).reshape(b, n, c))
        return self.head(t.mean(1))


class ResizedPositions(nn.Module):
    """DINOv2: a class token and a learned 4×4 position grid, resized bicubically to the
    patch grid (``interpolate_pos_encoding``), added to the tokens."""

    def __init__(self, dim: int = 32, size: int = 32) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.grid = size // 4
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 1 + 16, dim) * 0.02)
        self.block = nn.TransformerEncoderLayer(dim, 4, 2 * dim, dropout=0.0, batch_first=True,
                                                norm_first=True)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)
        grid = self.pos[:, 1:].reshape(1, 4, 4, -1).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(self.grid, self.grid), mode="bicubic",
                             align_corners=False)
        pos = torch.cat([self.pos[:, :1], grid.permute(0, 2, 3, 1).flatten(1, 2)], dim=1)
        t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], dim=1) + pos
        return self.head(self.block(t)[:, 0])


class ESPCN(nn.Module):
    """Super-resolution: 5×5 and 3×3 convs with tanh, a conv to 3·r² channels, then
    ``PixelShuffle(r)``; an image out."""

    def __init__(self, r: int = 2) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 32, 5, padding=2), nn.Tanh(),
                                  nn.Conv2d(32, 16, 3, padding=1), nn.Tanh(),
                                  nn.Conv2d(16, 3 * r * r, 3, padding=1))
        self.shuffle = nn.PixelShuffle(r)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.shuffle(self.body(x)))


class AdaptiveHead(nn.Module):
    """VGG's head: convs and pools to a 4×4 map, ``AdaptiveAvgPool2d((7, 7))`` (overlapping
    windows), ``flatten``, two Linears."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.pool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(nn.Linear(32 * 49, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


class DeepLabDecoder(nn.Module):
    """DeepLabV3+'s decoder: low-level features reduced by a 1×1 conv, the ASPP output
    upsampled bilinearly with ``align_corners=True`` and concatenated, 3×3 convs, upsampled
    to the input size."""

    def __init__(self) -> None:
        super().__init__()
        self.low = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU())
        self.high = nn.Sequential(nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                                  nn.Conv2d(32, 32, 3, 2, 1), nn.ReLU())
        self.reduce = nn.Sequential(nn.Conv2d(16, 8, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.fuse = nn.Sequential(nn.Conv2d(40, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 5, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low = self.low(x)
        high = F.interpolate(self.high(low), size=low.shape[-2:], mode="bilinear",
                             align_corners=True)
        out = self.fuse(torch.cat([high, self.reduce(low)], dim=1))
        return F.interpolate(out, size=x.shape[-2:], mode="bilinear", align_corners=True)


MODELS = {
    "einsum_attention": lambda: EinsumAttention(),
    "complex_rope": lambda: ComplexRope(),
    "sam2_axial_rope": lambda: AxialComplexRope(),
    "alibi_baddbmm": lambda: AlibiAttention(),
    "resized_positions": lambda: ResizedPositions(),
    "espcn": lambda: ESPCN(),
    "adaptive_head": lambda: AdaptiveHead(),
    "deeplab_decoder": lambda: DeepLabDecoder(),
}
