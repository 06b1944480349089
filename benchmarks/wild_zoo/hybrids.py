"""Hybrid and detection architectures as deployed libraries write them, at reduced size with
random weights: DETR (sine positions added to queries and keys, learned object queries, box
and class heads), Hiera's mask-unit attention (q pooled by ``max`` over a stride axis),
CAFormer (MetaFormer: channels-last Linears around an NCHW depthwise conv, then attention
stages), FocalNet's focal modulation (gated contexts of depthwise convs, channels last),
TinyViT (window attention with attention biases, a depthwise conv on the tokens viewed as a
map), EfficientFormer-V1 (pool mixers on the map, then flattened attention with biases),
Next-ViT's E-MHSA (keys and values average-pooled, BatchNorm on tokens) and Twins' global
sub-sampled attention. Their floors come from the exported graph (`graph_floor`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .variants import _blocks, _run_blocks


def _sine_positions(h: int, w: int, dim: int) -> torch.Tensor:
    """DETR's PositionEmbeddingSine, normalized, (1, dim, h, w)."""
    y = torch.arange(1, h + 1, dtype=torch.float32)[:, None].expand(h, w) / h * 2 * math.pi
    x = torch.arange(1, w + 1, dtype=torch.float32)[None, :].expand(h, w) / w * 2 * math.pi
    t = 10000 ** (2 * (torch.arange(dim // 2) // 2) / (dim // 2))
    px, py = x[..., None] / t, y[..., None] / t
    px = torch.stack((px[..., 0::2].sin(), px[..., 1::2].cos()), dim=3).flatten(2)
    py = torch.stack((py[..., 0::2].sin(), py[..., 1::2].cos()), dim=3).flatten(2)
    return torch.cat((py, px), dim=2).permute(2, 0, 1)[None]


class DETR(nn.Module):
    """Backbone, 1×1 input projection, one encoder and one decoder layer (post-norm,
    sequence first, positions added to q and k only), class and box heads."""

    def __init__(self, dim: int = 32, heads: int = 4, queries: int = 6, size: int = 32) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(),
                                      nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU())
        self.input_proj = nn.Conv2d(32, dim, 1)
        self.register_buffer("pos", _sine_positions(size // 4, size // 4, dim), persistent=False)
        self.enc_attn = nn.MultiheadAttention(dim, heads)
        self.enc_ffn = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))
        self.enc_n1, self.enc_n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.query_embed = nn.Embedding(queries, dim)
        self.dec_self, self.dec_cross = nn.MultiheadAttention(dim, heads), nn.MultiheadAttention(
            dim, heads)
        self.dec_ffn = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))
        self.dec_n = nn.ModuleList(nn.LayerNorm(dim) for _ in range(4))
        self.class_embed = nn.Linear(dim, 5)
        self.bbox_embed = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        src = self.input_proj(self.backbone(x))
        b = src.shape[0]
        src = src.flatten(2).permute(2, 0, 1)
        pos = self.pos.flatten(2).permute(2, 0, 1).repeat(1, b, 1)
        q = k = src + pos
        src = self.enc_n1(src + self.enc_attn(q, k, src, need_weights=False)[0])
        mem = self.enc_n2(src + self.enc_ffn(src))
        query_pos = self.query_embed.weight.unsqueeze(1).repeat(1, b, 1)
        tgt = torch.zeros_like(query_pos)
        q = k = tgt + query_pos
        tgt = self.dec_n[0](tgt + self.dec_self(q, k, tgt, need_weights=False)[0])
        tgt = self.dec_n[1](tgt + self.dec_cross(tgt + query_pos, mem + pos, mem,
                                                  need_weights=False)[0])
        hs = self.dec_n[3](self.dec_n[2](tgt + self.dec_ffn(tgt))).transpose(0, 1)
        return self.class_embed(hs), self.bbox_embed(hs).sigmoid()


class MaskUnitAttention(nn.Module):
    """Hiera: tokens in mask-unit order; q, k, v per window and head; q max-pooled over the
    stride axis (``view(B, heads, q_stride, -1, hd).max(dim=2)``)."""

    def __init__(self, dim: int, dim_out: int, heads: int, q_stride: int, windows: int) -> None:
        super().__init__()
        self.heads, self.q_stride, self.windows = heads, q_stride, windows
        self.hd = dim_out // heads
        self.scale = self.hd ** -0.5
        self.qkv, self.proj = nn.Linear(dim, 3 * dim_out), nn.Linear(dim_out, dim_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        qkv = self.qkv(x).reshape(b, -1, self.windows, 3, self.heads, self.hd).permute(
            3, 0, 4, 2, 1, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.q_stride > 1:
            q = q.view(b, self.heads, self.windows, self.q_stride, -1, self.hd).max(dim=3).values
        out = F.scaled_dot_product_attention(q, k, v)
        out = out.transpose(1, 3).reshape(b, -1, self.heads * self.hd)
        return self.proj(out)


class Hiera(nn.Module):
    """Patch embed (conv 4×4), tokens unrolled into 4 mask units of 2×2 strides; a block
    at full resolution, a block pooling q by 4 (to 2×2 per unit), a head."""

    def __init__(self, dim: int = 16, size: int = 32) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.g = size // 4
        self.n1, self.a1 = nn.LayerNorm(dim), MaskUnitAttention(dim, dim, 2, 1, 4)
        self.n2, self.a2 = nn.LayerNorm(dim), MaskUnitAttention(dim, 2 * dim, 2, 4, 4)
        self.skip = nn.Linear(dim, 2 * dim)
        self.head = nn.Linear(2 * dim, 10)

    def _unroll(self, t: torch.Tensor) -> torch.Tensor:
        """(B, C, g, g) map to tokens ordered (stride position, mask unit): 2×2 units of
        (g/2)×(g/2), the stride-2 positions outermost."""
        b, c, g, _ = t.shape
        t = t.view(b, c, g // 4, 2, 2, g // 4, 2, 2)  # (y4, sy, uy, x4, sx, ux)
        return t.permute(0, 3, 6, 2, 5, 4, 7, 1).reshape(b, -1, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self._unroll(self.patch(x))
        t = t + self.a1(self.n1(t))
        h = self.n2(t)
        b, _, c = h.shape
        pooled = self.skip(h).view(b, 4, -1, 2 * c).max(dim=1).values
        t = pooled + self.a2(h)
        return self.head(t.mean(1))


class SepConv(nn.Module):
    """MetaFormer's token mixer: Linear (channels last), StarReLU, depthwise 7×7 on the map
    (permuted to NCHW and back), Linear."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.pw1, self.pw2 = nn.Linear(dim, 2 * dim, bias=False), nn.Linear(2 * dim, dim,
                                                                             bias=False)
        self.dw = nn.Conv2d(2 * dim, 2 * dim, 7, padding=3, groups=2 * dim, bias=False)
        self.scale, self.bias = nn.Parameter(torch.ones(1) * 0.8944), nn.Parameter(
            torch.zeros(1) - 0.4472)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pw1(x)
        x = self.scale * F.relu(x) ** 2 + self.bias
        x = self.dw(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        return self.pw2(x)


class CAFormer(nn.Module):
    """Stem conv, permute to NHWC; a SepConv stage; a downsampling conv (permute to NCHW and
    back, LayerNorm channels last first); an attention stage over the flattened map; head."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, dim, 7, 4, 2)
        self.stem_norm = nn.LayerNorm(dim)
        self.n1, self.mix1 = nn.LayerNorm(dim), SepConv(dim)
        self.n2, self.mlp1 = nn.LayerNorm(dim), nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(),
                                                               nn.Linear(4 * dim, dim))
        self.down_norm, self.down = nn.LayerNorm(dim), nn.Conv2d(dim, 2 * dim, 3, 2, 1)
        self.blocks = _blocks(2 * dim, lambda: _Attn(2 * dim, heads))
        self.head = nn.Linear(2 * dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.stem_norm(self.stem(x).permute(0, 2, 3, 1))
        t = t + self.mix1(self.n1(t))
        t = t + self.mlp1(self.n2(t))
        t = self.down(self.down_norm(t).permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        b, h, w, c = t.shape
        t = _run_blocks(self.blocks, t.reshape(b, h * w, c))
        return self.head(t.mean(1))


class _Attn(nn.Module):
    """MetaFormer's Attention: qkv Linear without bias, SDPA, out projection."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class FocalModulation(nn.Module):
    """FocalNet: Linear to q, ctx and gates (channels last), ctx permuted to NCHW through
    two depthwise convs with GELU, gated sums, a global context, 1×1 conv h, back."""

    def __init__(self, dim: int, levels: int = 2) -> None:
        super().__init__()
        self.levels = levels
        self.f = nn.Linear(dim, 2 * dim + levels + 1)
        self.h = nn.Conv2d(dim, dim, 1)
        self.proj = nn.Linear(dim, dim)
        self.layers = nn.ModuleList(nn.Sequential(
            nn.Conv2d(dim, dim, 3 + 2 * k, padding=1 + k, groups=dim, bias=False), nn.GELU())
            for k in range(levels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.shape[-1]
        x = self.f(x).permute(0, 3, 1, 2)
        q, ctx, gates = torch.split(x, (c, c, self.levels + 1), 1)
        ctx_all = 0
        for i, layer in enumerate(self.layers):
            ctx = layer(ctx)
            ctx_all = ctx_all + ctx * gates[:, i:i + 1]
        ctx_global = F.gelu(ctx.mean(2, keepdim=True).mean(3, keepdim=True))
        ctx_all = ctx_all + ctx_global * gates[:, self.levels:]
        out = q * self.h(ctx_all)
        return self.proj(out.permute(0, 2, 3, 1))


class FocalNet(nn.Module):
    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.n1, self.mod = nn.LayerNorm(dim), FocalModulation(dim)
        self.n2, self.mlp = nn.LayerNorm(dim), nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(),
                                                             nn.Linear(4 * dim, dim))
        self.down = nn.Conv2d(dim, 2 * dim, 2, 2)
        self.head = nn.Linear(2 * dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).permute(0, 2, 3, 1)
        t = t + self.mod(self.n1(t))
        t = t + self.mlp(self.n2(t))
        t = self.down(t.permute(0, 3, 1, 2))
        return self.head(t.mean((2, 3)))


class TinyViTBlock(nn.Module):
    """TinyViT: window attention (attention biases by offset) on the token map, then a
    depthwise 3×3 conv + BN on the tokens viewed as an NCHW map, then an MLP."""

    def __init__(self, dim: int, heads: int, res: int, ws: int) -> None:
        super().__init__()
        self.heads, self.res, self.ws, self.hd = heads, res, ws, dim // heads
        self.norm = nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        pts = [(i, j) for i in range(ws) for j in range(ws)]
        offsets: dict[tuple[int, int], int] = {}
        idxs = []
        for p1 in pts:
            for p2 in pts:
                off = (abs(p1[0] - p2[0]), abs(p1[1] - p2[1]))
                offsets.setdefault(off, len(offsets))
                idxs.append(offsets[off])
        self.attention_biases = nn.Parameter(torch.randn(heads, len(offsets)) * 0.1)
        self.register_buffer("idxs", torch.tensor(idxs).view(ws * ws, ws * ws), persistent=False)
        self.local = nn.Sequential(nn.Conv2d(dim, dim, 3, 1, 1, groups=dim, bias=False),
                                   nn.BatchNorm2d(dim))
        self.mlp = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(),
                                 nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        r, ws = self.res, self.ws
        t = x.view(b, r // ws, ws, r // ws, ws, c).transpose(2, 3).reshape(-1, ws * ws, c)
        q, k, v = self.qkv(self.norm(t)).view(t.shape[0], ws * ws, self.heads, -1).split(
            [self.hd, self.hd, self.hd], dim=3)
        q, k, v = (u.permute(0, 2, 1, 3) for u in (q, k, v))
        attn = (q @ k.transpose(-2, -1)) * self.hd ** -0.5 + self.attention_biases[:, self.idxs]
        t = (attn.softmax(-1) @ v).transpose(1, 2).reshape(-1, ws * ws, c)
        t = self.proj(t).view(b, r // ws, r // ws, ws, ws, c).transpose(2, 3).reshape(b, n, c)
        x = x + t
        m = self.local(x.transpose(1, 2).reshape(b, c, r, r)).view(b, c, n).transpose(1, 2)
        return m + self.mlp(m)


class TinyViT(nn.Module):
    def __init__(self, dim: int = 32, size: int = 32) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dim // 2, 3, 2, 1), nn.GELU(),
                                  nn.Conv2d(dim // 2, dim, 3, 2, 1))
        self.blocks = nn.ModuleList(TinyViTBlock(dim, 2, size // 4, 4) for _ in range(2))
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.stem(x).flatten(2).transpose(1, 2)
        for blk in self.blocks:
            t = blk(t)
        return self.head(t.mean(1))


class EfficientFormerV1(nn.Module):
    """Meta4D blocks (``pool(x) - x`` mixer, 1×1 conv MLP with BN) on the map, then
    flattened to tokens for a Meta3D block (attention with biases by offset)."""

    def __init__(self, dim: int = 32, size: int = 32) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dim, 3, 2, 1), nn.BatchNorm2d(dim), nn.ReLU(),
                                  nn.Conv2d(dim, dim, 3, 2, 1), nn.BatchNorm2d(dim), nn.ReLU())
        self.pool = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.mlp4d = nn.Sequential(nn.Conv2d(dim, 2 * dim, 1), nn.BatchNorm2d(2 * dim), nn.GELU(),
                                   nn.Conv2d(2 * dim, dim, 1), nn.BatchNorm2d(dim))
        self.ls = nn.Parameter(torch.full((dim,), 0.5))
        self.n1 = nn.LayerNorm(dim)
        self.attn = TinyViTBlock(dim, 2, size // 4, size // 4)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.stem(x)
        t = t + self.ls.unsqueeze(-1).unsqueeze(-1) * (self.pool(t) - t)
        t = t + self.mlp4d(t)
        t = self.attn(self.n1(t.flatten(2).transpose(1, 2)))
        return self.head(t.mean(1))


class EMHSA(nn.Module):
    """Next-ViT's efficient multi-head self-attention: q from the tokens, k and v from the
    tokens average-pooled (``AvgPool1d`` over the sequence) and BatchNorm'd."""

    def __init__(self, dim: int, heads: int, sr: int) -> None:
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.q, self.k, self.v = (nn.Linear(dim, dim) for _ in range(3))
        self.sr, self.norm = nn.AvgPool1d(sr, sr), nn.BatchNorm1d(dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q = self.q(x).reshape(b, n, self.heads, -1).permute(0, 2, 1, 3)
        x_ = self.norm(self.sr(x.transpose(1, 2))).transpose(1, 2)
        k = self.k(x_).reshape(b, -1, self.heads, c // self.heads).permute(0, 2, 3, 1)
        v = self.v(x_).reshape(b, -1, self.heads, c // self.heads).permute(0, 2, 1, 3)
        attn = (q @ k * self.scale).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class NextViT(nn.Module):
    """A conv stem, an NTB-like block: 1×1 conv + BN, tokens through E-MHSA, back to the map,
    concatenated with a conv branch, a head."""

    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dim, 3, 4, 1), nn.BatchNorm2d(dim), nn.ReLU())
        self.pre = nn.Sequential(nn.Conv2d(dim, dim, 1, bias=False), nn.BatchNorm2d(dim))
        self.norm = nn.BatchNorm2d(dim)
        self.mhsa = EMHSA(dim, 2, 2)
        self.conv = nn.Sequential(nn.Conv2d(dim, dim, 3, 1, 1, groups=dim), nn.BatchNorm2d(dim),
                                  nn.ReLU())
        self.head = nn.Linear(2 * dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.pre(self.stem(x))
        b, c, h, w = t.shape
        a = self.mhsa(self.norm(t).flatten(2).transpose(1, 2))
        t = t + a.transpose(1, 2).reshape(b, c, h, w)
        out = torch.cat([t, self.conv(t)], dim=1)
        return self.head(out.mean((2, 3)))


class GSA(nn.Module):
    """Twins-SVT global sub-sampled attention: keys and values from a strided conv of the
    tokens viewed as a map, LayerNorm, one kv Linear."""

    def __init__(self, dim: int, heads: int, sr: int) -> None:
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.q, self.kv, self.proj = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim), nn.Linear(
            dim, dim)
        self.sr, self.norm = nn.Conv2d(dim, dim, sr, sr), nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, hw: tuple[int, int]) -> torch.Tensor:
        b, n, c = x.shape
        q = self.q(x).reshape(b, n, self.heads, -1).permute(0, 2, 1, 3)
        x_ = self.sr(x.permute(0, 2, 1).reshape(b, c, *hw)).reshape(b, c, -1).permute(0, 2, 1)
        kv = self.kv(self.norm(x_)).reshape(b, -1, 2, self.heads, c // self.heads).permute(
            2, 0, 3, 1, 4)
        attn = (q @ kv[0].transpose(-2, -1) * self.scale).softmax(dim=-1)
        return self.proj((attn @ kv[1]).transpose(1, 2).reshape(b, n, c))


class Twins(nn.Module):
    """Patch embed, a GSA block with a positional depthwise conv (PEG) on the tokens, head."""

    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.patch, self.pn = nn.Conv2d(3, dim, 4, 4), nn.LayerNorm(dim)
        self.peg = nn.Conv2d(dim, dim, 3, 1, 1, groups=dim)
        self.n1, self.attn = nn.LayerNorm(dim), GSA(dim, 2, 2)
        self.n2, self.mlp = nn.LayerNorm(dim), nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(),
                                                             nn.Linear(2 * dim, dim))
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.patch(x)
        b, c, h, w = f.shape
        t = self.pn(f.flatten(2).transpose(1, 2))
        t = t + self.attn(self.n1(t), (h, w))
        t = t + self.mlp(self.n2(t))
        t = self.peg(t.transpose(1, 2).view(b, c, h, w)).flatten(2).transpose(1, 2) + t
        return self.head(t.mean(1))


MODELS = {
    "detr": lambda: DETR(),
    "hiera_mask_units": lambda: Hiera(),
    "caformer": lambda: CAFormer(),
    "focalnet": lambda: FocalNet(),
    "tinyvit": lambda: TinyViT(),
    "efficientformer_v1": lambda: EfficientFormerV1(),
    "nextvit_emhsa": lambda: NextViT(),
    "twins_gsa": lambda: Twins(),
}
