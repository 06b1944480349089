"""Attention architectures of a tenth held-out set, written as their reference code writes them
(timm, KAIR's SwinIR, the LoFTR repository), small, random weights, each fed the zoo's 32×32
image: SwinIR (image restoration at full resolution: ``(x - mean) * img_range``, a reflect
``F.pad`` to a multiple of the window, a conv, residual Swin groups on one-pixel tokens, each
group's tokens ``transpose(1, 2).view``-ed back to a map for a 3×3 conv and flattened again, a
shifted-window block with the mask built in ``__init__``, ``PixelShuffle`` upsampling, the
mean added back and the output cropped), Visformer (timm: attention on an NCHW map with a 1×1
conv for qkv, ``reshape(B, 3, heads, head_dim, -1).permute(1, 0, 2, 4, 3)``, SDPA, and
``permute(0, 1, 3, 2).reshape(B, -1, H, W)`` into a 1×1 conv; BatchNorm before the attention
and a grouped-conv MLP; a position embedding added to the map), SHViT (timm: single-head
attention on the first channels of an NCHW map, ``torch.split`` of the channels, GroupNorm on
the attended part, a conv + BatchNorm qkv split into q, k and v, ``flatten(2)``, ``q.transpose
@ k``, ``v @ attn.transpose``, ``reshape(B, pdim, H, W)`` and ``cat`` with the untouched
channels), NesT (timm: ``blockify``, the (B, H, W, C) map cut into blocks by ``reshape``/
``transpose(2, 3)``, attention on (B, blocks, tokens, C) with a 6-d qkv permute, ``deblockify``;
ConvPool's LayerNorm through ``permute(0, 2, 3, 1)`` and back, a padded max pool) and LoFTR
(linear attention by ``einsum``: ``elu + 1`` feature maps, ``einsum("nshd,nshv->nhdv")``, the
normalizer by ``einsum("nlhd,nhd->nlh")``, a three-operand ``einsum``; a sinusoidal position
encoding added to the NCHW map, ``flatten(2).transpose`` into tokens (einops'
``'n c h w -> n (h w) c'``), self and cross layers between two maps, a dual softmax over their
similarity).
Norm affines are randomized and BatchNorm calibrated on one batch (`finalize`, by attention3's
`_built`); Swin's window partition and reverse are attention2's; the floors come
from the exported graph (`graph_floor`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from wild_zoo.attention2 import window_partition, window_reverse
from wild_zoo.attention3 import _built

SIZE = 32


# SwinIR (KAIR models/network_swinir.py) ------------------------------------------------------

class WindowAttention(nn.Module):
    def __init__(self, dim: int, window_size: int, num_heads: int) -> None:
        super().__init__()
        self.window_size, self.num_heads = window_size, num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(
            0.02 * torch.randn((2 * window_size - 1) ** 2, num_heads))
        coords = torch.stack(torch.meshgrid([torch.arange(window_size)] * 2, indexing="ij"))
        flat = torch.flatten(coords, 1)
        rel = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += window_size - 1
        rel[:, :, 1] += window_size - 1
        rel[:, :, 0] *= 2 * window_size - 1
        self.register_buffer("relative_position_index", rel.sum(-1))
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        B_, N, C = x.shape
        qkv = self.qkv(x).reshape(B_, N, 3, self.num_heads, C // self.num_heads)
        qkv = qkv.permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(
            self.window_size ** 2, self.window_size ** 2, -1)
        attn = attn + bias.permute(2, 0, 1).contiguous().unsqueeze(0)
        if mask is not None:
            nW = mask.shape[0]
            attn = attn.view(B_ // nW, nW, self.num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, N, N)
        attn = self.softmax(attn)
        x = (attn @ v).transpose(1, 2).reshape(B_, N, C)
        return self.proj(x)


class SwinIRBlock(nn.Module):
    def __init__(self, dim: int, resolution: int, heads: int, window: int, shift: int) -> None:
        super().__init__()
        self.resolution, self.window, self.shift = resolution, window, shift
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, window, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        mask = None
        if shift:
            img_mask = torch.zeros((1, resolution, resolution, 1))
            cnt = 0
            for h in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
                for w in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
                    img_mask[:, h, w, :] = cnt
                    cnt += 1
            windows = window_partition(img_mask, window).view(-1, window * window)
            mask = windows.unsqueeze(1) - windows.unsqueeze(2)
            mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
        self.register_buffer("attn_mask", mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        H = W = self.resolution
        B, _L, C = x.shape
        shortcut = x
        x = self.norm1(x).view(B, H, W, C)
        if self.shift:
            x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        windows = window_partition(x, self.window).view(-1, self.window * self.window, C)
        windows = self.attn(windows, mask=self.attn_mask).view(-1, self.window, self.window, C)
        x = window_reverse(windows, self.window, H, W)
        if self.shift:
            x = torch.roll(x, shifts=(self.shift, self.shift), dims=(1, 2))
        x = shortcut + x.view(B, H * W, C)
        return x + self.mlp(self.norm2(x))


class RSTB(nn.Module):
    """Residual Swin Transformer Block: the group, ``patch_unembed``, a 3×3 conv,
    ``patch_embed`` (no norm), plus the group's input."""

    def __init__(self, dim: int, resolution: int, heads: int, window: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            SwinIRBlock(dim, resolution, heads, window, 0 if i % 2 == 0 else window // 2)
            for i in range(2))
        self.conv = nn.Conv2d(dim, dim, 3, 1, 1)

    def forward(self, x: torch.Tensor, x_size: tuple[int, int]) -> torch.Tensor:
        y = x
        for blk in self.blocks:
            y = blk(y)
        B, _HW, C = y.shape
        y = y.transpose(1, 2).view(B, C, x_size[0], x_size[1])  # patch_unembed
        return self.conv(y).flatten(2).transpose(1, 2) + x  # patch_embed


class SwinIR(nn.Module):
    def __init__(self, dim: int = 24, heads: int = 2, window: int = 8, size: int = SIZE
                 ) -> None:
        super().__init__()
        self.window, self.img_range, self.upscale = window, 1.0, 2
        self.mean = torch.Tensor((0.4488, 0.4371, 0.4040)).view(1, 3, 1, 1)
        self.conv_first = nn.Conv2d(3, dim, 3, 1, 1)
        self.patch_norm = nn.LayerNorm(dim)
        self.layers = nn.ModuleList(RSTB(dim, size, heads, window) for _ in range(2))
        self.norm = nn.LayerNorm(dim)
        self.conv_after_body = nn.Conv2d(dim, dim, 3, 1, 1)
        self.conv_before_upsample = nn.Sequential(nn.Conv2d(dim, 32, 3, 1, 1),
                                                  nn.LeakyReLU(inplace=True))
        self.upsample = nn.Sequential(nn.Conv2d(32, 4 * 32, 3, 1, 1), nn.PixelShuffle(2))
        self.conv_last = nn.Conv2d(32, 3, 3, 1, 1)

    def check_image_size(self, x: torch.Tensor) -> torch.Tensor:
        _, _, h, w = x.size()
        mod_pad_h = (self.window - h % self.window) % self.window
        mod_pad_w = (self.window - w % self.window) % self.window
        return F.pad(x, (0, mod_pad_w, 0, mod_pad_h), "reflect")

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x_size = (x.shape[2], x.shape[3])
        x = self.patch_norm(x.flatten(2).transpose(1, 2))
        for layer in self.layers:
            x = layer(x, x_size)
        x = self.norm(x)
        B, _HW, C = x.shape
        return x.transpose(1, 2).view(B, C, x_size[0], x_size[1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        H, W = x.shape[2:]
        x = self.check_image_size(x)
        mean = self.mean.type_as(x)
        x = (x - mean) * self.img_range
        x = self.conv_first(x)
        x = self.conv_after_body(self.forward_features(x)) + x
        x = self.conv_before_upsample(x)
        x = self.conv_last(self.upsample(x))
        x = x / self.img_range + mean
        return x[:, :, :H * self.upscale, :W * self.upscale]


# Visformer (timm visformer.py) -----------------------------------------------------------------

class VisAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int, head_dim_ratio: float = 0.5) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = round(dim // num_heads * head_dim_ratio)
        self.qkv = nn.Conv2d(dim, self.head_dim * num_heads * 3, 1, bias=False)
        self.proj = nn.Conv2d(self.head_dim * num_heads, dim, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, _C, H, W = x.shape
        x = self.qkv(x).reshape(B, 3, self.num_heads, self.head_dim, -1).permute(1, 0, 2, 4, 3)
        q, k, v = x.unbind(0)
        x = F.scaled_dot_product_attention(q.contiguous(), k.contiguous(), v.contiguous())
        x = x.permute(0, 1, 3, 2).reshape(B, -1, H, W)
        return self.proj(x)


class SpatialMlp(nn.Module):
    """1×1 conv, GELU, a grouped 3×3 conv (``spatial_conv``), GELU, 1×1 conv."""

    def __init__(self, dim: int, hidden: int, groups: int = 8) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(dim, hidden, 1, bias=False)
        self.act1, self.act2 = nn.GELU(), nn.GELU()
        self.conv2 = nn.Conv2d(hidden, hidden, 3, 1, 1, groups=groups, bias=False)
        self.conv3 = nn.Conv2d(hidden, dim, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv3(self.act2(self.conv2(self.act1(self.conv1(x)))))


class VisBlock(nn.Module):
    def __init__(self, dim: int, heads: int, attn: bool) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(dim) if attn else None
        self.attn = VisAttention(dim, heads) if attn else None
        self.norm2 = nn.BatchNorm2d(dim)
        self.mlp = SpatialMlp(dim, 4 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.attn is not None:
            x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Visformer(nn.Module):
    def __init__(self, dims: tuple[int, ...] = (16, 32, 64), heads: int = 4) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 7, 2, 3, bias=False),
                                  nn.BatchNorm2d(dims[0]), nn.ReLU(inplace=True))
        self.stage1 = nn.Sequential(*(VisBlock(dims[0], heads, False) for _ in range(1)))
        self.patch2 = nn.Sequential(nn.Conv2d(dims[0], dims[1], 2, 2), nn.BatchNorm2d(dims[1]))
        self.pos2 = nn.Parameter(0.02 * torch.randn(1, dims[1], SIZE // 4, SIZE // 4))
        self.stage2 = nn.Sequential(*(VisBlock(dims[1], heads, True) for _ in range(2)))
        self.patch3 = nn.Sequential(nn.Conv2d(dims[1], dims[2], 2, 2), nn.BatchNorm2d(dims[2]))
        self.pos3 = nn.Parameter(0.02 * torch.randn(1, dims[2], SIZE // 8, SIZE // 8))
        self.stage3 = nn.Sequential(*(VisBlock(dims[2], heads, True) for _ in range(2)))
        self.norm = nn.BatchNorm2d(dims[2])
        self.head = nn.Linear(dims[2], 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stage1(self.stem(x))
        x = self.stage2(self.patch2(x) + self.pos2)
        x = self.stage3(self.patch3(x) + self.pos3)
        x = self.norm(x)
        return self.head(x.mean((2, 3)))


# SHViT (timm shvit.py) -------------------------------------------------------------------------

class Conv2dNorm(nn.Sequential):
    def __init__(self, cin: int, cout: int, k: int = 1, s: int = 1, p: int = 0,
                 groups: int = 1) -> None:
        super().__init__(nn.Conv2d(cin, cout, k, s, p, groups=groups, bias=False),
                         nn.BatchNorm2d(cout))


class SHSA(nn.Module):
    """Single-Head Self-Attention on the first `pdim` channels."""

    def __init__(self, dim: int, qk_dim: int, pdim: int) -> None:
        super().__init__()
        self.scale, self.qk_dim, self.dim, self.pdim = qk_dim ** -0.5, qk_dim, dim, pdim
        self.pre_norm = nn.GroupNorm(1, pdim)
        self.qkv = Conv2dNorm(pdim, qk_dim * 2 + pdim)
        self.proj = nn.Sequential(nn.ReLU(), Conv2dNorm(dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, _C, H, W = x.shape
        x1, x2 = torch.split(x, [self.pdim, self.dim - self.pdim], dim=1)
        x1 = self.pre_norm(x1)
        q, k, v = self.qkv(x1).split([self.qk_dim, self.qk_dim, self.pdim], dim=1)
        q, k, v = q.flatten(2), k.flatten(2), v.flatten(2)
        attn = (q.transpose(-2, -1) @ k) * self.scale
        attn = attn.softmax(dim=-1)
        x1 = (v @ attn.transpose(-2, -1)).reshape(B, self.pdim, H, W)
        return self.proj(torch.cat([x1, x2], dim=1))


class SHViTBlock(nn.Module):
    def __init__(self, dim: int, qk_dim: int, pdim: int, attn: bool) -> None:
        super().__init__()
        self.conv = Conv2dNorm(dim, dim, 3, 1, 1, groups=dim)
        self.mixer = SHSA(dim, qk_dim, pdim) if attn else None
        self.ffn = nn.Sequential(Conv2dNorm(dim, 2 * dim), nn.ReLU(), Conv2dNorm(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.conv(x)
        if self.mixer is not None:
            x = x + self.mixer(x)
        return x + self.ffn(x)


class PatchMerging(nn.Module):
    """1×1 conv, ReLU, a stride-2 depthwise 3×3, ReLU, squeeze-excite, 1×1 conv."""

    def __init__(self, dim: int, out_dim: int) -> None:
        super().__init__()
        hidden = 4 * dim
        self.conv1 = Conv2dNorm(dim, hidden)
        self.conv2 = Conv2dNorm(hidden, hidden, 3, 2, 1, groups=hidden)
        self.se_reduce, self.se_expand = nn.Conv2d(hidden, hidden // 4, 1), \
            nn.Conv2d(hidden // 4, hidden, 1)
        self.conv3 = Conv2dNorm(hidden, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        s = x.mean((2, 3), keepdim=True)
        x = x * torch.sigmoid(self.se_expand(F.relu(self.se_reduce(s))))
        return self.conv3(x)


class SHViT(nn.Module):
    def __init__(self, dims: tuple[int, ...] = (32, 48), pdims: tuple[int, ...] = (8, 12),
                 qk_dim: int = 8) -> None:
        super().__init__()
        self.stem = nn.Sequential(Conv2dNorm(3, dims[0] // 2, 3, 2, 1), nn.ReLU(),
                                  Conv2dNorm(dims[0] // 2, dims[0], 3, 2, 1))
        self.stage1 = nn.Sequential(*(SHViTBlock(dims[0], qk_dim, pdims[0], True)
                                      for _ in range(2)))
        self.merge = PatchMerging(dims[0], dims[1])
        self.stage2 = nn.Sequential(*(SHViTBlock(dims[1], qk_dim, pdims[1], True)
                                      for _ in range(2)))
        self.head = nn.Linear(dims[1], 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stage2(self.merge(self.stage1(self.stem(x))))
        return self.head(x.mean((2, 3)))


# NesT (timm nest.py) ---------------------------------------------------------------------------

def blockify(x: torch.Tensor, block_size: int) -> torch.Tensor:
    B, H, W, C = x.shape
    grid_height, grid_width = H // block_size, W // block_size
    x = x.reshape(B, grid_height, block_size, grid_width, block_size, C)
    return x.transpose(2, 3).reshape(B, grid_height * grid_width, -1, C)


def deblockify(x: torch.Tensor, block_size: int) -> torch.Tensor:
    B, T, _, C = x.shape
    grid_size = int(math.sqrt(T))
    height = width = grid_size * block_size
    x = x.reshape(B, grid_size, grid_size, block_size, block_size, C)
    return x.transpose(2, 3).reshape(B, height, width, C)


class NestAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads, self.scale = num_heads, (dim // num_heads) ** -0.5
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, N, C = x.shape
        qkv = self.qkv(x).reshape(B, T, N, 3, self.num_heads, C // self.num_heads)
        q, k, v = qkv.permute(3, 0, 4, 1, 2, 5).unbind(0)  # (B, H, T, N, C')
        attn = (q * self.scale) @ k.transpose(-2, -1)
        x = attn.softmax(dim=-1) @ v
        x = x.permute(0, 2, 3, 4, 1).reshape(B, T, N, C)
        return self.proj(x)


class TransformerLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = NestAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ConvPool(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm = nn.LayerNorm(cout)
        self.pool = nn.MaxPool2d(3, 2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.pool(x)


class NestLevel(nn.Module):
    def __init__(self, num_blocks: int, block_size: int, seq_length: int, dim: int, heads: int,
                 prev_dim: int | None) -> None:
        super().__init__()
        self.block_size = block_size
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, num_blocks, seq_length, dim))
        self.pool = ConvPool(prev_dim, dim) if prev_dim is not None else nn.Identity()
        self.transformer_encoder = nn.Sequential(*(TransformerLayer(dim, heads)
                                                   for _ in range(2)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(x)
        x = x.permute(0, 2, 3, 1)  # (B, H', W', C), channels last for the transformer
        x = blockify(x, self.block_size)
        x = x + self.pos_embed
        x = self.transformer_encoder(x)
        x = deblockify(x, self.block_size)
        return x.permute(0, 3, 1, 2)


class Nest(nn.Module):
    def __init__(self, dims: tuple[int, ...] = (24, 48), heads: tuple[int, ...] = (2, 4),
                 size: int = SIZE, block: int = 4) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dims[0], 4, 4)  # PatchEmbed(flatten=False)
        # at 32x32: 8×8 patches, four 4×4 blocks, then (after the pool) one 4×4 block
        grid = size // 4
        self.levels = nn.Sequential(
            NestLevel((grid // block) ** 2, block, block * block, dims[0], heads[0], None),
            NestLevel((grid // 2 // block) ** 2, block, block * block, dims[1], heads[1],
                      dims[0]))
        self.norm = nn.LayerNorm(dims[1])
        self.head = nn.Linear(dims[1], 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.levels(self.patch_embed(x))
        x = self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.head(x.mean((2, 3)))


# LoFTR (zju3dv/LoFTR: linear_attention.py, transformer.py, position_encoding.py) ---------------

class LinearAttention(nn.Module):
    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
                ) -> torch.Tensor:
        Q, K = F.elu(queries) + 1, F.elu(keys) + 1
        v_length = values.size(1)
        values = values / v_length  # prevent fp16 overflow
        KV = torch.einsum("nshd,nshv->nhdv", K, values)  # (S,D)' @ S,V
        Z = 1 / (torch.einsum("nlhd,nhd->nlh", Q, K.sum(dim=1)) + self.eps)
        queried_values = torch.einsum("nlhd,nhdv,nlh->nlhv", Q, KV, Z) * v_length
        return queried_values.contiguous()


class LoFTREncoderLayer(nn.Module):
    def __init__(self, d_model: int, nhead: int) -> None:
        super().__init__()
        self.dim, self.nhead = d_model // nhead, nhead
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.attention = LinearAttention()
        self.merge = nn.Linear(d_model, d_model, bias=False)
        self.mlp = nn.Sequential(nn.Linear(d_model * 2, d_model * 2, bias=False), nn.ReLU(True),
                                 nn.Linear(d_model * 2, d_model, bias=False))
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        bs = x.size(0)
        query = self.q_proj(x).view(bs, -1, self.nhead, self.dim)
        key = self.k_proj(source).view(bs, -1, self.nhead, self.dim)
        value = self.v_proj(source).view(bs, -1, self.nhead, self.dim)
        message = self.attention(query, key, value)
        message = self.norm1(self.merge(message.view(bs, -1, self.nhead * self.dim)))
        message = self.norm2(self.mlp(torch.cat([x, message], dim=2)))
        return x + message


class PositionEncodingSine(nn.Module):
    def __init__(self, d_model: int, max_shape: tuple[int, int] = (16, 16)) -> None:
        super().__init__()
        pe = torch.zeros((d_model, *max_shape))
        y_position = torch.ones(max_shape).cumsum(0).float().unsqueeze(0)
        x_position = torch.ones(max_shape).cumsum(1).float().unsqueeze(0)
        div_term = torch.exp(torch.arange(0, d_model // 2, 2).float()
                             * (-math.log(10000.0) / (d_model // 2)))[:, None, None]
        pe[0::4, :, :] = torch.sin(x_position * div_term)
        pe[1::4, :, :] = torch.cos(x_position * div_term)
        pe[2::4, :, :] = torch.sin(y_position * div_term)
        pe[3::4, :, :] = torch.cos(y_position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pe[:, :, :x.size(2), :x.size(3)]


class LoFTR(nn.Module):
    """Two views of the image (the input and its left-right mirror) through a shared conv
    backbone to 1/4 resolution, position encoding, tokens, self / cross / self / cross layers,
    then the coarse matching's dual softmax over the two views' similarity."""

    def __init__(self, d_model: int = 32, nhead: int = 4) -> None:
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, d_model, 3, 2, 1, bias=False), nn.BatchNorm2d(d_model), nn.ReLU(),
            nn.Conv2d(d_model, d_model, 3, 1, 1))
        self.pos_encoding = PositionEncodingSine(d_model)
        self.layers = nn.ModuleList(LoFTREncoderLayer(d_model, nhead) for _ in range(4))
        self.names = ("self", "cross", "self", "cross")
        self.temperature = 0.1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.backbone(torch.cat([x, torch.flip(x, dims=[3])], dim=0))
        feat_c0, feat_c1 = feats.split(x.size(0))  # LoFTR: split(data["bs"])
        feat_c0 = self.pos_encoding(feat_c0).flatten(2).transpose(1, 2)
        feat_c1 = self.pos_encoding(feat_c1).flatten(2).transpose(1, 2)
        for layer, name in zip(self.layers, self.names, strict=True):
            if name == "self":
                feat_c0, feat_c1 = layer(feat_c0, feat_c0), layer(feat_c1, feat_c1)
            else:
                feat_c0, feat_c1 = layer(feat_c0, feat_c1), layer(feat_c1, feat_c0)
        feat_c0, feat_c1 = (f / f.shape[-1] ** 0.5 for f in (feat_c0, feat_c1))
        sim = torch.einsum("nlc,nsc->nls", feat_c0, feat_c1) / self.temperature
        return F.softmax(sim, 1) * F.softmax(sim, 2)


MODELS: dict[str, Callable[[], nn.Module]] = {
    "swinir_rstb": _built(SwinIR),
    "visformer_conv_attn": _built(Visformer),
    "shvit_single_head": _built(SHViT),
    "nest_blocks": _built(Nest),
    "loftr_linear_attn": _built(LoFTR),
}
