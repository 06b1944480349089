"""Attention as the vision models teams deploy write it, small: a timm-style ViT (conv patch
embed, packed qkv split into heads by ``permute(2, 0, 3, 1, 4)``, fused
``F.scaled_dot_product_attention`` in one block and the eager ``softmax(q kᵀ) v`` in the
other, a class-token head) and a Swin-style stage (window partition, attention with a
relative position bias, shifted windows with their mask, window reverse, patch merging, and
a block whose window covers the whole map), and a ViT whose attentions take the variants
deployed models write: SwinV2's cosine attention scaled per head by a learnt
``logit_scale.exp()``, and mobile multi-query attention (MobileNetV4: every query head reads
one shared K/V head, broadcast by SDPA); and a causal decoder whose attentions are spelled as
research code and other libraries spell them (``einsum``, a written-out softmax, ``-inf``
masks, ``repeat_interleave`` grouped heads, ``baddbmm`` on batch and heads folded).

The floor of each, derived from the model, not from what the tool labels: the ViT's is its
NCHW input (attention reads the heads where the projections put them); the Swin stage's is
its input plus one transform per window partition and per window reverse where windows are
smaller than the map (the partition interleaves rows of windows with rows of pixels: no
layout of the map makes it a view), none where one window covers the map; the decoder's,
tokens in and out, is none.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from zoo._common import finalize


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, fused: bool, bias_for: int = 0) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.fused = fused
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.bias = nn.Parameter(torch.randn(1, heads, bias_for, bias_for) * 0.1) \
            if bias_for else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).permute(
            2, 0, 3, 1, 4).unbind(0)
        if self.fused:
            a = F.scaled_dot_product_attention(q, k, v)
        else:
            s = (q * self.head_dim ** -0.5) @ k.transpose(-2, -1)
            if self.bias is not None:
                s = s + self.bias
            if mask is not None:
                nw = mask.shape[0]
                s = (s.view(-1, nw, self.heads, n, n) + mask[None, :, None]).view(
                    -1, self.heads, n, n)
            a = s.softmax(-1) @ v
        return self.proj(a.transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, fused: bool) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, fused)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, size: int, patch: int, dim: int, heads: int) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, (size // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(Block(dim, heads, fused=True),
                                    Block(dim, heads, fused=False))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch_embed(x).flatten(2).transpose(1, 2)
        t = torch.cat((self.cls_token.expand(t.shape[0], -1, -1), t), 1) + self.pos_embed
        return self.head(self.norm(self.blocks(t))[:, 0])


class CosineAttention(Attention):
    """SwinV2: q and k normalized, the scores scaled per head by ``logit_scale.exp()``
    (clamped), a (heads, 1, 1) parameter."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__(dim, heads, fused=False)
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones(heads, 1, 1)))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).permute(
            2, 0, 3, 1, 4).unbind(0)
        s = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        s = s * torch.clamp(self.logit_scale, max=4.6052).exp()
        return self.proj((s.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c))


class MultiQueryAttention(nn.Module):
    """Mobile multi-query attention (MobileNetV4): per-head queries, one K/V head that every
    query head reads (SDPA broadcasts it)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q, self.kv = nn.Linear(dim, dim), nn.Linear(dim, 2 * (dim // heads))
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q = self.q(x).reshape(b, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).reshape(b, n, 2, 1, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v)
        return self.proj(a.transpose(1, 2).reshape(b, n, c))


class BlockAttention(Attention):
    """NesT's attention on (B, blocks, tokens, C): q, k and v (B, heads, blocks, tokens, D)
    from ``permute(3, 0, 4, 1, 2, 5)`` of the 6-d qkv (the heads stored after the tokens),
    merged by ``permute(0, 2, 3, 4, 1)``; here one block of all the tokens, as NesT's last
    level."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__(dim, heads, fused=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x.unsqueeze(1)).reshape(b, 1, n, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(3, 0, 4, 1, 2, 5).unbind(0)
        a = ((q * self.head_dim ** -0.5) @ k.transpose(-2, -1)).softmax(dim=-1) @ v
        return self.proj(a.permute(0, 2, 3, 4, 1).reshape(b, n, c))


class VariantViT(ViT):
    """The ViT with a cosine per-head-scale attention, a multi-query one and NesT's
    attention on blocks."""

    def __init__(self, size: int, patch: int, dim: int, heads: int) -> None:
        super().__init__(size, patch, dim, heads)
        self.blocks[0].attn = CosineAttention(dim, heads)
        self.blocks[1].attn = MultiQueryAttention(dim, heads)
        self.blocks.append(Block(dim, heads, fused=False))
        self.blocks[2].attn = BlockAttention(dim, heads)


class EinsumCausalAttention(Attention):
    """Attention as research code spells it: ``einsum`` products, a causal mask filled with
    ``-inf`` (``triu``), and the numerically stable softmax written out."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).unbind(2)
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) * self.head_dim ** -0.5
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1),
                          float("-inf"))
        s = s - s.amax(-1, keepdim=True)
        e = s.exp()
        a = torch.einsum("bhqk,bkhd->bqhd", e / e.sum(-1, keepdim=True), v)
        return self.proj(a.reshape(b, n, c))


class GroupedFoldedAttention(nn.Module):
    """Grouped-query attention as Llama's ``repeat_kv`` and older diffusers processors write
    it: two K/V heads repeated by ``repeat_interleave`` for four query heads, batch and heads
    folded into one axis for ``baddbmm`` and ``bmm``, a causal mask (``~tril``)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim, self.kv_heads = heads, dim // heads, heads // 2
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * self.kv_heads * self.head_dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        h, d = self.heads, self.head_dim
        q = self.q(x).view(b, n, h, d).transpose(1, 2)
        k, v = self.kv(x).view(b, n, 2, self.kv_heads, d).permute(2, 0, 3, 1, 4).unbind(0)
        k, v = (t.repeat_interleave(h // self.kv_heads, dim=1) for t in (k, v))
        q, k, v = (t.reshape(b * h, n, d) for t in (q, k, v))
        s = torch.baddbmm(torch.zeros(b * h, n, n, device=x.device), q, k.transpose(1, 2),
                          beta=0, alpha=d ** -0.5)
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool, device=x.device).tril(),
                          float("-inf"))
        a = torch.bmm(s.softmax(-1), v).view(b, h, n, d)
        return self.proj(a.transpose(1, 2).reshape(b, n, c))


class SpelledDecoder(nn.Module):
    """Two causal decoder blocks on token embeddings, each attention spelled another way."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(Block(dim, heads, fused=False),
                                    Block(dim, heads, fused=False))
        self.blocks[0].attn = EinsumCausalAttention(dim, heads, fused=False)
        self.blocks[1].attn = GroupedFoldedAttention(dim, heads)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.blocks(x))


def spelled_decoder(dim: int = 32, heads: int = 4) -> nn.Module:
    """`SpelledDecoder`: its floor on tokens in and out is no transform at all."""
    return finalize(SpelledDecoder(dim, heads))


def _partition(x: torch.Tensor, ws: int) -> torch.Tensor:
    b, h, w, c = x.shape
    x = x.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, ws * ws, c)


def _reverse(win: torch.Tensor, ws: int, h: int, w: int) -> torch.Tensor:
    c = win.shape[-1]
    x = win.view(-1, h // ws, w // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, h, w, c)


class SwinBlock(nn.Module):
    def __init__(self, dim: int, res: int, heads: int, ws: int, shift: int) -> None:
        super().__init__()
        self.res, self.ws = res, min(ws, res)
        self.shift = shift if res > ws else 0
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, fused=False, bias_for=self.ws * self.ws)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        mask = None
        if self.shift:
            img = torch.zeros(1, res, res, 1)
            cuts = (slice(0, -self.ws), slice(-self.ws, -self.shift), slice(-self.shift, None))
            for i, hs in enumerate(cuts):
                for j, wsl in enumerate(cuts):
                    img[:, hs, wsl, :] = 3 * i + j
            mw = _partition(img, self.ws).squeeze(-1)
            mask = (mw[:, None, :] != mw[:, :, None]).float() * -100.0
        self.register_buffer("attn_mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        h = self.norm1(x).view(b, self.res, self.res, c)
        if self.shift:
            h = torch.roll(h, (-self.shift, -self.shift), (1, 2))
        win = self.attn(_partition(h, self.ws), self.attn_mask)
        h = _reverse(win, self.ws, self.res, self.res)
        if self.shift:
            h = torch.roll(h, (self.shift, self.shift), (1, 2))
        x = x + h.reshape(b, n, c)
        return x + self.mlp(self.norm2(x))


class Swin(nn.Module):
    def __init__(self, size: int, dim: int, ws: int) -> None:
        super().__init__()
        self.patch_embed, self.norm0 = nn.Conv2d(3, dim, 4, 4), nn.LayerNorm(dim)
        res = size // 4
        self.stage1 = nn.Sequential(SwinBlock(dim, res, 2, ws, 0),
                                    SwinBlock(dim, res, 2, ws, ws // 2))
        self.merge_norm, self.reduction = nn.LayerNorm(4 * dim), nn.Linear(4 * dim, 2 * dim)
        self.res = res
        self.stage2 = SwinBlock(2 * dim, res // 2, 4, ws, 0)  # one window covers the map
        self.norm, self.head = nn.LayerNorm(2 * dim), nn.Linear(2 * dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.stage1(self.norm0(self.patch_embed(x).flatten(2).transpose(1, 2)))
        b, _, c = t.shape
        m = t.view(b, self.res, self.res, c)
        m = torch.cat([m[:, 0::2, 0::2], m[:, 1::2, 0::2], m[:, 0::2, 1::2], m[:, 1::2, 1::2]],
                      -1).view(b, -1, 4 * c)
        t = self.stage2(self.reduction(self.merge_norm(m)))
        return self.head(self.norm(t).mean(1))


def vit(size: int = 32, patch: int = 8, dim: int = 32, heads: int = 4) -> nn.Module:
    return finalize(ViT(size, patch, dim, heads))


def swin(size: int = 32, dim: int = 16, ws: int = 4) -> nn.Module:
    return finalize(Swin(size, dim, ws))


def attention_variants(size: int = 32, patch: int = 8, dim: int = 32, heads: int = 4
                       ) -> nn.Module:
    return finalize(VariantViT(size, patch, dim, heads))


def vit_half(size: int = 32, patch: int = 8, dim: int = 32, heads: int = 4) -> nn.Module:
    """`vit` in float16 (``model.half()``), as a GPU deployment runs it: its convolution and
    Linears, its LayerNorms, softmaxes and mean in half precision."""
    return vit(size, patch, dim, heads).half()
