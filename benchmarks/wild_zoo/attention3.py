"""Attention architectures of a ninth held-out set, written as their reference code writes them
(timm, transformers, the papers' repositories), small, random weights, each fed the zoo's
32×32 image: CaiT (timm: talking-heads self-attention, a Linear over the heads on each side
of the softmax through ``permute(0, 2, 3, 1)``; class attention with the cls token as the one
query, ``x[:, 0]`` through ``q`` then ``unsqueeze(1).reshape(...).permute``, ``cat`` of the cls
token with the patch tokens before each class block), EfficientViT-MSRA (timm: cascaded group
attention on an NCHW map, the channels ``chunk``-ed over the heads, each head's qkv a 1×1
conv + BatchNorm, ``view(B, -1, H, W).split``, a depthwise conv on q, ``q.transpose(-2, -1)
@ k`` plus a bias table indexed by a buffer, ``v @ attn.transpose``, each head's output added
to the next head's input; local windows cut by ``permute(0, 2, 3, 1)``, ``view``/``transpose``
and back) and TNT (timm: pixel embeddings by a strided conv and ``nn.Unfold``, ``transpose(1, 2)
.reshape`` to (B·patches, C, 4, 4) plus a pixel position, an inner transformer over each
patch's pixels, the pixels ``reshape``-d into the patch token by a Linear and added beside the
cls token by ``cat``), CoaT-Lite (timm: factorized attention ``q @ (k.softmax(dim=2)ᵀ @ v)``,
a convolutional relative position encoding on the values' heads ``transpose(-1, -2)
.reshape``-d into a map, ``torch.split`` over depthwise convs of three window sizes and
``cat``, multiplied into q and ``F.pad``-ded for the cls token; a conv position encoding on
the tokens; the next stage from ``x[:, 1:].reshape(B, H, W, -1).permute(0, 3, 1, 2)``) and
Mobile-Former (the paper's reimplementation: learned tokens attend to the map with the map
as one key/value head broadcast over the tokens' query heads, ``unsqueeze(1)``, and the map
attends to the tokens as one query head broadcast over their key/value heads; an
``nn.TransformerEncoderLayer`` on the tokens between).
Norm affines are randomized and BatchNorm calibrated on one batch (`finalize`); the floors come
from the exported graph (`graph_floor`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from zoo._common import finalize

SIZE = 32
CALIB = (2, 3, SIZE, SIZE)


def _ls(dim: int) -> nn.Parameter:
    """A layer scale, random here so the branch counts."""
    return nn.Parameter(torch.rand(dim) * 0.5 + 0.5)


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


# CaiT --------------------------------------------------------------------------------------

class TalkingHeadAttn(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)
        self.proj_l, self.proj_w = nn.Linear(heads, heads), nn.Linear(heads, heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]
        attn = q @ k.transpose(-2, -1)
        attn = self.proj_l(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        attn = attn.softmax(dim=-1)
        attn = self.proj_w(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class ClassAttn(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        h = self.heads
        q = self.q(x[:, 0]).unsqueeze(1).reshape(B, 1, h, C // h).permute(0, 2, 1, 3)
        k = self.k(x).reshape(B, N, h, C // h).permute(0, 2, 1, 3)
        v = self.v(x).reshape(B, N, h, C // h).permute(0, 2, 1, 3)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x_cls = (attn @ v).transpose(1, 2).reshape(B, 1, C)
        return self.proj(x_cls)


class CaiT(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4, num_classes: int = 10) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.pos = nn.Parameter(torch.randn(1, (SIZE // 4) ** 2, dim) * 0.02)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.blocks = nn.ModuleList()
        for _ in range(2):
            self.blocks.append(nn.ModuleDict(dict(
                norm1=nn.LayerNorm(dim), attn=TalkingHeadAttn(dim, heads), norm2=nn.LayerNorm(dim),
                mlp=Mlp(dim, dim * 4))))
        self.gammas = nn.ParameterList([_ls(dim) for _ in range(4)])
        self.cls_blocks = nn.ModuleList()
        for _ in range(2):
            self.cls_blocks.append(nn.ModuleDict(dict(
                norm1=nn.LayerNorm(dim), attn=ClassAttn(dim, heads), norm2=nn.LayerNorm(dim),
                mlp=Mlp(dim, dim * 4))))
        self.cls_gammas = nn.ParameterList([_ls(dim) for _ in range(4)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        for i, blk in enumerate(self.blocks):
            x = x + self.gammas[2 * i] * blk["attn"](blk["norm1"](x))
            x = x + self.gammas[2 * i + 1] * blk["mlp"](blk["norm2"](x))
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        for i, blk in enumerate(self.cls_blocks):
            u = torch.cat((cls, x), dim=1)
            cls = cls + self.cls_gammas[2 * i] * blk["attn"](blk["norm1"](u))
            cls = cls + self.cls_gammas[2 * i + 1] * blk["mlp"](blk["norm2"](cls))
        x = self.norm(torch.cat((cls, x), dim=1))
        return self.head(x[:, 0])


# EfficientViT (MSRA) -----------------------------------------------------------------------

class ConvNorm(nn.Sequential):
    def __init__(self, cin: int, cout: int, k: int = 1, s: int = 1, p: int = 0,
                 groups: int = 1) -> None:
        super().__init__(nn.Conv2d(cin, cout, k, s, p, groups=groups, bias=False),
                         nn.BatchNorm2d(cout))


class CascadedGroupAttention(nn.Module):
    def __init__(self, dim: int, key_dim: int, heads: int, attn_ratio: int, resolution: int,
                 kernels: tuple[int, ...]) -> None:
        super().__init__()
        self.scale, self.key_dim, self.val_dim = key_dim ** -0.5, key_dim, attn_ratio * key_dim
        self.qkvs = nn.ModuleList(ConvNorm(dim // heads, key_dim * 2 + self.val_dim)
                                  for _ in range(heads))
        self.dws = nn.ModuleList(ConvNorm(key_dim, key_dim, k, 1, k // 2, groups=key_dim)
                                 for k in kernels)
        self.proj = nn.Sequential(nn.ReLU(), ConvNorm(self.val_dim * heads, dim))
        points = list(itertools.product(range(resolution), range(resolution)))
        offsets: dict[tuple[int, int], int] = {}
        idxs = []
        for p1 in points:
            for p2 in points:
                off = (abs(p1[0] - p2[0]), abs(p1[1] - p2[1]))
                offsets.setdefault(off, len(offsets))
                idxs.append(offsets[off])
        self.attention_biases = nn.Parameter(torch.randn(heads, len(offsets)) * 0.5)
        self.register_buffer("attention_bias_idxs",
                             torch.LongTensor(idxs).view(len(points), len(points)),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, _, H, W = x.shape
        feats_in = x.chunk(len(self.qkvs), dim=1)
        feats_out = []
        feat = feats_in[0]
        attn_bias = self.attention_biases[:, self.attention_bias_idxs]
        for i, (qkv, dws) in enumerate(zip(self.qkvs, self.dws, strict=True)):
            if i > 0:
                feat = feat + feats_in[i]
            feat = qkv(feat)
            q, k, v = feat.view(B, -1, H, W).split([self.key_dim, self.key_dim, self.val_dim],
                                                   dim=1)
            q = dws(q)
            q, k, v = q.flatten(2), k.flatten(2), v.flatten(2)
            q = q * self.scale
            attn = q.transpose(-2, -1) @ k
            attn = attn + attn_bias[i]
            attn = attn.softmax(dim=-1)
            feat = (v @ attn.transpose(-2, -1)).view(B, self.val_dim, H, W)
            feats_out.append(feat)
        return self.proj(torch.cat(feats_out, 1))


class LocalWindowAttention(nn.Module):
    def __init__(self, dim: int, key_dim: int, heads: int, window: int) -> None:
        super().__init__()
        self.window = window
        self.attn = CascadedGroupAttention(dim, key_dim, heads, 2, window, (5, 5, 5, 5)[:heads])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape
        wr = self.window
        x = x.permute(0, 2, 3, 1)
        nH, nW = H // wr, W // wr
        x = x.view(B, nH, wr, nW, wr, C).transpose(2, 3).reshape(B * nH * nW, wr, wr, C)
        x = self.attn(x.permute(0, 3, 1, 2))
        x = x.permute(0, 2, 3, 1).view(B, nH, nW, wr, wr, C).transpose(2, 3).reshape(B, H, W, C)
        return x.permute(0, 3, 1, 2)


class EfficientViTMSRA(nn.Module):
    def __init__(self, dim: int = 64, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(ConvNorm(3, 16, 3, 2, 1), nn.ReLU(), ConvNorm(16, 32, 3, 2, 1),
                                  nn.ReLU(), ConvNorm(32, dim, 3, 1, 1))
        self.dw0, self.dw1 = ConvNorm(dim, dim, 3, 1, 1, dim), ConvNorm(dim, dim, 3, 1, 1, dim)
        self.ffn0 = nn.Sequential(ConvNorm(dim, dim * 2), nn.ReLU(), ConvNorm(dim * 2, dim))
        self.ffn1 = nn.Sequential(ConvNorm(dim, dim * 2), nn.ReLU(), ConvNorm(dim * 2, dim))
        self.mixer = LocalWindowAttention(dim, 8, 4, 4)
        self.head = nn.Sequential(nn.BatchNorm1d(dim), nn.Linear(dim, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = x + self.dw0(x)
        x = x + self.ffn0(x)
        x = x + self.mixer(x)
        x = x + self.dw1(x)
        x = x + self.ffn1(x)
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


# TNT ---------------------------------------------------------------------------------------

class TNTAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scale = self.head_dim ** -0.5
        self.qk, self.v = nn.Linear(dim, dim * 2, bias=False), nn.Linear(dim, dim, bias=False)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, _ = x.shape
        qk = self.qk(x).reshape(B, N, 2, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = qk.unbind(0)
        v = self.v(x).reshape(B, N, self.heads, -1).permute(0, 2, 1, 3)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, -1)
        return self.proj(x)


class TNTBlock(nn.Module):
    def __init__(self, dim: int, in_dim: int, num_pixel: int, inner_heads: int = 2,
                 heads: int = 4) -> None:
        super().__init__()
        self.norm_in, self.attn_in = nn.LayerNorm(in_dim), TNTAttention(in_dim, inner_heads)
        self.norm_mlp_in, self.mlp_in = nn.LayerNorm(in_dim), Mlp(in_dim, in_dim * 4)
        self.norm1_proj = nn.LayerNorm(in_dim)
        self.proj = nn.Linear(in_dim * num_pixel, dim)
        self.norm_out, self.attn_out = nn.LayerNorm(dim), TNTAttention(dim, heads)
        self.norm_mlp, self.mlp = nn.LayerNorm(dim), Mlp(dim, dim * 4)

    def forward(self, pixel: torch.Tensor, patch: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        pixel = pixel + self.attn_in(self.norm_in(pixel))
        pixel = pixel + self.mlp_in(self.norm_mlp_in(pixel))
        B, N, _ = patch.size()
        patch = torch.cat([patch[:, 0:1],
                           patch[:, 1:] + self.proj(self.norm1_proj(pixel).reshape(B, N - 1, -1))],
                          dim=1)
        patch = patch + self.attn_out(self.norm_out(patch))
        patch = patch + self.mlp(self.norm_mlp(patch))
        return pixel, patch


class TNT(nn.Module):
    """TNT-S is ``TNT(384, 24, 224, 16, 4, 4, 6)`` (12 blocks; two here)."""

    def __init__(self, dim: int = 64, in_dim: int = 8, size: int = SIZE, patch: int = 8,
                 stride: int = 2, inner_heads: int = 2, heads: int = 4,
                 num_classes: int = 10) -> None:
        super().__init__()
        self.num_patches, self.new_patch = (size // patch) ** 2, math.ceil(patch / stride)
        self.in_dim = in_dim
        self.pixel_proj = nn.Conv2d(3, in_dim, 7, padding=3, stride=stride)
        self.unfold = nn.Unfold(kernel_size=self.new_patch, stride=self.new_patch)
        self.pixel_pos = nn.Parameter(torch.randn(1, in_dim, self.new_patch, self.new_patch) * .1)
        num_pixel = self.new_patch ** 2
        self.norm1_proj = nn.LayerNorm(num_pixel * in_dim)
        self.proj = nn.Linear(num_pixel * in_dim, dim)
        self.norm2_proj = nn.LayerNorm(dim)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.patch_pos = nn.Parameter(torch.randn(1, self.num_patches + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(TNTBlock(dim, in_dim, num_pixel, inner_heads, heads)
                                    for _ in range(2))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B = x.shape[0]
        p = self.new_patch
        pixel = self.unfold(self.pixel_proj(x))
        pixel = pixel.transpose(1, 2).reshape(B * self.num_patches, self.in_dim, p, p)
        pixel = pixel + self.pixel_pos
        pixel = pixel.reshape(B * self.num_patches, self.in_dim, -1).transpose(1, 2)
        patch = self.norm2_proj(self.proj(self.norm1_proj(pixel.reshape(B, self.num_patches,
                                                                         -1))))
        patch = torch.cat((self.cls_token.expand(B, -1, -1), patch), dim=1) + self.patch_pos
        for blk in self.blocks:
            pixel, patch = blk(pixel, patch)
        return self.head(self.norm(patch)[:, 0])


# CoaT ---------------------------------------------------------------------------------------

class ConvRelPosEnc(nn.Module):
    """CoaT's convolutional relative position encoding: the values' heads split over depthwise
    convs of three window sizes, multiplied into q."""

    def __init__(self, head_chs: int, window: dict[int, int]) -> None:
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(split * head_chs, split * head_chs, k, 1, k // 2,
                                             groups=split * head_chs)
                                   for k, split in window.items())
        self.splits = [split * head_chs for split in window.values()]

    def forward(self, q: torch.Tensor, v: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        B, h, _, C = q.shape
        H, W = size
        q_img, v_img = q[:, :, 1:, :], v[:, :, 1:, :]
        v_img = v_img.transpose(-1, -2).reshape(B, h * C, H, W)
        parts = torch.split(v_img, self.splits, dim=1)
        conv_v = torch.cat([conv(x) for conv, x in zip(self.convs, parts, strict=True)], dim=1)
        conv_v = conv_v.reshape(B, h, C, H * W).transpose(-1, -2)
        return F.pad(q_img * conv_v, (0, 0, 1, 0, 0, 0))


class FactorAttn(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)
        self.crpe = ConvRelPosEnc(dim // heads, {3: 2, 5: 1, 7: 1})

    def forward(self, x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        factor = q @ (k.softmax(dim=2).transpose(-1, -2) @ v)
        x = self.scale * factor + self.crpe(q, v, size)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class ConvPosEnc(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(dim, dim, 3, 1, 1, groups=dim)

    def forward(self, x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        B, _, C = x.shape
        cls, img = x[:, :1], x[:, 1:]
        feat = img.transpose(1, 2).view(B, C, *size)
        x = (self.proj(feat) + feat).flatten(2).transpose(1, 2)
        return torch.cat((cls, x), dim=1)


class CoaTStage(nn.Module):
    def __init__(self, cin: int, dim: int, patch: int, heads: int = 4) -> None:
        super().__init__()
        self.patch, self.norm0 = nn.Conv2d(cin, dim, patch, patch), nn.LayerNorm(dim)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.cpe = ConvPosEnc(dim)
        self.norm1, self.attn = nn.LayerNorm(dim), FactorAttn(dim, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim), Mlp(dim, dim * 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x)
        B, _, H, W = x.shape
        x = self.norm0(x.flatten(2).transpose(1, 2))
        x = torch.cat((self.cls_token.expand(B, -1, -1), x), dim=1)
        x = self.cpe(x, (H, W))
        x = x + self.attn(self.norm1(x), (H, W))
        return x + self.mlp(self.norm2(x))


class CoaTLite(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stage1, self.stage2 = CoaTStage(3, 32, 4), CoaTStage(32, 64, 2)
        self.norm, self.head = nn.LayerNorm(64), nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, _, H, W = x.shape
        x = self.stage1(x)
        x = x[:, 1:].reshape(B, H // 4, W // 4, -1).permute(0, 3, 1, 2).contiguous()
        x = self.stage2(x)
        return self.head(self.norm(x)[:, 0])


# Mobile-Former ------------------------------------------------------------------------------

class Mobile2Former(nn.Module):
    """Learned tokens read the map: q from the tokens, per head, the map one key/value head
    broadcast over them."""

    def __init__(self, dim: int, channels: int, heads: int) -> None:
        super().__init__()
        self.heads, self.scale = heads, channels ** -0.5
        self.to_q = nn.Linear(dim, heads * channels)
        self.to_out = nn.Linear(heads * channels, dim)

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        b, m, _ = z.shape
        _, c, h, w = x.shape
        x = x.reshape(b, c, h * w).transpose(1, 2).unsqueeze(1)
        q = self.to_q(z).view(b, self.heads, m, c)
        attn = (q @ x.transpose(2, 3) * self.scale).softmax(dim=-1)
        out = (attn @ x).permute(0, 2, 1, 3).reshape(b, m, self.heads * c)
        return z + self.to_out(out)


class Former2Mobile(nn.Module):
    """The map reads the tokens: one query head (the map) broadcast over the tokens' heads."""

    def __init__(self, dim: int, channels: int, heads: int) -> None:
        super().__init__()
        self.heads, self.scale = heads, channels ** -0.5
        self.to_k, self.to_v = nn.Linear(dim, heads * channels), nn.Linear(dim, heads * channels)
        self.to_out = nn.Linear(heads * channels, channels)

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        b, m, _ = z.shape
        _, c, h, w = x.shape
        q = x.reshape(b, c, h * w).transpose(1, 2).unsqueeze(1)
        k = self.to_k(z).view(b, self.heads, m, c)
        v = self.to_v(z).view(b, self.heads, m, c)
        attn = (q @ k.transpose(2, 3) * self.scale).softmax(dim=-1)
        out = (attn @ v).permute(0, 2, 1, 3).reshape(b, h * w, self.heads * c)
        out = self.to_out(out).transpose(1, 2).reshape(b, c, h, w)
        return x + out


class MobileFormer(nn.Module):
    def __init__(self, tokens: int = 6, dim: int = 48, num_classes: int = 10) -> None:
        super().__init__()
        self.tokens = nn.Parameter(torch.randn(1, tokens, dim))
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.Hardswish())
        self.blocks = nn.ModuleList()
        for cin, cout, stride in ((16, 24, 2), (24, 32, 1)):
            self.blocks.append(nn.ModuleDict(dict(
                m2f=Mobile2Former(dim, cin, 2),
                mobile=nn.Sequential(nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False),
                                     nn.BatchNorm2d(cin), nn.ReLU(),
                                     nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout)),
                former=nn.TransformerEncoderLayer(dim, 2, dim * 2, dropout=0.0,
                                                  batch_first=True, norm_first=True),
                f2m=Former2Mobile(dim, cout, 2))))
        self.head = nn.Linear(32 + dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.tokens.repeat(x.shape[0], 1, 1)
        x = self.stem(x)
        for blk in self.blocks:
            z = blk["former"](blk["m2f"](x, z))
            x = blk["f2m"](blk["mobile"](x), z)
        return self.head(torch.cat((x.mean((2, 3)), z[:, 0]), dim=1))


def _built(cls: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    return lambda: finalize(cls(), CALIB)


MODELS: dict[str, Callable[[], nn.Module]] = {
    "cait_class_attn": _built(CaiT),
    "efficientvit_msra_cga": _built(EfficientViTMSRA),
    "tnt_pixels": _built(TNT),
    "coat_lite_factor_attn": _built(CoaTLite),
    "mobile_former_bridge": _built(MobileFormer),
}
