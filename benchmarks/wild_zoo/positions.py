"""Attention with positions and pooling, as deployed vision libraries write it, at reduced size
with random weights: EVA-02's rotary positions (timm ``RotaryEmbeddingCat``, rotate-half on
q and k past the class token), a LLaMA-style grouped-query block over patch tokens
(transformers' ``repeat_kv``: K/V heads expanded and folded, causal SDPA), BEiT's relative
position bias and its q/v-only biases (``F.linear`` on a concatenated qkv bias), LeViT's
attention biases gathered per head pair with BatchNorm'd Linears and a strided query
subsample, MViTv2's pooling attention (q, k, v pooled by depthwise convs on heads folded into
the batch), EfficientViT's ReLU linear attention (multi-scale qkv by grouped convs, ``F.pad``
with ones), ConvNeXt-V2's global response norm, and ``nn.MultiheadAttention`` with a
3-D boolean mask per batch·head. Their floors come from the exported graph (`graph_floor`),
not from here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .variants import _blocks, _run_blocks


class _PatchTokens(nn.Module):
    """A 4×4 patch conv, then tokens (B, N, C): ``flatten(2).transpose(1, 2)``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, dim, 4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class EvaAttention(nn.Module):
    """EVA-02: q, k, v Linears; rotary positions on every token but the class token."""

    def __init__(self, dim: int, heads: int, grid: int) -> None:
        super().__init__()
        self.heads, hd = heads, dim // heads
        self.q, self.k, self.v = (nn.Linear(dim, dim) for _ in range(3))
        self.proj = nn.Linear(dim, dim)
        pos = torch.arange(grid * grid, dtype=torch.float32)
        freq = 1.0 / (100.0 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        angle = torch.cat([pos[:, None] * freq[None]] * 2, dim=-1)
        self.register_buffer("cos", angle.cos(), persistent=False)
        self.register_buffer("sin", angle.sin(), persistent=False)

    def _rope(self, t: torch.Tensor) -> torch.Tensor:
        return torch.cat([t[:, :, :1], t[:, :, 1:] * self.cos + _rotate_half(t[:, :, 1:])
                          * self.sin], dim=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q = self.q(x).reshape(b, n, self.heads, -1).permute(0, 2, 1, 3)
        k = self.k(x).reshape(b, n, self.heads, -1).permute(0, 2, 1, 3)
        v = self.v(x).reshape(b, n, self.heads, -1).permute(0, 2, 1, 3)
        out = F.scaled_dot_product_attention(self._rope(q), self._rope(k), v)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class Eva(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, size: int = 32) -> None:
        super().__init__()
        self.patch, grid = _PatchTokens(dim), size // 4
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.blocks = _blocks(dim, lambda: EvaAttention(dim, heads, grid))
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x)
        t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], dim=1)
        return self.head(_run_blocks(self.blocks, t)[:, 0])


class LlamaAttention(nn.Module):
    """transformers' LlamaAttention (SDPA): grouped K/V heads repeated by ``repeat_kv``
    (expand, then reshape), rotary positions, a causal mask."""

    def __init__(self, dim: int, heads: int, kv_heads: int, tokens: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2, dtype=torch.float32) / self.hd))
        ang = torch.arange(tokens, dtype=torch.float32)[:, None] * inv[None]
        emb = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin", emb.sin()[None, None], persistent=False)

    def _repeat_kv(self, t: torch.Tensor) -> torch.Tensor:
        b, kvh, n, d = t.shape
        rep = self.heads // kvh
        return t[:, :, None, :, :].expand(b, kvh, rep, n, d).reshape(b, kvh * rep, n, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, -1, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, n, -1, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, n, -1, self.hd).transpose(1, 2)
        q = q * self.cos + _rotate_half(q) * self.sin
        k = k * self.cos + _rotate_half(k) * self.sin
        k, v = self._repeat_kv(k), self._repeat_kv(v)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))


class LlamaPatches(nn.Module):
    """Patch tokens through two LLaMA decoder layers (RMSNorm, GQA attention, SwiGLU)."""

    def __init__(self, dim: int = 32, heads: int = 4, kv_heads: int = 2, size: int = 32) -> None:
        super().__init__()
        self.patch, tokens = _PatchTokens(dim), (size // 4) ** 2
        self.layers = nn.ModuleList(nn.ModuleDict({
            "attn": LlamaAttention(dim, heads, kv_heads, tokens),
            "gate": nn.Linear(dim, 2 * dim, bias=False), "up": nn.Linear(dim, 2 * dim, bias=False),
            "down": nn.Linear(2 * dim, dim, bias=False),
        }) for _ in range(2))
        self.norm_w = nn.Parameter(torch.ones(dim))

    def _rms(self, t: torch.Tensor) -> torch.Tensor:
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm_w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x)
        for layer in self.layers:
            t = t + layer["attn"](self._rms(t))
            h = self._rms(t)
            t = t + layer["down"](F.silu(layer["gate"](h)) * layer["up"](h))
        return self._rms(t).mean(1)


class BeitAttention(nn.Module):
    """BEiT: one qkv Linear without bias, then ``F.linear`` with cat(q_bias, 0, v_bias); a
    relative position bias gathered from a table by index, the class token included."""

    def __init__(self, dim: int, heads: int, grid: int) -> None:
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.q_bias, self.v_bias = nn.Parameter(torch.randn(dim) * 0.1), nn.Parameter(
            torch.randn(dim) * 0.1)
        self.register_buffer("k_bias", torch.zeros(dim), persistent=False)
        self.proj = nn.Linear(dim, dim)
        distances = (2 * grid - 1) ** 2 + 3
        self.table = nn.Parameter(torch.randn(distances, heads) * 0.1)
        coords = torch.stack(torch.meshgrid(torch.arange(grid), torch.arange(grid),
                                            indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + grid - 1
        index = torch.zeros(grid * grid + 1, grid * grid + 1, dtype=torch.long)
        index[1:, 1:] = rel[..., 0] * (2 * grid - 1) + rel[..., 1]
        index[0, :], index[:, 0], index[0, 0] = distances - 3, distances - 2, distances - 1
        self.register_buffer("index", index, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        bias = torch.cat((self.q_bias, self.k_bias, self.v_bias))
        qkv = F.linear(x, self.qkv.weight, bias).reshape(b, n, 3, self.heads, -1)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        rel = self.table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1).contiguous()
        attn = (attn + rel.unsqueeze(0)).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class Beit(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, size: int = 32) -> None:
        super().__init__()
        self.patch = _PatchTokens(dim)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.blocks = _blocks(dim, lambda: BeitAttention(dim, heads, size // 4))
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x)
        t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], dim=1)
        return self.head(_run_blocks(self.blocks, t)[:, 1:].mean(1))


class LinearBN(nn.Sequential):
    """LeViT's Linear + BatchNorm1d over the flattened batch and tokens."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(nn.Linear(a, b, bias=False), nn.BatchNorm1d(b))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self[1](self[0](x).flatten(0, 1)).reshape_as(self[0](x))


class LevitAttention(nn.Module):
    """LeViT: qkv by one LinearBN, split per head as (key, key, 2·key), attention biases
    gathered as ``attention_biases[:, idxs]`` (heads, N, N); ``stride`` 2 subsamples the
    queries on the token grid (``view(B, h, w, C)[:, ::2, ::2]``)."""

    def __init__(self, dim: int, out: int, heads: int, key: int, grid: int,
                 stride: int = 1) -> None:
        super().__init__()
        self.heads, self.key, self.stride, self.grid = heads, key, stride, grid
        self.scale, self.val = key ** -0.5, 2 * key
        if stride == 1:
            self.qkv = LinearBN(dim, heads * (2 * key + self.val))
        else:
            self.kv = LinearBN(dim, heads * (key + self.val))
            self.q = LinearBN(dim, heads * key)
        self.proj = nn.Sequential(nn.Hardswish(), LinearBN(heads * self.val, out))
        qg = (grid - 1) // stride + 1
        kpts = torch.stack(torch.meshgrid(torch.arange(grid), torch.arange(grid),
                                          indexing="ij")).flatten(1)
        qpts = kpts.view(2, grid, grid)[:, ::stride, ::stride].flatten(1)
        rel = (qpts[:, :, None] * 1 - kpts[:, None, :]).abs()
        idx = rel[0] * grid + rel[1]
        self.attention_biases = nn.Parameter(torch.randn(heads, grid * grid) * 0.1)
        self.register_buffer("idxs", idx.view(qg * qg, grid * grid), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        if self.stride == 1:
            q, k, v = self.qkv(x).view(b, n, self.heads, -1).split(
                [self.key, self.key, self.val], dim=3)
            q = q.permute(0, 2, 1, 3)
        else:
            k, v = self.kv(x).view(b, n, self.heads, -1).split([self.key, self.val], dim=3)
            xq = x.view(b, self.grid, self.grid, -1)[:, ::self.stride, ::self.stride]
            q = self.q(xq.reshape(b, -1, xq.shape[-1])).view(b, -1, self.heads, self.key)
            q = q.permute(0, 2, 1, 3)
        k, v = k.permute(0, 2, 3, 1), v.permute(0, 2, 1, 3)
        attn = (q @ k * self.scale + self.attention_biases[:, self.idxs]).softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(b, -1, self.heads * self.val)
        return self.proj(out)


class Levit(nn.Module):
    """A conv stem (3×3 stride 2 with Hardswish, twice), a LeViT stage, a subsampling
    attention to a smaller grid, one more stage, mean-pooled head."""

    def __init__(self, size: int = 32) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.Hardswish(),
                                  nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32))
        g = size // 4
        self.a1 = LevitAttention(32, 32, 4, 8, g)
        self.m1 = nn.Sequential(LinearBN(32, 64), nn.Hardswish(), LinearBN(64, 32))
        self.down = LevitAttention(32, 48, 6, 8, g, stride=2)
        self.a2 = LevitAttention(48, 48, 4, 8, (g - 1) // 2 + 1)
        self.head = nn.Linear(48, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.stem(x).flatten(2).transpose(1, 2)
        t = t + self.a1(t)
        t = t + self.m1(t)
        t = self.down(t)
        t = t + self.a2(t)
        return self.head(t.mean(1))


class MViTAttention(nn.Module):
    """MViTv2 pooling attention: qkv Linear, heads; q, k and v each pooled by a depthwise
    conv on (B·heads, D, h, w) with a LayerNorm, residual pooling on q."""

    def __init__(self, dim: int, heads: int, stride_q: int, stride_kv: int) -> None:
        super().__init__()
        self.heads, hd = heads, dim // heads
        self.scale = hd ** -0.5
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.pools = nn.ModuleList(nn.Conv2d(hd, hd, 3, s, 1, groups=hd, bias=False)
                                   for s in (stride_q, stride_kv, stride_kv))
        self.norms = nn.ModuleList(nn.LayerNorm(hd) for _ in range(3))

    def _pool(self, t: torch.Tensor, i: int, hw: tuple[int, int]) -> tuple[torch.Tensor,
                                                                          tuple[int, int]]:
        b, h, _, d = t.shape
        t = t.reshape(b * h, hw[0], hw[1], d).permute(0, 3, 1, 2).contiguous()
        t = self.pools[i](t)
        out_hw = (t.shape[2], t.shape[3])
        t = t.reshape(b, h, d, -1).transpose(2, 3)
        return self.norms[i](t), out_hw

    def forward(self, x: torch.Tensor, hw: tuple[int, int]) -> tuple[torch.Tensor,
                                                                       tuple[int, int]]:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        q, q_hw = self._pool(q, 0, hw)
        k, _ = self._pool(k, 1, hw)
        v, _ = self._pool(v, 2, hw)
        attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
        out = attn @ v + q
        return self.proj(out.transpose(1, 2).reshape(b, -1, q.shape[1] * q.shape[-1])), q_hw


class MViT(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.n1, self.a1 = nn.LayerNorm(dim), MViTAttention(dim, heads, 1, 2)
        self.n2, self.a2 = nn.LayerNorm(dim), MViTAttention(dim, heads, 2, 2)
        self.mlp = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(),
                                 nn.Linear(2 * dim, dim))
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.patch(x)
        hw = (f.shape[2], f.shape[3])
        t = f.flatten(2).transpose(1, 2)
        a, hw = self.a1(self.n1(t), hw)
        t = t + a
        b, _, c = t.shape
        skip = F.max_pool2d(t.transpose(1, 2).reshape(b, c, *hw), 3, 2, 1).flatten(2)
        a, hw = self.a2(self.n2(t), hw)
        t = skip.transpose(1, 2) + a
        t = t + self.mlp(t)
        return self.head(t.mean(1))


class LiteMLA(nn.Module):
    """EfficientViT (MIT) multi-scale ReLU linear attention on an NCHW map."""

    def __init__(self, c: int, dim: int = 8) -> None:
        super().__init__()
        self.dim, heads = dim, c // dim
        self.qkv = nn.Conv2d(c, 3 * heads * dim, 1, bias=False)
        self.aggreg = nn.Sequential(
            nn.Conv2d(3 * heads * dim, 3 * heads * dim, 5, padding=2, groups=3 * heads * dim,
                      bias=False),
            nn.Conv2d(3 * heads * dim, 3 * heads * dim, 1, groups=3 * heads, bias=False))
        self.proj = nn.Sequential(nn.Conv2d(2 * heads * dim, c, 1, bias=False),
                                  nn.BatchNorm2d(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        qkv = self.qkv(x)
        multi = torch.cat([qkv, self.aggreg(qkv)], dim=1)
        multi = multi.reshape(b, -1, 3 * self.dim, h * w).transpose(-1, -2)
        q, k, v = multi.split(self.dim, dim=-1)
        q, k = F.relu(q), F.relu(k)
        v = F.pad(v, (0, 1), mode="constant", value=1.0)
        vk = k.transpose(-1, -2) @ v
        out = q @ vk
        out = out[..., :-1] / (out[..., -1:] + 1e-15)
        out = out.transpose(-1, -2).reshape(b, -1, h, w)
        return x + self.proj(out)


class EfficientViT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.Hardswish(),
                                  nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.Hardswish())
        self.mla = LiteMLA(32)
        self.mb = nn.Sequential(nn.Conv2d(32, 64, 1), nn.Hardswish(),
                                nn.Conv2d(64, 64, 3, 1, 1, groups=64), nn.Hardswish(),
                                nn.Conv2d(64, 32, 1), nn.BatchNorm2d(32))
        self.head = nn.Conv2d(32, 10, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.mla(self.stem(x))
        t = t + self.mb(t)
        return self.head(t).mean((2, 3))


class ConvNeXtV2Block(nn.Module):
    """ConvNeXt-V2: depthwise 7×7, permute to NHWC, LayerNorm, Linear, GELU, GRN
    (``torch.norm`` over H and W, divided by its channel mean), Linear, permute back."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm, self.pw1, self.pw2 = nn.LayerNorm(c), nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.randn(1, 1, 1, 4 * c) * 0.1)
        self.beta = nn.Parameter(torch.randn(1, 1, 1, 4 * c) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.norm(self.dw(x).permute(0, 2, 3, 1))
        t = F.gelu(self.pw1(t))
        gx = torch.norm(t, p=2, dim=(1, 2), keepdim=True)
        nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
        t = self.pw2(self.gamma * (t * nx) + self.beta + t)
        return x + t.permute(0, 3, 1, 2)


class ConvNeXtV2(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 24, 4, 4)
        self.blocks = nn.Sequential(ConvNeXtV2Block(24), ConvNeXtV2Block(24))
        self.down = nn.Conv2d(24, 48, 2, 2)
        self.last = ConvNeXtV2Block(48)
        self.head = nn.Linear(48, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.last(self.down(self.blocks(self.stem(x))))
        return self.head(t.mean((2, 3)))


class MaskedMHA(nn.Module):
    """A DETR-style encoder layer over a conv map with ``nn.MultiheadAttention`` and a 3-D
    boolean ``attn_mask`` (B·heads, L, S) computed from the map (Mask2Former's masked
    attention: each head attends only where a predicted mask is on, never to nothing)."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.backbone = nn.Sequential(nn.Conv2d(3, dim, 4, 4), nn.ReLU())
        self.mask_embed = nn.Conv2d(dim, heads, 1)
        self.queries = nn.Parameter(torch.randn(8, 1, dim))
        self.attn = nn.MultiheadAttention(dim, heads)
        self.out = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.backbone(x)
        b = f.shape[0]
        mem = f.flatten(2).permute(2, 0, 1)  # (S, B, C)
        m = self.mask_embed(f).flatten(2)  # (B, heads, S)
        mask = m.sigmoid().unsqueeze(2).expand(-1, -1, self.queries.shape[0], -1) < 0.5
        mask = mask.flatten(0, 1)
        mask = mask & ~mask.all(-1, keepdim=True)  # a row masked everywhere attends to all
        q = self.queries.expand(-1, b, -1)
        out, _ = self.attn(q, mem, mem, attn_mask=mask, need_weights=False)
        return self.out(out).transpose(0, 1)


MODELS = {
    "eva02_rope": lambda: Eva(),
    "llama_gqa_patches": lambda: LlamaPatches(),
    "beit_relpos": lambda: Beit(),
    "levit": lambda: Levit(),
    "mvitv2_pooling": lambda: MViT(),
    "efficientvit_mla": lambda: EfficientViT(),
    "convnextv2_grn": lambda: ConvNeXtV2(),
    "mask2former_masked_mha": lambda: MaskedMHA(),
}
