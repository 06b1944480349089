"""Attention blocks as the model libraries teams deploy from write them (timm, transformers,
diffusers, Ultralytics, Swin), at reduced width and depth, random weights. Each is written
here from the library's pattern — the same tensor code paths (packed or per-projection q/k/v,
`view`/`transpose`/`permute` for heads, fused SDPA or eager `matmul → softmax → matmul`,
token ↔ map views) — not copied from it.

Every model takes an NCHW image, as a deployed encoder does.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


# --------------------------------------------------------------------------------------------
# timm: VisionTransformer / DINOv2 (fused SDPA, packed qkv)
# --------------------------------------------------------------------------------------------
class TimmAttention(nn.Module):
    """timm's ``Attention``: one qkv Linear, heads by reshape + permute(2, 0, 3, 1, 4),
    unbind, F.scaled_dot_product_attention, heads merged by transpose + reshape."""

    def __init__(self, dim: int, heads: int = 4, fused: bool = True) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scale = self.head_dim ** -0.5
        self.fused = fused
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        if self.fused:
            x = F.scaled_dot_product_attention(q, k, v)
        else:  # timm's non-fused path
            q = q * self.scale
            attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)
            x = attn @ v
        x = x.transpose(1, 2).reshape(b, n, c)
        return self.proj(x)


class LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), 0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, fused: bool = True, scale: bool = False) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = TimmAttention(dim, heads, fused)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))
        self.ls1 = LayerScale(dim) if scale else nn.Identity()
        self.ls2 = LayerScale(dim) if scale else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.ls1(self.attn(self.norm1(x)))
        return x + self.ls2(self.mlp(self.norm2(x)))


class TimmViT(nn.Module):
    """timm VisionTransformer; ``registers`` > 0 and layer scale: DINOv2 with registers."""

    def __init__(self, size: int = 32, patch: int = 8, dim: int = 32, depth: int = 2,
                 heads: int = 4, fused: bool = True, registers: int = 0,
                 layer_scale: bool = False) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        n = (size // patch) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.reg_token = nn.Parameter(torch.randn(1, registers, dim) * 0.02) if registers \
            else None
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads, fused, layer_scale)
                                      for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        if self.reg_token is not None:
            x = torch.cat((x[:, :1], self.reg_token.expand(x.shape[0], -1, -1), x[:, 1:]), 1)
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


# --------------------------------------------------------------------------------------------
# transformers: ViT (eager and sdpa attention), per-projection q/k/v
# --------------------------------------------------------------------------------------------
class HFSelfAttention(nn.Module):
    """transformers' ViTSelfAttention: query/key/value Linears, ``view`` to heads and
    ``transpose(1, 2)``, then eager (matmul / sqrt(d), softmax, dropout, matmul) or SDPA with
    ``scale=``; the context ``transpose(1, 2)`` and reshaped back."""

    def __init__(self, dim: int, heads: int, sdpa: bool) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scaling = self.head_dim ** -0.5
        self.sdpa = sdpa
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        self.dense = nn.Linear(dim, dim)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        b, n, _ = hidden.shape
        shape = (b, -1, self.heads, self.head_dim)
        q = self.query(hidden).view(shape).transpose(1, 2)
        k = self.key(hidden).view(shape).transpose(1, 2)
        v = self.value(hidden).view(shape).transpose(1, 2)
        if self.sdpa:
            ctx = F.scaled_dot_product_attention(q, k, v, scale=self.scaling)
        else:
            scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling
            probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            ctx = torch.matmul(probs, v)
        ctx = ctx.transpose(1, 2).contiguous()
        return self.dense(ctx.reshape(b, n, -1))


class HFViT(nn.Module):
    def __init__(self, size: int = 32, patch: int = 8, dim: int = 32, depth: int = 2,
                 heads: int = 4, sdpa: bool = False) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        n = (size // patch) ** 2
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.layers = nn.ModuleList()
        for _ in range(depth):
            self.layers.append(nn.ModuleDict({
                "ln1": nn.LayerNorm(dim), "attn": HFSelfAttention(dim, heads, sdpa),
                "ln2": nn.LayerNorm(dim), "fc1": nn.Linear(dim, 2 * dim),
                "fc2": nn.Linear(2 * dim, dim)}))
        self.ln = nn.LayerNorm(dim)
        self.classifier = nn.Linear(dim, 10)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.patch(pixels).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1) + self.pos
        for layer in self.layers:
            x = x + layer["attn"](layer["ln1"](x))
            x = x + layer["fc2"](F.gelu(layer["fc1"](layer["ln2"](x))))
        return self.classifier(self.ln(x)[:, 0, :])


# --------------------------------------------------------------------------------------------
# transformers: SegFormer encoder stage (efficient attention with a reduction conv, Mix-FFN)
# --------------------------------------------------------------------------------------------
class SegformerAttention(nn.Module):
    def __init__(self, dim: int, heads: int, sr: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        self.sr_ratio = sr
        if sr > 1:
            self.sr = nn.Conv2d(dim, dim, sr, sr)
            self.layer_norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, dim)

    def heads_of(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        b, n, c = x.shape
        q = self.heads_of(self.query(x))
        kv = x
        if self.sr_ratio > 1:
            kv = x.permute(0, 2, 1).reshape(b, c, h, w)
            kv = self.sr(kv).reshape(b, c, -1).permute(0, 2, 1)
            kv = self.layer_norm(kv)
        k, v = self.heads_of(self.key(kv)), self.heads_of(self.value(kv))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        ctx = torch.matmul(scores.softmax(dim=-1), v)
        ctx = ctx.permute(0, 2, 1, 3).contiguous().view(b, n, c)
        return self.out(ctx)


class MixFFN(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dense1 = nn.Linear(dim, dim * 2)
        self.dwconv = nn.Conv2d(dim * 2, dim * 2, 3, 1, 1, groups=dim * 2)
        self.dense2 = nn.Linear(dim * 2, dim)

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        x = self.dense1(x)
        b, _, c = x.shape
        x = x.transpose(1, 2).view(b, c, h, w)
        x = self.dwconv(x).flatten(2).transpose(1, 2)
        return self.dense2(F.gelu(x))


class Segformer(nn.Module):
    """Two encoder stages (overlapping patch embeds) and a 1×1 conv decode head: NCHW map out."""

    def __init__(self, dims: tuple[int, int] = (16, 32), heads: tuple[int, int] = (1, 2),
                 srs: tuple[int, int] = (4, 2)) -> None:
        super().__init__()
        self.embeds = nn.ModuleList()
        self.stages = nn.ModuleList()
        c_in = 3
        for i, (dim, head, sr) in enumerate(zip(dims, heads, srs, strict=True)):
            k, s = (7, 4) if i == 0 else (3, 2)
            self.embeds.append(nn.ModuleDict({"proj": nn.Conv2d(c_in, dim, k, s, k // 2),
                                              "norm": nn.LayerNorm(dim)}))
            self.stages.append(nn.ModuleDict({
                "ln1": nn.LayerNorm(dim), "attn": SegformerAttention(dim, head, sr),
                "ln2": nn.LayerNorm(dim), "ffn": MixFFN(dim), "norm": nn.LayerNorm(dim)}))
            c_in = dim
        self.head = nn.Conv2d(dims[-1], 5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        for embed, stage in zip(self.embeds, self.stages, strict=True):
            x = embed["proj"](x)
            h, w = x.shape[2], x.shape[3]
            t = embed["norm"](x.flatten(2).transpose(1, 2))
            t = t + stage["attn"](stage["ln1"](t), h, w)
            t = t + stage["ffn"](stage["ln2"](t), h, w)
            t = stage["norm"](t)
            x = t.reshape(b, h, w, -1).permute(0, 3, 1, 2).contiguous()
        return self.head(x)


# --------------------------------------------------------------------------------------------
# diffusers: UNetMidBlock2D (ResNet block, attention on the map, ResNet block)
# --------------------------------------------------------------------------------------------
class ResnetBlock2D(nn.Module):
    def __init__(self, c: int, groups: int = 4) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, c)
        self.conv1 = nn.Conv2d(c, c, 3, 1, 1)
        self.norm2 = nn.GroupNorm(groups, c)
        self.conv2 = nn.Conv2d(c, c, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return x + h


class DiffusersAttention(nn.Module):
    """diffusers' Attention with AttnProcessor2_0: group norm on the map, the map viewed as
    tokens, to_q/to_k/to_v, heads by view + transpose(1, 2), SDPA, merged back, to_out, the
    tokens viewed back into a map, residual."""

    def __init__(self, c: int, heads: int = 1, groups: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.group_norm = nn.GroupNorm(groups, c)
        self.to_q, self.to_k, self.to_v = nn.Linear(c, c), nn.Linear(c, c), nn.Linear(c, c)
        self.to_out = nn.ModuleList([nn.Linear(c, c), nn.Dropout(0.0)])

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        residual = hidden
        b, c, h, w = hidden.shape
        hidden = self.group_norm(hidden)
        hidden = hidden.view(b, c, h * w).transpose(1, 2)
        q, k, v = self.to_q(hidden), self.to_k(hidden), self.to_v(hidden)
        head_dim = c // self.heads
        q = q.view(b, -1, self.heads, head_dim).transpose(1, 2)
        k = k.view(b, -1, self.heads, head_dim).transpose(1, 2)
        v = v.view(b, -1, self.heads, head_dim).transpose(1, 2)
        hidden = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=False)
        hidden = hidden.transpose(1, 2).reshape(b, -1, self.heads * head_dim)
        hidden = self.to_out[1](self.to_out[0](hidden))
        hidden = hidden.transpose(-1, -2).reshape(b, c, h, w)
        return hidden + residual


class UNetMidBlock2D(nn.Module):
    def __init__(self, c: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(3, c, 3, 1, 1)
        self.resnets = nn.ModuleList([ResnetBlock2D(c), ResnetBlock2D(c)])
        self.attentions = nn.ModuleList([DiffusersAttention(c, heads)])
        self.conv_out = nn.Conv2d(c, 3, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.resnets[0](self.conv_in(x))
        x = self.resnets[1](self.attentions[0](x))
        return self.conv_out(x)


# --------------------------------------------------------------------------------------------
# Ultralytics: YOLO11's PSA (hand-written, channel-major attention on conv outputs)
# --------------------------------------------------------------------------------------------
class PSAAttention(nn.Module):
    def __init__(self, dim: int, heads: int = 2, attn_ratio: float = 0.5) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.key_dim = int(self.head_dim * attn_ratio)
        self.scale = self.key_dim ** -0.5
        nh_kd = self.key_dim * heads
        self.qkv = nn.Conv2d(dim, dim + nh_kd * 2, 1)
        self.proj = nn.Conv2d(dim, dim, 1)
        self.pe = nn.Conv2d(dim, dim, 3, 1, 1, groups=dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        n = h * w
        qkv = self.qkv(x)
        q, k, v = qkv.view(b, self.heads, self.key_dim * 2 + self.head_dim, n).split(
            [self.key_dim, self.key_dim, self.head_dim], dim=2)
        attn = (q.transpose(-2, -1) @ k) * self.scale
        attn = attn.softmax(dim=-1)
        x = (v @ attn.transpose(-2, -1)).view(b, c, h, w) + self.pe(v.reshape(b, c, h, w))
        return self.proj(x)


class PSABlock(nn.Module):
    def __init__(self, c: int = 32) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1), nn.SiLU())
        self.attn = PSAAttention(c)
        self.ffn = nn.Sequential(nn.Conv2d(c, c * 2, 1), nn.SiLU(), nn.Conv2d(c * 2, c, 1))
        self.head = nn.Conv2d(c, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = x + self.attn(x)
        x = x + self.ffn(x)
        return self.head(x)


# --------------------------------------------------------------------------------------------
# Swin: shifted-window attention with relative position bias, patch merging
# --------------------------------------------------------------------------------------------
def window_partition(x: torch.Tensor, ws: int) -> torch.Tensor:
    b, h, w, c = x.shape
    x = x.view(b, h // ws, ws, w // ws, ws, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, ws, ws, c)


def window_reverse(windows: torch.Tensor, ws: int, h: int, w: int) -> torch.Tensor:
    c = windows.shape[-1]
    x = windows.view(-1, h // ws, w // ws, ws, ws, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, h, w, c)


class WindowAttention(nn.Module):
    def __init__(self, dim: int, ws: int, heads: int) -> None:
        super().__init__()
        self.ws, self.heads = ws, heads
        self.scale = (dim // heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(
            torch.randn((2 * ws - 1) ** 2, heads) * 0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij"))
        flat = coords.flatten(1)
        rel = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += ws - 1
        rel[:, :, 1] += ws - 1
        rel[:, :, 0] *= 2 * ws - 1
        self.register_buffer("relative_position_index", rel.sum(-1), persistent=False)
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        bw, n, c = x.shape
        qkv = self.qkv(x).reshape(bw, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(
            n, n, -1).permute(2, 0, 1).contiguous()
        attn = attn + bias.unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.view(-1, nw, self.heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.heads, n, n)
        attn = attn.softmax(-1)
        x = (attn @ v).transpose(1, 2).reshape(bw, n, c)
        return self.proj(x)


class SwinBlock(nn.Module):
    def __init__(self, dim: int, res: int, heads: int, ws: int, shift: int) -> None:
        super().__init__()
        self.res, self.ws, self.shift = res, min(ws, res), shift if res > ws else 0
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, self.ws, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        mask = None
        if self.shift:
            img = torch.zeros(1, res, res, 1)
            cnt = 0
            for hs in (slice(0, -self.ws), slice(-self.ws, -self.shift), slice(-self.shift, None)):
                for wsl in (slice(0, -self.ws), slice(-self.ws, -self.shift),
                            slice(-self.shift, None)):
                    img[:, hs, wsl, :] = cnt
                    cnt += 1
            mw = window_partition(img, self.ws).view(-1, self.ws * self.ws)
            mask = mw.unsqueeze(1) - mw.unsqueeze(2)
            mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
        self.register_buffer("attn_mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, hw, c = x.shape
        h = w = self.res
        shortcut = x
        x = self.norm1(x).view(b, h, w, c)
        if self.shift:
            x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        windows = window_partition(x, self.ws).view(-1, self.ws * self.ws, c)
        windows = self.attn(windows, self.attn_mask)
        x = window_reverse(windows.view(-1, self.ws, self.ws, c), self.ws, h, w)
        if self.shift:
            x = torch.roll(x, shifts=(self.shift, self.shift), dims=(1, 2))
        x = shortcut + x.view(b, hw, c)
        return x + self.mlp(self.norm2(x))


class Swin(nn.Module):
    """Patch embed (conv 4×4), two blocks (plain and shifted windows), patch merging, one
    block whose window covers the whole map, head."""

    def __init__(self, size: int = 32, dim: int = 16, ws: int = 4) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, 4, 4)
        self.norm0 = nn.LayerNorm(dim)
        res = size // 4
        self.stage1 = nn.Sequential(SwinBlock(dim, res, 2, ws, 0),
                                    SwinBlock(dim, res, 2, ws, ws // 2))
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm_merge = nn.LayerNorm(4 * dim)
        self.res2 = res // 2
        self.stage2 = SwinBlock(2 * dim, self.res2, 4, ws, 0)  # the window covers the map
        self.norm = nn.LayerNorm(2 * dim)
        self.head = nn.Linear(2 * dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm0(self.patch_embed(x).flatten(2).transpose(1, 2))
        x = self.stage1(x)
        b, hw, c = x.shape
        r = math.isqrt(hw)
        x = x.view(b, r, r, c)
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]],
                      -1).view(b, -1, 4 * c)
        x = self.stage2(self.reduction(self.norm_merge(x)))
        return self.head(self.norm(x).mean(1))


# --------------------------------------------------------------------------------------------
# torch.nn.MultiheadAttention on a conv feature map (DETR-style encoder layer)
# --------------------------------------------------------------------------------------------
class MHAEncoder(nn.Module):
    def __init__(self, c: int = 32, heads: int = 4, batch_first: bool = True,
                 need_weights: bool = False, key_padding: bool = False) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1), nn.ReLU(),
                                      nn.Conv2d(c, c, 3, 2, 1))
        self.attn = nn.MultiheadAttention(c, heads, batch_first=batch_first)
        self.batch_first, self.need_weights = batch_first, need_weights
        self.key_padding = key_padding
        self.norm = nn.LayerNorm(c)
        self.head = nn.Conv2d(c, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.backbone(x)
        b, c, h, w = f.shape
        t = f.flatten(2).permute(0, 2, 1) if self.batch_first else f.flatten(2).permute(2, 0, 1)
        mask = None
        if self.key_padding:
            mask = torch.zeros(b, h * w, dtype=torch.bool, device=x.device)
            mask[:, -1] = True
        a = self.attn(t, t, t, need_weights=self.need_weights, key_padding_mask=mask)[0]
        t = self.norm(t + a)
        m = t.permute(0, 2, 1) if self.batch_first else t.permute(1, 2, 0)
        return self.head(m.reshape(b, c, h, w))


# --------------------------------------------------------------------------------------------
# EfficientFormerV2: Attention4D with a strided downsample, talking heads and an upsample
# --------------------------------------------------------------------------------------------
class ConvNorm(nn.Sequential):
    def __init__(self, c_in: int, c_out: int, k: int = 1, s: int = 1, g: int = 1) -> None:
        super().__init__(nn.Conv2d(c_in, c_out, k, s, k // 2, groups=g, bias=False),
                         nn.BatchNorm2d(c_out))


class Attention4D(nn.Module):
    def __init__(self, dim: int = 32, key_dim: int = 8, heads: int = 2, ratio: int = 2,
                 res: int = 8, stride: int = 2) -> None:
        super().__init__()
        self.heads, self.scale = heads, key_dim ** -0.5
        self.res = math.ceil(res / stride)
        self.n = self.res ** 2
        self.d = ratio * key_dim
        self.dh = self.d * heads
        self.stride_conv = ConvNorm(dim, dim, 3, stride, dim)
        self.upsample = nn.Upsample(scale_factor=stride, mode="bilinear")
        self.q = ConvNorm(dim, key_dim * heads)
        self.k = ConvNorm(dim, key_dim * heads)
        self.v = ConvNorm(dim, self.dh)
        self.v_local = ConvNorm(self.dh, self.dh, 3, 1, self.dh)
        self.talking_head1 = nn.Conv2d(heads, heads, 1)
        self.talking_head2 = nn.Conv2d(heads, heads, 1)
        self.proj = ConvNorm(self.dh, dim)
        self.attention_biases = nn.Parameter(torch.randn(heads, self.n) * 0.02)
        pos = torch.stack(torch.meshgrid(torch.arange(self.res), torch.arange(self.res),
                                         indexing="ij")).flatten(1)
        rel = (pos[..., :, None] - pos[..., None, :]).abs()
        self.register_buffer("bias_idxs", rel[0] * self.res + rel[1], persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        x = self.stride_conv(x)
        q = self.q(x).reshape(b, self.heads, -1, self.n).permute(0, 1, 3, 2)
        k = self.k(x).reshape(b, self.heads, -1, self.n).permute(0, 1, 2, 3)
        v = self.v(x)
        v_local = self.v_local(v)
        v = v.reshape(b, self.heads, -1, self.n).permute(0, 1, 3, 2)
        attn = (q @ k) * self.scale + self.attention_biases[:, self.bias_idxs]
        attn = self.talking_head2(self.talking_head1(attn).softmax(dim=-1))
        out = (attn @ v).transpose(2, 3).reshape(b, self.dh, self.res, self.res) + v_local
        return self.proj(F.gelu(self.upsample(out)))


class EfficientFormerV2Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(ConvNorm(3, 32, 3, 2), nn.GELU())
        self.attn = Attention4D(res=16)
        self.head = nn.Conv2d(32, 6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        return self.head(x + self.attn(x))


# --------------------------------------------------------------------------------------------
# RT-DETR: multi-scale deformable attention (grid_sample per level and head)
# --------------------------------------------------------------------------------------------
class MSDeformableAttention(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, levels: int = 2, points: int = 3) -> None:
        super().__init__()
        self.heads, self.levels, self.points = heads, levels, points
        self.head_dim = dim // heads
        self.sampling_offsets = nn.Linear(dim, heads * levels * points * 2)
        self.attention_weights = nn.Linear(dim, heads * levels * points)
        self.value_proj = nn.Linear(dim, dim)
        self.output_proj = nn.Linear(dim, dim)

    def forward(self, query: torch.Tensor, ref: torch.Tensor, value: torch.Tensor,
                shapes: list[tuple[int, int]]) -> torch.Tensor:
        bs, nq, _ = query.shape
        value = self.value_proj(value).view(bs, -1, self.heads, self.head_dim)
        off = self.sampling_offsets(query).view(bs, nq, self.heads, self.levels, self.points, 2)
        w = self.attention_weights(query).view(bs, nq, self.heads, self.levels * self.points)
        w = F.softmax(w, -1).view(bs, nq, self.heads, self.levels, self.points)
        norm = torch.tensor([[w_, h_] for h_, w_ in shapes], dtype=query.dtype)
        loc = ref[:, :, None, :, None, :] + off / norm[None, None, None, :, None, :]
        grids = 2 * loc - 1
        values = value.split([h * w_ for h, w_ in shapes], dim=1)
        sampled = []
        for lvl, (h, w_) in enumerate(shapes):
            v = values[lvl].flatten(2).transpose(1, 2).reshape(bs * self.heads, self.head_dim,
                                                                 h, w_)
            g = grids[:, :, :, lvl].transpose(1, 2).flatten(0, 1)
            sampled.append(F.grid_sample(v, g, mode="bilinear", padding_mode="zeros",
                                         align_corners=False))
        w = w.transpose(1, 2).reshape(bs * self.heads, 1, nq, self.levels * self.points)
        out = (torch.stack(sampled, dim=-2).flatten(-2) * w).sum(-1)
        out = out.view(bs, self.heads * self.head_dim, nq)
        return self.output_proj(out.transpose(1, 2))


class RTDETRDecoderLayer(nn.Module):
    """Two backbone levels flattened into one value sequence; queries from a learned
    embedding with reference points; deformable cross-attention; a box head."""

    def __init__(self, dim: int = 32, queries: int = 10) -> None:
        super().__init__()
        self.l1 = nn.Sequential(nn.Conv2d(3, dim, 3, 2, 1), nn.ReLU())
        self.l2 = nn.Sequential(nn.Conv2d(dim, dim, 3, 2, 1), nn.ReLU())
        self.query = nn.Parameter(torch.randn(1, queries, dim) * 0.1)
        self.ref = nn.Parameter(torch.rand(1, queries, 2))
        self.cross = MSDeformableAttention(dim)
        self.box = nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f1 = self.l1(x)
        f2 = self.l2(f1)
        shapes = [(f1.shape[2], f1.shape[3]), (f2.shape[2], f2.shape[3])]
        value = torch.cat([f.flatten(2).transpose(1, 2) for f in (f1, f2)], 1)
        refs = self.ref.sigmoid()[:, :, None, :].expand(-1, -1, 2, -1)
        q = self.query.expand(x.shape[0], -1, -1)
        return self.box(q + self.cross(q, refs, value, shapes)).sigmoid()


#: The input size the models are built for (their token grids and windows depend on it)
SIZE = 32

MODELS: dict[str, Callable[[], nn.Module]] = {
    "timm_vit": lambda: TimmViT(),
    "timm_vit_eager": lambda: TimmViT(fused=False),
    "dinov2_reg": lambda: TimmViT(registers=2, layer_scale=True),
    "hf_vit_eager": lambda: HFViT(),
    "hf_vit_sdpa": lambda: HFViT(sdpa=True),
    "segformer": lambda: Segformer(),
    "diffusers_mid": lambda: UNetMidBlock2D(),
    "yolo11_psa": lambda: PSABlock(),
    "swin": lambda: Swin(),
    "mha_batch_first": lambda: MHAEncoder(),
    "mha_seq_first": lambda: MHAEncoder(batch_first=False),
    "mha_weights": lambda: MHAEncoder(need_weights=True),
    "mha_padding_mask": lambda: MHAEncoder(key_padding=True),
    "efficientformerv2": lambda: EfficientFormerV2Block(),
    "rtdetr_deformable": lambda: RTDETRDecoderLayer(),
}
