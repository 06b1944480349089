"""Hybrid and convolutional families of a seventh held-out set, written as their reference code
writes them (timm, transformers, the papers' repositories), small, random weights, each fed the
zoo's 64×64 image: EdgeNeXt (timm: a channels-last ConvEncoder block through
``permute(0, 2, 3, 1)``, the SDTA block's ``chunk`` of the channels into depthwise-convolved
scales added in cascade, Fourier positions built in forward from a ``cumsum`` of an all-true
mask, cross-covariance attention on ``F.normalize``-d q and k over the tokens with a
per-head temperature), DaViT (timm: conditional position encodings as depthwise convs, a
channel-group attention ``kᵀ @ v`` then ``@ qᵀ``, window attention on ``F.pad``-ded,
``view``/``permute``-partitioned windows, tokens back by ``transpose(1, 2).view``),
GC ViT (timm: a fused-MBConv global query generator with max pools down to the window, local
and global-query window attention with ``q_global.repeat`` over the windows and a relative
position table indexed by a buffer, the stage in NHWC between ``permute``-s), SwiftFormer
(transformers: efficient additive attention, ``query @ w_g``, a softmax over the size-one
axis, ``torch.sum`` to a global query ``repeat``-ed over the tokens), PiT (timm: a NCHW
position embedding added to the patch map, a depthwise stride-2 conv pooling the token map and
a Linear for the cls token, ``flatten(2).transpose(1, 2)`` + ``cat`` and back by
``transpose(1, 2).reshape``), CoAtNet (timm's MaxxViT code: MBConv with pre-norm and SE,
NCHW ``Attention2d`` with a 1×1 qkv ``view``-ed head-first and ``chunk``-ed, eager
``q.transpose(-2, -1) @ k``, a relative position bias, ``v @ attnᵀ``, pooled shortcuts),
FastViT (timm: MobileOne train-time branches summed with ``+=``, RepMixer
``x + ls(mixer(x) - norm(x))``, the conditional position encoding as a 7×7 depthwise conv, a
BatchNorm + attention stage on ``flatten(2).transpose``-ed tokens), VAN (the paper's
repository: large kernel attention, depthwise 5×5 then depthwise 7×7 dilated by 3 then 1×1,
multiplied with ``x.clone()``; BatchNorm blocks, a per-stage LayerNorm through
``flatten(2).transpose(1, 2)`` and ``reshape(B, H, W, -1).permute(0, 3, 1, 2)``), SegNeXt's
MSCAN (mmseg: multi-scale strip depthwise convs 1×7/7×1, 1×11/11×1, 1×21/21×1 summed,
tokens carried as (B, N, C) between blocks by ``permute(0, 2, 1).view``; a bilinear concat
head), RepLKNet (the paper's repository: 31×31 and 29×29 depthwise kernels with a 5×5 branch
added by ``+=``, pre-BN blocks and ConvFFN), GhostNetV2 (timm: DFC attention, a
``F.avg_pool2d``-ed short conv with 1×5 and 5×1 depthwise convs, ``sigmoid`` upsampled by
``F.interpolate(mode="nearest")`` multiplying the sliced ghost ``cat``; the SE gate written
out as ``F.relu6(x + 3.0) / 6.0`` as the paper's repository does), NFNet (timm:
``ScaledStdConv2d`` standardizing its weight in forward by ``F.batch_norm(training=True)``
with a gain, scaled GELU, α/β-scaled residuals, a ``DownsampleAvg`` shortcut, SE) and BiT
(the big_transfer repository: ``StdConv2d`` by ``torch.var_mean`` over the weight,
pre-activation GroupNorm bottlenecks, ``ConstantPad2d`` + unpadded max pool, a 1×1 conv head
and ``[..., 0, 0]``).
Layer scales and zero-initialised gains are random here so every branch counts; norm affines
are randomized and BatchNorm calibrated on one batch (`finalize`); the floors come from the
exported graph (`graph_floor`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from zoo._common import finalize

CALIB = (2, 3, 64, 64)


def _ls(dim: int, *shape: int) -> nn.Parameter:
    """A layer scale (1e-6 or 1e-5 in the references), random here so the branch counts."""
    return nn.Parameter(torch.rand(dim, *shape) * 0.5 + 0.5)


class LayerNorm2d(nn.LayerNorm):
    """timm's LayerNorm2d: ``permute(0, 2, 3, 1)``, ``F.layer_norm``, ``permute(0, 3, 1, 2)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class Mlp(nn.Module):
    """timm's Mlp on the last axis."""

    def __init__(self, dim: int, hidden: int, act: Callable[[], nn.Module] = nn.GELU) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), act(), nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class SEModule(nn.Module):
    """timm's SqueezeExcite (SEModule): ``x.mean((2, 3), keepdim=True)``, 1×1 convs, gate."""

    def __init__(self, c: int, rd: int,
                 gate: Callable[[torch.Tensor], torch.Tensor] = torch.sigmoid,
                 bias: bool = True) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(c, rd, 1, bias=bias)
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(rd, c, 1, bias=bias)
        self.gate = gate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_se = x.mean((2, 3), keepdim=True)
        x_se = self.fc2(self.act(self.fc1(x_se)))
        return x * self.gate(x_se)


# --------------------------------------------------------------------------------------------
# timm: EdgeNeXt (ConvEncoder, SDTA = split depthwise + transposed (XCA) attention)
# --------------------------------------------------------------------------------------------
class PositionalEncodingFourier(nn.Module):
    def __init__(self, hidden_dim: int = 32, dim: int = 768, temperature: float = 10000) -> None:
        super().__init__()
        self.token_projection = nn.Conv2d(hidden_dim * 2, dim, kernel_size=1)
        self.scale = 2 * math.pi
        self.temperature = temperature
        self.hidden_dim = hidden_dim
        self.dim = dim

    def forward(self, shape: tuple[int, int, int]) -> torch.Tensor:
        device = self.token_projection.weight.device
        dtype = self.token_projection.weight.dtype
        inv_mask = ~torch.zeros(shape).to(device=device, dtype=torch.bool)
        y_embed = inv_mask.cumsum(1, dtype=torch.float32)
        x_embed = inv_mask.cumsum(2, dtype=torch.float32)
        eps = 1e-6
        y_embed = y_embed / (y_embed[:, -1:, :] + eps) * self.scale
        x_embed = x_embed / (x_embed[:, :, -1:] + eps) * self.scale
        dim_t = torch.arange(self.hidden_dim, dtype=torch.int64, device=device).to(torch.float32)
        dim_t = self.temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor")
                                     / self.hidden_dim)
        pos_x = x_embed[:, :, :, None] / dim_t
        pos_y = y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()),
                            dim=4).flatten(3)
        pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()),
                            dim=4).flatten(3)
        pos = torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)
        return self.token_projection(pos.to(dtype))


class EdgeConvBlock(nn.Module):
    """EdgeNeXt's ConvEncoder: depthwise kxk, then LayerNorm + MLP channels-last."""

    def __init__(self, dim: int, k: int = 7, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.conv_dw = nn.Conv2d(dim, dim, k, padding=k // 2, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, mlp_ratio * dim)
        self.gamma = _ls(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.conv_dw(x)
        x = x.permute(0, 2, 3, 1)
        x = self.norm(x)
        x = self.mlp(x)
        x = self.gamma * x
        x = x.permute(0, 3, 1, 2)
        return shortcut + x


class CrossCovarianceAttn(nn.Module):
    def __init__(self, dim: int, num_heads: int = 8) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.temperature = nn.Parameter(torch.rand(num_heads, 1, 1) + 0.5)
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, -1).permute(2, 0, 3, 4, 1)
        q, k, v = qkv.unbind(0)
        attn = (F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
                ) * self.temperature
        attn = attn.softmax(dim=-1)
        x = attn @ v
        x = x.permute(0, 3, 1, 2).reshape(B, N, C)
        return self.proj(x)


class SplitTransposeBlock(nn.Module):
    def __init__(self, dim: int, num_scales: int = 2, num_heads: int = 2,
                 expand_ratio: int = 4) -> None:
        super().__init__()
        width = max(math.ceil(dim / num_scales), dim // num_scales)
        self.width = width
        self.num_scales = max(1, num_scales - 1)
        self.convs = nn.ModuleList(nn.Conv2d(width, width, 3, padding=1, groups=width)
                                   for _ in range(self.num_scales))
        self.pos_embd = PositionalEncodingFourier(dim=dim)
        self.norm_xca = nn.LayerNorm(dim, eps=1e-6)
        self.gamma_xca = _ls(dim)
        self.xca = CrossCovarianceAttn(dim, num_heads)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(expand_ratio * dim))
        self.gamma = _ls(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        spx = x.chunk(len(self.convs) + 1, dim=1)
        spo = []
        sp = spx[0]
        for i, conv in enumerate(self.convs):
            sp = spx[i] if i == 0 else sp + spx[i]
            sp = conv(sp)
            spo.append(sp)
        spo.append(spx[-1])
        x = torch.cat(spo, 1)
        B, C, H, W = x.shape
        x = x.reshape(B, C, H * W).permute(0, 2, 1)
        pos_encoding = self.pos_embd((B, H, W)).reshape(B, -1, x.shape[1]).permute(0, 2, 1)
        x = x + pos_encoding
        x = x + self.gamma_xca * self.xca(self.norm_xca(x))
        x = x.reshape(B, H, W, C)
        x = self.norm(x)
        x = self.mlp(x)
        x = self.gamma * x
        x = x.permute(0, 3, 1, 2)
        return shortcut + x


class EdgeNeXt(nn.Module):
    """Maaz et al.'s EdgeNeXt: a 4×4/4 stem + LayerNorm2d, three stages (a ConvEncoder block;
    then an SDTA block of 2 and of 3 scales), LayerNorm2d + 2×2/2 conv downsamples, a pooled
    LayerNorm2d head."""

    def __init__(self, dims: tuple[int, ...] = (16, 32, 48), num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0]))
        self.stages = nn.ModuleList()
        for i, d in enumerate(dims):
            down = (nn.Identity() if i == 0 else
                    nn.Sequential(LayerNorm2d(dims[i - 1]), nn.Conv2d(dims[i - 1], d, 2, 2)))
            block = (EdgeConvBlock(d, k=3) if i == 0 else
                     SplitTransposeBlock(d, num_scales=i + 1, num_heads=2))
            self.stages.append(nn.Sequential(down, block))
        self.norm = LayerNorm2d(dims[-1])
        self.fc = nn.Linear(dims[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        x = self.norm(F.adaptive_avg_pool2d(x, 1))
        return self.fc(x.flatten(1))


# --------------------------------------------------------------------------------------------
# timm: DaViT (channel-group attention + window attention, NCHW between blocks)
# --------------------------------------------------------------------------------------------
class ConvPosEnc(nn.Module):
    def __init__(self, dim: int, k: int = 3) -> None:
        super().__init__()
        self.proj = nn.Conv2d(dim, dim, k, 1, k // 2, groups=dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.proj(x)


class ChannelAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int = 2) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads
                                  ).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        k = k * self.scale
        attn = k.transpose(-1, -2) @ v
        attn = attn.softmax(dim=-1)
        x = (attn @ q.transpose(-1, -2)).transpose(-1, -2)
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class ChannelBlock(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.cpe1, self.cpe2 = ConvPosEnc(dim), ConvPosEnc(dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = ChannelAttention(dim, num_heads)
        self.mlp = Mlp(dim, 4 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape
        x = self.cpe1(x).flatten(2).transpose(1, 2)
        cur = self.norm1(x)
        cur = self.attn(cur)
        x = x + cur
        x = self.cpe2(x.transpose(1, 2).view(B, C, H, W))
        x = x.flatten(2).transpose(1, 2)
        x = x + self.mlp(self.norm2(x))
        return x.transpose(1, 2).view(B, C, H, W)


def window_partition(x: torch.Tensor, window_size: tuple[int, int]) -> torch.Tensor:
    B, H, W, C = x.shape
    x = x.view(B, H // window_size[0], window_size[0], W // window_size[1], window_size[1], C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window_size[0], window_size[1], C)


def window_reverse(windows: torch.Tensor, window_size: tuple[int, int], H: int,
                   W: int) -> torch.Tensor:
    C = windows.shape[-1]
    x = windows.view(-1, H // window_size[0], W // window_size[1], window_size[0],
                     window_size[1], C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, H, W, C)


class DaViTWindowAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B_, N, C = x.shape
        qkv = self.qkv(x).reshape(B_, N, 3, self.num_heads, C // self.num_heads
                                  ).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q * self.scale
        attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B_, N, C)
        return self.proj(x)


class SpatialBlock(nn.Module):
    def __init__(self, dim: int, num_heads: int, window_size: int = 7) -> None:
        super().__init__()
        self.window_size = (window_size, window_size)
        self.cpe1, self.cpe2 = ConvPosEnc(dim), ConvPosEnc(dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = DaViTWindowAttention(dim, num_heads)
        self.mlp = Mlp(dim, 4 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape
        shortcut = self.cpe1(x).flatten(2).transpose(1, 2)
        x = self.norm1(shortcut)
        x = x.view(B, H, W, C)
        pad_l = pad_t = 0
        pad_r = (self.window_size[1] - W % self.window_size[1]) % self.window_size[1]
        pad_b = (self.window_size[0] - H % self.window_size[0]) % self.window_size[0]
        x = F.pad(x, (0, 0, pad_l, pad_r, pad_t, pad_b))
        _, Hp, Wp, _ = x.shape
        x_windows = window_partition(x, self.window_size)
        x_windows = x_windows.view(-1, self.window_size[0] * self.window_size[1], C)
        attn_windows = self.attn(x_windows)
        attn_windows = attn_windows.view(-1, self.window_size[0], self.window_size[1], C)
        x = window_reverse(attn_windows, self.window_size, Hp, Wp)
        x = x[:, :H, :W, :].contiguous()
        x = x.view(B, H * W, C)
        x = shortcut + x
        x = self.cpe2(x.transpose(1, 2).view(B, C, H, W))
        x = x.flatten(2).transpose(1, 2)
        x = x + self.mlp(self.norm2(x))
        return x.transpose(1, 2).view(B, C, H, W)


class DaViT(nn.Module):
    """Ding et al.'s DaViT: a 7×7/4 conv stem + LayerNorm2d, two stages of (spatial window
    block, channel block) pairs (window 7 on 16×16 and 8×8 maps: padded), a LayerNorm2d +
    2×2/2 conv downsample, pooled LayerNorm head."""

    def __init__(self, dims: tuple[int, int] = (16, 32), heads: tuple[int, int] = (1, 2),
                 num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 7, 4, 3), LayerNorm2d(dims[0]))
        self.stages = nn.ModuleList()
        for i, (d, h) in enumerate(zip(dims, heads, strict=True)):
            down = (nn.Identity() if i == 0 else
                    nn.Sequential(LayerNorm2d(dims[i - 1]), nn.Conv2d(dims[i - 1], d, 2, 2)))
            self.stages.append(nn.Sequential(down, SpatialBlock(d, h), ChannelBlock(d, h)))
        self.norm = nn.LayerNorm(dims[-1])
        self.fc = nn.Linear(dims[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return self.fc(self.norm(x.mean((2, 3))))


# --------------------------------------------------------------------------------------------
# timm: GC ViT (global query tokens from a fused-MBConv feature block)
# --------------------------------------------------------------------------------------------
class GCMbConvBlock(nn.Module):
    """GC ViT's MbConvBlock: depthwise 3×3, GELU, SE (no bias), 1×1, residual."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv_dw = nn.Conv2d(c, c, 3, 1, 1, groups=c, bias=False)
        self.act = nn.GELU()
        self.se = SEModule(c, max(1, c // 4), bias=False)
        self.conv_pw = nn.Conv2d(c, c, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.conv_dw(x)
        x = self.act(x)
        x = self.se(x)
        x = self.conv_pw(x)
        return x + shortcut


class GCDownsample2d(nn.Module):
    def __init__(self, dim: int, dim_out: int) -> None:
        super().__init__()
        self.norm1 = LayerNorm2d(dim)
        self.conv_block = GCMbConvBlock(dim)
        self.reduction = nn.Conv2d(dim, dim_out, 3, 2, 1, bias=False)
        self.norm2 = LayerNorm2d(dim_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm2(self.reduction(self.conv_block(self.norm1(x))))


class FeatureBlock(nn.Module):
    def __init__(self, dim: int, levels: int = 0) -> None:
        super().__init__()
        reductions = levels
        levels = max(1, levels)
        self.blocks = nn.Sequential()
        for i in range(levels):
            self.blocks.add_module(f"conv{i + 1}", GCMbConvBlock(dim))
            if reductions:
                self.blocks.add_module(f"pool{i + 1}", nn.MaxPool2d(3, 2, 1))
                reductions -= 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


def get_relative_position_index(win_h: int, win_w: int) -> torch.Tensor:
    coords = torch.stack(torch.meshgrid(torch.arange(win_h), torch.arange(win_w),
                                        indexing="ij")).flatten(1)
    relative_coords = coords[:, :, None] - coords[:, None, :]
    relative_coords = relative_coords.permute(1, 2, 0).contiguous()
    relative_coords[:, :, 0] += win_h - 1
    relative_coords[:, :, 1] += win_w - 1
    relative_coords[:, :, 0] *= 2 * win_w - 1
    return relative_coords.sum(-1)


class RelPosBias(nn.Module):
    def __init__(self, window_size: tuple[int, int], num_heads: int) -> None:
        super().__init__()
        self.window_size = window_size
        self.window_area = window_size[0] * window_size[1]
        self.relative_position_bias_table = nn.Parameter(
            torch.randn((2 * window_size[0] - 1) * (2 * window_size[1] - 1), num_heads) * 0.5)
        self.register_buffer("relative_position_index",
                             get_relative_position_index(*window_size), persistent=False)

    def forward(self, attn: torch.Tensor) -> torch.Tensor:
        relative_position_bias = self.relative_position_bias_table[
            self.relative_position_index.view(-1)].view(self.window_area, self.window_area, -1)
        relative_position_bias = relative_position_bias.permute(2, 0, 1).contiguous()
        return attn + relative_position_bias.unsqueeze(0)


class WindowAttentionGlobal(nn.Module):
    def __init__(self, dim: int, num_heads: int, window_size: tuple[int, int],
                 use_global: bool = True) -> None:
        super().__init__()
        self.window_size = window_size
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.use_global = use_global
        self.rel_pos = RelPosBias(window_size=window_size, num_heads=num_heads)
        self.qkv = nn.Linear(dim, dim * (2 if use_global else 3))
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, q_global: torch.Tensor | None = None) -> torch.Tensor:
        B, N, C = x.shape
        if self.use_global and q_global is not None:
            kv = self.qkv(x)
            kv = kv.reshape(B, N, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            k, v = kv.unbind(0)
            q = q_global.repeat(B // q_global.shape[0], 1, 1, 1)
            q = q.reshape(B, N, self.num_heads, self.head_dim).permute(0, 2, 1, 3)
        else:
            qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim
                                      ).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
        q = q * self.scale
        attn = q @ k.transpose(-2, -1).contiguous()
        attn = self.rel_pos(attn)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class GlobalContextVitBlock(nn.Module):
    def __init__(self, dim: int, num_heads: int, window_size: tuple[int, int],
                 use_global: bool) -> None:
        super().__init__()
        self.window_size = window_size
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttentionGlobal(dim, num_heads, window_size, use_global)
        self.gamma1 = _ls(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, 4 * dim)
        self.gamma2 = _ls(dim)

    def _window_attn(self, x: torch.Tensor, q_global: torch.Tensor | None) -> torch.Tensor:
        _, H, W, C = x.shape
        x_win = window_partition(x, self.window_size)
        x_win = x_win.view(-1, self.window_size[0] * self.window_size[1], C)
        attn_win = self.attn(x_win, q_global)
        return window_reverse(attn_win, self.window_size, H, W)

    def forward(self, x: torch.Tensor, q_global: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.gamma1 * self._window_attn(self.norm1(x), q_global)  # timm's LayerScale
        return x + self.gamma2 * self.mlp(self.norm2(x))


class GlobalContextVitStage(nn.Module):
    def __init__(self, dim: int, dim_in: int, feat_size: int, window: int, num_heads: int,
                 downsample: bool) -> None:
        super().__init__()
        self.downsample = GCDownsample2d(dim_in, dim) if downsample else nn.Identity()
        window_size = (window, window)
        feat_levels = int(math.log2(feat_size / window))
        self.global_block = FeatureBlock(dim, feat_levels)
        self.global_norm = nn.LayerNorm(dim)
        self.blocks = nn.ModuleList(GlobalContextVitBlock(dim, num_heads, window_size,
                                                          use_global=(i % 2 != 0))
                                    for i in range(2))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.downsample(x)
        global_query = self.global_block(x)
        x = x.permute(0, 2, 3, 1)
        global_query = self.global_norm(global_query.permute(0, 2, 3, 1))
        for blk in self.blocks:
            x = blk(x, global_query)
        x = self.norm(x)
        return x.permute(0, 3, 1, 2).contiguous()


class GCViT(nn.Module):
    """Hatamizadeh et al.'s GC ViT: a 3×3/2 conv stem + GC downsample (LayerNorm2d, MBConv,
    3×3/2 conv, LayerNorm2d), two stages of a local and a global-query window block (window 4
    on 16×16 and 8×8 maps; the global queries from MBConv + max pools down to 4×4), pooled
    LayerNorm2d head."""

    def __init__(self, dims: tuple[int, int] = (16, 32), heads: tuple[int, int] = (2, 4),
                 num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 3, 2, 1), GCDownsample2d(dims[0], dims[0]))
        self.stages = nn.Sequential(
            GlobalContextVitStage(dims[0], dims[0], 16, 4, heads[0], downsample=False),
            GlobalContextVitStage(dims[1], dims[0], 8, 4, heads[1], downsample=True))
        self.norm = LayerNorm2d(dims[-1])
        self.fc = nn.Linear(dims[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.stages(self.stem(x)))
        return self.fc(x.mean((2, 3)))


# --------------------------------------------------------------------------------------------
# transformers: SwiftFormer (efficient additive attention)
# --------------------------------------------------------------------------------------------
class SwiftFormerConvEncoder(nn.Module):
    def __init__(self, dim: int, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.depth_wise_conv = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.norm = nn.BatchNorm2d(dim)
        self.point_wise_conv1 = nn.Conv2d(dim, mlp_ratio * dim, 1)
        self.act = nn.GELU()
        self.point_wise_conv2 = nn.Conv2d(mlp_ratio * dim, dim, 1)
        self.layer_scale = nn.Parameter(_ls(dim).data.unsqueeze(-1).unsqueeze(-1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inp = x
        x = self.depth_wise_conv(x)
        x = self.norm(x)
        x = self.point_wise_conv1(x)
        x = self.act(x)
        x = self.point_wise_conv2(x)
        return inp + self.layer_scale * x


class SwiftFormerLocalRepresentation(SwiftFormerConvEncoder):
    def __init__(self, dim: int) -> None:
        super().__init__(dim, mlp_ratio=1)


class SwiftFormerEfficientAdditiveAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.to_query = nn.Linear(dim, dim)
        self.to_key = nn.Linear(dim, dim)
        self.w_g = nn.Parameter(torch.randn(dim, 1))
        self.scale_factor = dim**-0.5
        self.proj = nn.Linear(dim, dim)
        self.final = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        query = self.to_query(x)
        key = self.to_key(x)
        query = torch.nn.functional.normalize(query, dim=-1)
        key = torch.nn.functional.normalize(key, dim=-1)
        query_weight = query @ self.w_g
        scaled_query_weight = query_weight * self.scale_factor
        scaled_query_weight = scaled_query_weight.softmax(dim=-1)
        global_queries = torch.sum(scaled_query_weight * query, dim=1)
        global_queries = global_queries.unsqueeze(1).repeat(1, key.shape[1], 1)
        out = self.proj(global_queries * key) + query
        return self.final(out)


class SwiftFormerMlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(dim)
        self.fc1 = nn.Conv2d(dim, hidden, 1)
        self.act = nn.GELU()
        self.fc2 = nn.Conv2d(hidden, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(self.norm1(x))))


class SwiftFormerEncoderBlock(nn.Module):
    def __init__(self, dim: int, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.local_representation = SwiftFormerLocalRepresentation(dim)
        self.attn = SwiftFormerEfficientAdditiveAttention(dim)
        self.linear = SwiftFormerMlp(dim, int(dim * mlp_ratio))
        self.layer_scale_1 = nn.Parameter(_ls(dim).data.unsqueeze(-1).unsqueeze(-1))
        self.layer_scale_2 = nn.Parameter(_ls(dim).data.unsqueeze(-1).unsqueeze(-1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.local_representation(x)
        batch_size, channels, height, width = x.shape
        res = self.attn(x.permute(0, 2, 3, 1).reshape(batch_size, height * width, channels))
        res = res.reshape(batch_size, height, width, channels).permute(0, 3, 1, 2)
        x = x + self.layer_scale_1 * res
        return x + self.layer_scale_2 * self.linear(x)


class SwiftFormer(nn.Module):
    """Shaker et al.'s SwiftFormer: a two-conv stride-4 stem (conv-BN-ReLU ×2), conv encoder
    stages, a 3×3/2 conv-BN embedding, a last stage of a conv encoder and an encoder block
    (local representation, efficient additive attention on ``permute``+``reshape``-d tokens,
    BatchNorm'd conv MLP), BatchNorm, ``flatten(2).mean(-1)``, head and distillation head
    averaged."""

    def __init__(self, dims: tuple[int, int] = (16, 32), num_classes: int = 10) -> None:
        super().__init__()
        self.patch_embed = nn.Sequential(
            nn.Conv2d(3, dims[0] // 2, 3, 2, 1), nn.BatchNorm2d(dims[0] // 2), nn.ReLU(),
            nn.Conv2d(dims[0] // 2, dims[0], 3, 2, 1), nn.BatchNorm2d(dims[0]), nn.ReLU())
        self.network = nn.Sequential(
            SwiftFormerConvEncoder(dims[0]),
            nn.Sequential(nn.Conv2d(dims[0], dims[1], 3, 2, 1), nn.BatchNorm2d(dims[1])),
            SwiftFormerConvEncoder(dims[1]), SwiftFormerEncoderBlock(dims[1]))
        self.norm = nn.BatchNorm2d(dims[-1])
        self.head = nn.Linear(dims[-1], num_classes)
        self.dist_head = nn.Linear(dims[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.network(self.patch_embed(x)))
        x = x.flatten(2).mean(-1)
        return (self.head(x) + self.dist_head(x)) / 2


# --------------------------------------------------------------------------------------------
# timm: PiT (pooling-based ViT)
# --------------------------------------------------------------------------------------------
class Attention(nn.Module):
    """timm's Attention (fused: SDPA)."""

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, dim: int, num_heads: int, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.mlp = Mlp(dim, mlp_ratio * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ConvHeadPooling(nn.Module):
    def __init__(self, in_feature: int, out_feature: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_feature, out_feature, kernel_size=stride + 1,
                              padding=stride // 2, stride=stride, groups=in_feature)
        self.fc = nn.Linear(in_feature, out_feature)

    def forward(self, x: torch.Tensor, cls_token: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.conv(x), self.fc(cls_token)


class PiTTransformer(nn.Module):
    def __init__(self, embed_dim: int, depth: int, heads: int,
                 pool: ConvHeadPooling | None = None) -> None:
        super().__init__()
        self.pool = pool
        self.blocks = nn.Sequential(*[Block(embed_dim, heads) for _ in range(depth)])

    def forward(self, x: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        x, cls_tokens = x
        token_length = cls_tokens.shape[1]
        if self.pool is not None:
            x, cls_tokens = self.pool(x, cls_tokens)
        B, C, H, W = x.shape
        x = x.flatten(2).transpose(1, 2)
        x = torch.cat((cls_tokens, x), dim=1)
        x = self.blocks(x)
        cls_tokens = x[:, :token_length]
        x = x[:, token_length:]
        x = x.transpose(1, 2).reshape(B, C, H, W)
        return x, cls_tokens


class PiT(nn.Module):
    """Heo et al.'s PiT: an 8×8/4 conv patch embedding (15×15 tokens of 64), a learned
    (1, C, H, W) position map, a cls token, three transformer stages between two
    ``ConvHeadPooling`` (3×3/2 depthwise conv doubling the channels; Linear on the cls token),
    LayerNorm on the cls token, head."""

    def __init__(self, base_dims: tuple[int, ...] = (16, 16, 16),
                 heads: tuple[int, ...] = (1, 2, 4), depth: tuple[int, ...] = (1, 1, 1),
                 num_classes: int = 10) -> None:
        super().__init__()
        dims = [b * h for b, h in zip(base_dims, heads, strict=True)]
        self.patch_embed = nn.Conv2d(3, dims[0], 8, 4, 0)
        self.pos_embed = nn.Parameter(torch.randn(1, dims[0], 15, 15) * 0.02)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dims[0]) * 0.02)
        stages = []
        for i in range(len(dims)):
            pool = ConvHeadPooling(dims[i - 1], dims[i], 2) if i > 0 else None
            stages.append(PiTTransformer(dims[i], depth[i], heads[i], pool))
        self.transformers = nn.Sequential(*stages)
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)
        x = x + self.pos_embed
        cls_tokens = self.cls_token.expand(x.shape[0], -1, -1)
        x, cls_tokens = self.transformers((x, cls_tokens))
        cls_tokens = self.norm(cls_tokens)
        return self.head(cls_tokens[:, 0])


# --------------------------------------------------------------------------------------------
# timm (maxxvit.py): CoAtNet (MBConv + NCHW relative attention)
# --------------------------------------------------------------------------------------------
class Downsample2d(nn.Module):
    """timm maxxvit's Downsample2d: a pool, then a 1×1 conv when the width changes."""

    def __init__(self, dim: int, dim_out: int) -> None:
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=3, stride=2, padding=1, count_include_pad=False)
        self.expand = nn.Conv2d(dim, dim_out, 1) if dim != dim_out else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.expand(self.pool(x))


class CoAtMbConvBlock(nn.Module):
    def __init__(self, in_chs: int, out_chs: int, stride: int = 1, expand: int = 4) -> None:
        super().__init__()
        mid = out_chs * expand
        self.shortcut = Downsample2d(in_chs, out_chs) if stride == 2 else nn.Identity()
        self.pre_norm = nn.BatchNorm2d(in_chs)
        self.conv1_1x1 = nn.Conv2d(in_chs, mid, 1, bias=False)
        self.norm1 = nn.Sequential(nn.BatchNorm2d(mid), nn.GELU())
        self.conv2_kxk = nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False)
        self.norm2 = nn.Sequential(nn.BatchNorm2d(mid), nn.GELU())
        self.se = SEModule(mid, in_chs // 4 or 1)
        self.conv3_1x1 = nn.Conv2d(mid, out_chs, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = self.shortcut(x)
        x = self.pre_norm(x)
        x = self.norm1(self.conv1_1x1(x))
        x = self.norm2(self.conv2_kxk(x))
        x = self.se(x)
        x = self.conv3_1x1(x)
        return x + shortcut


class CoAtRelPosBias(nn.Module):
    def __init__(self, window_size: tuple[int, int], num_heads: int) -> None:
        super().__init__()
        self.window_area = window_size[0] * window_size[1]
        self.bias_shape = (self.window_area,) * 2 + (num_heads,)
        num_relative_distance = (2 * window_size[0] - 1) * (2 * window_size[1] - 1)
        self.relative_position_bias_table = nn.Parameter(
            torch.randn(num_relative_distance, num_heads) * 0.5)
        self.register_buffer("relative_position_index",
                             get_relative_position_index(*window_size).view(-1),
                             persistent=False)

    def get_bias(self) -> torch.Tensor:
        relative_position_bias = self.relative_position_bias_table[self.relative_position_index]
        relative_position_bias = relative_position_bias.view(self.bias_shape).permute(2, 0, 1)
        return relative_position_bias.unsqueeze(0).contiguous()

    def forward(self, attn: torch.Tensor) -> torch.Tensor:
        return attn + self.get_bias()


class Attention2d(nn.Module):
    def __init__(self, dim: int, dim_out: int, window: tuple[int, int], dim_head: int = 16) -> None:
        super().__init__()
        self.num_heads = dim_out // dim_head
        self.dim_head = dim_head
        self.scale = dim_head ** -0.5
        self.qkv = nn.Conv2d(dim, dim_out * 3, 1)
        self.rel_pos = CoAtRelPosBias(window, self.num_heads)
        self.proj = nn.Conv2d(dim_out, dim_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, _, H, W = x.shape
        q, k, v = self.qkv(x).view(B, self.num_heads, self.dim_head * 3, -1).chunk(3, dim=2)
        q = q * self.scale
        attn = q.transpose(-2, -1) @ k
        attn = self.rel_pos(attn)
        attn = attn.softmax(dim=-1)
        x = (v @ attn.transpose(-2, -1)).view(B, -1, H, W)
        return self.proj(x)


class TransformerBlock2d(nn.Module):
    def __init__(self, dim: int, dim_out: int, window: tuple[int, int], stride: int = 1) -> None:
        super().__init__()
        if stride == 2:
            self.shortcut: nn.Module = Downsample2d(dim, dim_out)
            self.norm1: nn.Module = nn.Sequential(LayerNorm2d(dim),
                                                  nn.AvgPool2d(3, 2, 1, count_include_pad=False))
        else:
            self.shortcut, self.norm1 = nn.Identity(), LayerNorm2d(dim)
        self.attn = Attention2d(dim, dim_out, window)
        self.norm2 = LayerNorm2d(dim_out)
        self.mlp = nn.Sequential(nn.Conv2d(dim_out, 4 * dim_out, 1), nn.GELU(),
                                 nn.Conv2d(4 * dim_out, dim_out, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.shortcut(x) + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class CoAtNet(nn.Module):
    """Dai et al.'s CoAtNet in timm's code: a two-conv stride-2 stem, two MBConv stages
    (stride 2 each, pooled shortcuts), a transformer stage at stride 2 on a 4×4 map (one
    stride-2 and one stride-1 ``TransformerBlock2d``, relative position bias over the whole
    map), pooled LayerNorm head."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.GELU(),
                                  nn.Conv2d(16, 16, 3, 1, 1))
        self.stages = nn.Sequential(
            CoAtMbConvBlock(16, 24, 2), CoAtMbConvBlock(24, 32, 2),
            TransformerBlock2d(32, 64, (4, 4), 2), TransformerBlock2d(64, 64, (4, 4)))
        self.norm = nn.LayerNorm(64)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(self.norm(x.mean((2, 3))))


# --------------------------------------------------------------------------------------------
# timm: FastViT (MobileOne train-time branches, RepMixer, RepCPE, attention stage)
# --------------------------------------------------------------------------------------------
def _conv_bn(i: int, o: int, k: int, s: int = 1, g: int = 1) -> nn.Sequential:
    """timm's ConvNormAct without the act (``apply_act=False``)."""
    return nn.Sequential(nn.Conv2d(i, o, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(o))


class MobileOneBlock(nn.Module):
    def __init__(self, in_chs: int, out_chs: int, kernel_size: int, stride: int = 1,
                 group_size: int = 0, use_se: bool = False, use_act: bool = True,
                 use_scale_branch: bool = True, num_conv_branches: int = 1) -> None:
        super().__init__()
        self.groups = in_chs // group_size if group_size else 1
        self.identity = (nn.BatchNorm2d(in_chs) if out_chs == in_chs and stride == 1
                         else None)
        self.conv_kxk = nn.ModuleList(_conv_bn(in_chs, out_chs, kernel_size, stride, self.groups)
                                      for _ in range(num_conv_branches))
        self.conv_scale = (_conv_bn(in_chs, out_chs, 1, stride, self.groups)
                           if kernel_size > 1 and use_scale_branch else None)
        self.se = SEModule(out_chs, max(1, out_chs // 16)) if use_se else nn.Identity()
        self.act = nn.GELU() if use_act else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity_out = 0
        if self.identity is not None:
            identity_out = self.identity(x)
        scale_out = 0
        if self.conv_scale is not None:
            scale_out = self.conv_scale(x)
        out = scale_out + identity_out
        for rc in self.conv_kxk:
            out += rc(x)
        return self.act(self.se(out))


class ReparamLargeKernelConv(nn.Module):
    def __init__(self, in_chs: int, out_chs: int, kernel_size: int, stride: int,
                 group_size: int, small_kernel: int) -> None:
        super().__init__()
        groups = in_chs // group_size
        self.large_conv = _conv_bn(in_chs, out_chs, kernel_size, stride, groups)
        self.small_conv = _conv_bn(in_chs, out_chs, small_kernel, stride, groups)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.large_conv(x)
        out = out + self.small_conv(x)
        return self.act(out)


class RepMixer(nn.Module):
    def __init__(self, dim: int, kernel_size: int = 3) -> None:
        super().__init__()
        self.norm = MobileOneBlock(dim, dim, kernel_size, group_size=1, use_act=False,
                                   use_scale_branch=False, num_conv_branches=0)
        self.mixer = MobileOneBlock(dim, dim, kernel_size, group_size=1, use_act=False)
        self.gamma = _ls(dim, 1, 1)  # timm's LayerScale2d: x * gamma, gamma (dim, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.gamma * (self.mixer(x) - self.norm(x))


class FastConvMlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.conv = _conv_bn(dim, dim, 7, g=dim)
        self.fc1 = nn.Conv2d(dim, hidden, 1)
        self.act = nn.GELU()
        self.fc2 = nn.Conv2d(hidden, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(self.conv(x))))


class RepMixerBlock(nn.Module):
    def __init__(self, dim: int, mlp_ratio: int = 3) -> None:
        super().__init__()
        self.token_mixer = RepMixer(dim)
        self.mlp = FastConvMlp(dim, mlp_ratio * dim)
        self.gamma = _ls(dim, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.token_mixer(x)
        return x + self.gamma * self.mlp(x)


class RepConditionalPosEnc(nn.Module):
    def __init__(self, dim: int, spatial_shape: tuple[int, int] = (7, 7)) -> None:
        super().__init__()
        self.pos_enc = nn.Conv2d(dim, dim, spatial_shape, 1, int(spatial_shape[0] // 2),
                                 groups=dim, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pos_enc(x) + x


class FastAttention(nn.Module):
    def __init__(self, dim: int, head_dim: int = 16) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.num_heads = dim // head_dim
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape
        N = H * W
        x = x.flatten(2).transpose(-2, -1)
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        return x.transpose(-2, -1).reshape(B, C, H, W)


class FastAttentionBlock(nn.Module):
    def __init__(self, dim: int, mlp_ratio: int = 3) -> None:
        super().__init__()
        self.norm = nn.BatchNorm2d(dim)
        self.token_mixer = FastAttention(dim)
        self.gamma1 = _ls(dim, 1, 1)
        self.mlp = FastConvMlp(dim, mlp_ratio * dim)
        self.gamma2 = _ls(dim, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.gamma1 * self.token_mixer(self.norm(x))
        return x + self.gamma2 * self.mlp(x)


def _fast_patch_embed(i: int, o: int) -> nn.Sequential:
    """FastViT's PatchEmbed: a 7×7/2 large kernel (``group_size=1``: groups = in) with a
    3×3/2 small one, then a 1×1 MobileOne block."""
    return nn.Sequential(ReparamLargeKernelConv(i, o, 7, 2, group_size=1, small_kernel=3),
                         MobileOneBlock(o, o, 1))


class FastViT(nn.Module):
    """Vasu et al.'s FastViT (SA variant) unreparameterized, as timm runs it before
    ``reparameterize``: a MobileOne stem (3×3/2, depthwise 3×3/2, 1×1; BN identity, 1×1 scale
    and kxk branches summed), a RepMixer block with a 7×7 depthwise conv MLP, patch embeds of
    7×7/2 + 3×3/2 depthwise large/small kernels, a RepCPE 7×7 depthwise conditional position
    encoding and an attention block in the last stage, a MobileOne final conv with SE."""

    def __init__(self, dims: tuple[int, ...] = (16, 32, 32), num_classes: int = 10) -> None:
        super().__init__()
        c = dims[0]
        self.stem = nn.Sequential(MobileOneBlock(3, c, 3, 2), MobileOneBlock(c, c, 3, 2, 1),
                                  MobileOneBlock(c, c, 1))
        self.stages = nn.Sequential(
            _fast_patch_embed(dims[0], dims[1]), RepMixerBlock(dims[1]),
            _fast_patch_embed(dims[1], dims[2]), RepConditionalPosEnc(dims[2]),
            FastAttentionBlock(dims[2]))
        self.final_conv = MobileOneBlock(dims[2], 2 * dims[2], 3, group_size=1, use_se=True)
        self.fc = nn.Linear(2 * dims[2], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.final_conv(self.stages(self.stem(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


# --------------------------------------------------------------------------------------------
# Visual-Attention-Network: VAN (large kernel attention)
# --------------------------------------------------------------------------------------------
class DWConv(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 3, 1, 1, bias=True, groups=dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dwconv(x)


class ConvMlpDW(nn.Module):
    """VAN's / SegNeXt's Mlp: 1×1, depthwise 3×3, GELU, 1×1."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(dim, hidden, 1)
        self.dwconv = DWConv(hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Conv2d(hidden, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.dwconv(self.fc1(x))))


class LKA(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(dim, dim, 5, padding=2, groups=dim)
        self.conv_spatial = nn.Conv2d(dim, dim, 7, stride=1, padding=9, groups=dim, dilation=3)
        self.conv1 = nn.Conv2d(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.clone()
        attn = self.conv0(x)
        attn = self.conv_spatial(attn)
        attn = self.conv1(attn)
        return u * attn


class SpatialGating(nn.Module):
    """VAN's ``Attention`` / SegNeXt's ``SpatialAttention``: 1×1, GELU, gating unit, 1×1,
    residual on ``x.clone()``."""

    def __init__(self, d_model: int, unit: Callable[[int], nn.Module]) -> None:
        super().__init__()
        self.proj_1 = nn.Conv2d(d_model, d_model, 1)
        self.activation = nn.GELU()
        self.spatial_gating_unit = unit(d_model)
        self.proj_2 = nn.Conv2d(d_model, d_model, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shorcut = x.clone()
        x = self.proj_1(x)
        x = self.activation(x)
        x = self.spatial_gating_unit(x)
        x = self.proj_2(x)
        return x + shorcut


class VANBlock(nn.Module):
    def __init__(self, dim: int, unit: Callable[[int], nn.Module], mlp_ratio: int = 4) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(dim)
        self.attn = SpatialGating(dim, unit)
        self.norm2 = nn.BatchNorm2d(dim)
        self.mlp = ConvMlpDW(dim, mlp_ratio * dim)
        self.layer_scale_1 = _ls(dim)
        self.layer_scale_2 = _ls(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.layer_scale_1.unsqueeze(-1).unsqueeze(-1) * self.attn(self.norm1(x))
        return x + self.layer_scale_2.unsqueeze(-1).unsqueeze(-1) * self.mlp(self.norm2(x))


class OverlapPatchEmbed(nn.Module):
    def __init__(self, patch_size: int, stride: int, in_chans: int, embed_dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(in_chans, embed_dim, patch_size, stride, patch_size // 2)
        self.norm = nn.BatchNorm2d(embed_dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        x = self.proj(x)
        _, _, H, W = x.shape
        x = self.norm(x)
        return x, H, W


class VAN(nn.Module):
    """Guo et al.'s VAN: per stage an overlapping patch embed (7×7/4, then 3×3/2) + BatchNorm,
    blocks of BatchNorm → LKA attention (1×1, GELU, depthwise 5×5, depthwise 7×7 dilation 3,
    1×1, times ``u = x.clone()``) and a depthwise-conv MLP with ``unsqueeze``-d layer scales,
    then a LayerNorm on ``flatten(2).transpose(1, 2)`` tokens and back by ``reshape`` +
    ``permute``; a ``mean(dim=1)`` head."""

    def __init__(self, dims: tuple[int, ...] = (16, 32, 48), num_classes: int = 10) -> None:
        super().__init__()
        self.patch_embeds = nn.ModuleList()
        self.blocks = nn.ModuleList()
        self.norms = nn.ModuleList()
        for i, d in enumerate(dims):
            self.patch_embeds.append(OverlapPatchEmbed(7 if i == 0 else 3, 4 if i == 0 else 2,
                                                       3 if i == 0 else dims[i - 1], d))
            self.blocks.append(nn.ModuleList([VANBlock(d, LKA)]))
            self.norms.append(nn.LayerNorm(d))
        self.num_stages = len(dims)
        self.head = nn.Linear(dims[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B = x.shape[0]
        for i in range(self.num_stages):
            x, H, W = self.patch_embeds[i](x)
            for blk in self.blocks[i]:
                x = blk(x)
            x = x.flatten(2).transpose(1, 2)
            x = self.norms[i](x)
            if i != self.num_stages - 1:
                x = x.reshape(B, H, W, -1).permute(0, 3, 1, 2).contiguous()
        return self.head(x.mean(dim=1))


# --------------------------------------------------------------------------------------------
# mmseg: SegNeXt's MSCAN (multi-scale convolutional attention)
# --------------------------------------------------------------------------------------------
class AttentionModule(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(dim, dim, 5, padding=2, groups=dim)
        self.conv0_1 = nn.Conv2d(dim, dim, (1, 7), padding=(0, 3), groups=dim)
        self.conv0_2 = nn.Conv2d(dim, dim, (7, 1), padding=(3, 0), groups=dim)
        self.conv1_1 = nn.Conv2d(dim, dim, (1, 11), padding=(0, 5), groups=dim)
        self.conv1_2 = nn.Conv2d(dim, dim, (11, 1), padding=(5, 0), groups=dim)
        self.conv2_1 = nn.Conv2d(dim, dim, (1, 21), padding=(0, 10), groups=dim)
        self.conv2_2 = nn.Conv2d(dim, dim, (21, 1), padding=(10, 0), groups=dim)
        self.conv3 = nn.Conv2d(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.clone()
        attn = self.conv0(x)
        attn_0 = self.conv0_1(attn)
        attn_0 = self.conv0_2(attn_0)
        attn_1 = self.conv1_1(attn)
        attn_1 = self.conv1_2(attn_1)
        attn_2 = self.conv2_1(attn)
        attn_2 = self.conv2_2(attn_2)
        attn = attn + attn_0 + attn_1 + attn_2
        attn = self.conv3(attn)
        return attn * u


class MSCABlock(VANBlock):
    def __init__(self, dim: int) -> None:
        super().__init__(dim, AttentionModule)

    def forward(self, x: torch.Tensor, H: int, W: int) -> torch.Tensor:  # type: ignore[override]
        B, N, C = x.shape
        x = x.permute(0, 2, 1).view(B, C, H, W)
        x = super().forward(x)
        return x.view(B, C, N).permute(0, 2, 1)


class StemConv(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.proj = nn.Sequential(
            nn.Conv2d(in_channels, out_channels // 2, 3, 2, 1), nn.BatchNorm2d(out_channels // 2),
            nn.GELU(), nn.Conv2d(out_channels // 2, out_channels, 3, 2, 1),
            nn.BatchNorm2d(out_channels))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        x = self.proj(x)
        _, _, H, W = x.size()
        x = x.flatten(2).transpose(1, 2)
        return x, H, W


class MSCAPatchEmbed(OverlapPatchEmbed):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int, int]:  # type: ignore[override]
        x, H, W = super().forward(x)
        return x.flatten(2).transpose(1, 2), H, W


class SegNeXtMSCAN(nn.Module):
    """Guo et al.'s SegNeXt MSCAN encoder as mmseg writes it, two stages (a conv-BN-GELU-conv-BN
    stride-4 stem; a 3×3/2 overlapping embed), blocks of BatchNorm → multi-scale strip
    convolutional attention (depthwise 5×5, then 1×7/7×1, 1×11/11×1, 1×21/21×1 depthwise
    pairs summed, 1×1, times ``x.clone()``) with tokens kept as (B, N, C) between blocks,
    per-stage LayerNorm and ``reshape(B, H, W, -1).permute(0, 3, 1, 2)``; a head that resizes
    the stage maps bilinearly to stride 8, concatenates and classifies with a 1×1 conv (in
    place of the Hamburger's random-initialised NMF)."""

    def __init__(self, dims: tuple[int, int] = (16, 32), num_classes: int = 5) -> None:
        super().__init__()
        self.patch_embeds = nn.ModuleList([StemConv(3, dims[0]),
                                           MSCAPatchEmbed(3, 2, dims[0], dims[1])])
        self.blocks = nn.ModuleList(nn.ModuleList([MSCABlock(d)]) for d in dims)
        self.norms = nn.ModuleList(nn.LayerNorm(d) for d in dims)
        self.squeeze = nn.Sequential(nn.Conv2d(sum(dims), 32, 1, bias=False),
                                     nn.BatchNorm2d(32), nn.ReLU())
        self.cls_seg = nn.Conv2d(32, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B = x.shape[0]
        outs = []
        for embed, blocks, norm in zip(self.patch_embeds, self.blocks, self.norms, strict=True):
            x, H, W = embed(x)
            for blk in blocks:
                x = blk(x, H, W)
            x = norm(x)
            x = x.reshape(B, H, W, -1).permute(0, 3, 1, 2).contiguous()
            outs.append(x)
        size = outs[-1].shape[2:]
        outs = [F.interpolate(o, size=size, mode="bilinear", align_corners=False) for o in outs]
        return self.cls_seg(self.squeeze(torch.cat(outs, dim=1)))


# --------------------------------------------------------------------------------------------
# RepLKNet-pytorch: RepLKNet (31×31 depthwise kernels)
# --------------------------------------------------------------------------------------------
def conv_bn(in_channels: int, out_channels: int, kernel_size: int, stride: int, padding: int,
            groups: int) -> nn.Sequential:
    result = nn.Sequential()
    result.add_module("conv", nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding,
                                        groups=groups, bias=False))
    result.add_module("bn", nn.BatchNorm2d(out_channels))
    return result


def conv_bn_relu(in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 padding: int, groups: int) -> nn.Sequential:
    result = conv_bn(in_channels, out_channels, kernel_size, stride, padding, groups)
    result.add_module("nonlinear", nn.ReLU())
    return result


class RepLKConv(nn.Module):
    """RepLKNet's ReparamLargeKernelConv before merging: large kernel conv-BN ``+=`` small."""

    def __init__(self, channels: int, kernel_size: int, small_kernel: int) -> None:
        super().__init__()
        self.lkb_origin = conv_bn(channels, channels, kernel_size, 1, kernel_size // 2, channels)
        self.small_conv = conv_bn(channels, channels, small_kernel, 1, small_kernel // 2,
                                  channels)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        out = self.lkb_origin(inputs)
        out += self.small_conv(inputs)
        return out


class RepLKBlock(nn.Module):
    def __init__(self, in_channels: int, dw_channels: int, block_lk_size: int,
                 small_kernel: int) -> None:
        super().__init__()
        self.pw1 = conv_bn_relu(in_channels, dw_channels, 1, 1, 0, groups=1)
        self.pw2 = conv_bn(dw_channels, in_channels, 1, 1, 0, groups=1)
        self.large_kernel = RepLKConv(dw_channels, block_lk_size, small_kernel)
        self.lk_nonlinear = nn.ReLU()
        self.prelkb_bn = nn.BatchNorm2d(in_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.prelkb_bn(x)
        out = self.pw1(out)
        out = self.large_kernel(out)
        out = self.lk_nonlinear(out)
        out = self.pw2(out)
        return x + out


class ConvFFN(nn.Module):
    def __init__(self, in_channels: int, internal_channels: int) -> None:
        super().__init__()
        self.preffn_bn = nn.BatchNorm2d(in_channels)
        self.pw1 = conv_bn(in_channels, internal_channels, 1, 1, 0, groups=1)
        self.pw2 = conv_bn(internal_channels, in_channels, 1, 1, 0, groups=1)
        self.nonlinear = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.preffn_bn(x)
        out = self.pw1(out)
        out = self.nonlinear(out)
        out = self.pw2(out)
        return x + out


class RepLKNet(nn.Module):
    """Ding et al.'s RepLKNet (unmerged, as trained): a stem of 3×3/2 conv, depthwise 3×3,
    1×1, depthwise 3×3/2 (conv-BN-ReLU each), two stages of a RepLK block (pre-BN, 1×1,
    depthwise 31×31 (stage 2: 29×29) plus a depthwise 5×5 conv-BN branch, ReLU, 1×1) and a
    ConvFFN, a 1×1 + depthwise 3×3/2 transition, BatchNorm, pooled head."""

    def __init__(self, dims: tuple[int, int] = (16, 32), kernels: tuple[int, int] = (31, 29),
                 num_classes: int = 10) -> None:
        super().__init__()
        c = dims[0]
        self.stem = nn.ModuleList([conv_bn_relu(3, c, 3, 2, 1, groups=1),
                                   conv_bn_relu(c, c, 3, 1, 1, groups=c),
                                   conv_bn_relu(c, c, 1, 1, 0, groups=1),
                                   conv_bn_relu(c, c, 3, 2, 1, groups=c)])
        self.stages = nn.ModuleList(
            nn.Sequential(RepLKBlock(d, d, k, 5), ConvFFN(d, 4 * d))
            for d, k in zip(dims, kernels, strict=True))
        self.transitions = nn.ModuleList([nn.Sequential(
            conv_bn_relu(dims[0], dims[1], 1, 1, 0, groups=1),
            conv_bn_relu(dims[1], dims[1], 3, 2, 1, groups=dims[1]))])
        self.norm = nn.BatchNorm2d(dims[-1])
        self.head = nn.Linear(dims[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for stem_layer in self.stem:
            x = stem_layer(x)
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i < len(self.transitions):
                x = self.transitions[i](x)
        x = F.adaptive_avg_pool2d(self.norm(x), 1)
        return self.head(torch.flatten(x, 1))


# --------------------------------------------------------------------------------------------
# timm: GhostNetV2 (DFC attention)
# --------------------------------------------------------------------------------------------
def hard_sigmoid(x: torch.Tensor) -> torch.Tensor:
    """The GhostNet repositories' gate, written out (timm maps 'hard_sigmoid' to
    ``nn.Hardsigmoid``)."""
    return F.relu6(x + 3.0) / 6.0


class GhostModuleV2(nn.Module):
    def __init__(self, in_chs: int, out_chs: int, kernel_size: int = 1, ratio: int = 2,
                 dw_size: int = 3, stride: int = 1, use_act: bool = True,
                 mode: str = "original") -> None:
        super().__init__()
        self.gate_fn = nn.Sigmoid()
        self.mode = mode
        self.out_chs = out_chs
        init_chs = math.ceil(out_chs / ratio)
        new_chs = init_chs * (ratio - 1)
        self.primary_conv = nn.Sequential(
            nn.Conv2d(in_chs, init_chs, kernel_size, stride, kernel_size // 2, bias=False),
            nn.BatchNorm2d(init_chs), nn.ReLU(inplace=True) if use_act else nn.Identity())
        self.cheap_operation = nn.Sequential(
            nn.Conv2d(init_chs, new_chs, dw_size, 1, dw_size // 2, groups=init_chs, bias=False),
            nn.BatchNorm2d(new_chs), nn.ReLU(inplace=True) if use_act else nn.Identity())
        if mode == "attn":
            self.short_conv = nn.Sequential(
                nn.Conv2d(in_chs, out_chs, kernel_size, stride, kernel_size // 2, bias=False),
                nn.BatchNorm2d(out_chs),
                nn.Conv2d(out_chs, out_chs, kernel_size=(1, 5), stride=1, padding=(0, 2),
                          groups=out_chs, bias=False),
                nn.BatchNorm2d(out_chs),
                nn.Conv2d(out_chs, out_chs, kernel_size=(5, 1), stride=1, padding=(2, 0),
                          groups=out_chs, bias=False),
                nn.BatchNorm2d(out_chs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "original":
            x1 = self.primary_conv(x)
            x2 = self.cheap_operation(x1)
            out = torch.cat([x1, x2], dim=1)
            return out[:, :self.out_chs, :, :]
        res = self.short_conv(F.avg_pool2d(x, kernel_size=2, stride=2))
        x1 = self.primary_conv(x)
        x2 = self.cheap_operation(x1)
        out = torch.cat([x1, x2], dim=1)
        return out[:, :self.out_chs, :, :] * F.interpolate(
            self.gate_fn(res), size=(out.shape[-2], out.shape[-1]), mode="nearest")


class GhostBottleneckV2(nn.Module):
    def __init__(self, in_chs: int, mid_chs: int, out_chs: int, dw_kernel_size: int = 3,
                 stride: int = 1, se_ratio: float = 0.0, layer_id: int = 0) -> None:
        super().__init__()
        self.stride = stride
        self.ghost1 = GhostModuleV2(in_chs, mid_chs, use_act=True,
                                    mode="original" if layer_id <= 1 else "attn")
        if stride > 1:
            self.conv_dw = nn.Conv2d(mid_chs, mid_chs, dw_kernel_size, stride=stride,
                                     padding=(dw_kernel_size - 1) // 2, groups=mid_chs,
                                     bias=False)
            self.bn_dw = nn.BatchNorm2d(mid_chs)
        else:
            self.conv_dw = None
        rd = max(4, int(mid_chs * se_ratio + 2) // 4 * 4)  # make_divisible(·, 4)
        self.se = SEModule(mid_chs, rd, gate=hard_sigmoid) if se_ratio > 0 else None
        self.ghost2 = GhostModuleV2(mid_chs, out_chs, use_act=False, mode="original")
        if in_chs == out_chs and stride == 1:
            self.shortcut = nn.Sequential()
        else:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_chs, in_chs, dw_kernel_size, stride=stride,
                          padding=(dw_kernel_size - 1) // 2, groups=in_chs, bias=False),
                nn.BatchNorm2d(in_chs),
                nn.Conv2d(in_chs, out_chs, 1, stride=1, padding=0, bias=False),
                nn.BatchNorm2d(out_chs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.ghost1(x)
        if self.conv_dw is not None:
            x = self.conv_dw(x)
            x = self.bn_dw(x)
        if self.se is not None:
            x = self.se(x)
        x = self.ghost2(x)
        x += self.shortcut(shortcut)
        return x


class GhostNetV2(nn.Module):
    """Tang et al.'s GhostNetV2: a 3×3/2 conv-BN-ReLU stem, ghost bottlenecks (the first two
    with plain ghost modules, later ones with DFC attention: ``F.avg_pool2d`` by 2, 1×1
    conv-BN, depthwise 1×5 and 5×1 conv-BNs, ``sigmoid``, nearest ``F.interpolate`` to the
    ghost map's size, times ``cat([x1, x2])[:, :out_chs]``; depthwise stride-2 convs,
    hard-sigmoid SE, depthwise + 1×1 shortcuts), a 1×1 conv-BN-ReLU, pool, 1×1 conv head
    with ReLU, ``flatten`` and a Linear."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv_stem = nn.Conv2d(3, 16, 3, 2, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.act1 = nn.ReLU(inplace=True)
        cfgs = [(3, 16, 16, 0.0, 1), (3, 48, 24, 0.0, 2), (5, 72, 40, 0.25, 2),
                (3, 120, 40, 0.25, 1)]
        blocks, c = [], 16
        for layer_id, (k, mid, out, se, s) in enumerate(cfgs):
            blocks.append(GhostBottleneckV2(c, mid, out, k, s, se, layer_id))
            c = out
        self.blocks = nn.Sequential(*blocks, nn.Sequential(
            nn.Conv2d(c, 120, 1, bias=False), nn.BatchNorm2d(120), nn.ReLU(inplace=True)))
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.conv_head = nn.Conv2d(120, 256, 1, 1, 0, bias=True)
        self.act2 = nn.ReLU(inplace=True)
        self.classifier = nn.Linear(256, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.act1(self.bn1(self.conv_stem(x))))
        x = self.act2(self.conv_head(self.global_pool(x)))
        return self.classifier(x.flatten(1))


# --------------------------------------------------------------------------------------------
# timm: NFNet (ScaledStdConv2d, weight standardization in forward)
# --------------------------------------------------------------------------------------------
class ScaledStdConv2d(nn.Conv2d):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 groups: int = 1, bias: bool = True, gamma: float = 1.0, eps: float = 1e-6,
                 gain_init: float = 1.0) -> None:
        padding = ((stride - 1) + (kernel_size - 1)) // 2
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, 1, groups,
                         bias)
        self.gain = nn.Parameter(torch.full((self.out_channels, 1, 1, 1), gain_init))
        self.scale = gamma * self.weight[0].numel() ** -0.5
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = F.batch_norm(
            self.weight.reshape(1, self.out_channels, -1), None, None,
            weight=(self.gain * self.scale).view(-1),
            training=True, momentum=0., eps=self.eps).reshape_as(self.weight)
        return F.conv2d(x, weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


_GELU_GAMMA = 1.7015043497085571


def gelu_gamma(x: torch.Tensor) -> torch.Tensor:
    """timm's ``act_with_gamma('gelu')``: ``F.gelu(x).mul_(gamma)``."""
    return F.gelu(x).mul_(_GELU_GAMMA)


class NormFreeBlock(nn.Module):
    def __init__(self, in_chs: int, out_chs: int, stride: int = 1, alpha: float = 0.2,
                 beta: float = 1.0, group_size: int = 8, attn_gain: float = 2.0) -> None:
        super().__init__()
        mid_chs = out_chs // 2
        groups = mid_chs // group_size
        self.alpha, self.beta, self.attn_gain = alpha, beta, attn_gain
        if in_chs != out_chs or stride != 1:
            self.downsample: nn.Module | None = nn.Sequential(
                nn.AvgPool2d(2, stride, ceil_mode=True, count_include_pad=False)
                if stride > 1 else nn.Identity(), ScaledStdConv2d(in_chs, out_chs, 1))
        else:
            self.downsample = None
        self.conv1 = ScaledStdConv2d(in_chs, mid_chs, 1)
        self.conv2 = ScaledStdConv2d(mid_chs, mid_chs, 3, stride=stride, groups=groups)
        self.conv2b = ScaledStdConv2d(mid_chs, mid_chs, 3, groups=groups)
        self.conv3 = ScaledStdConv2d(mid_chs, out_chs, 1, gain_init=0.0)
        with torch.no_grad():  # gain_init 0 in the reference; random here so the block counts
            self.conv3.gain.uniform_(0.5, 1.5)
        self.attn_last = SEModule(out_chs, out_chs // 2)
        self.skipinit_gain = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = gelu_gamma(x) * self.beta
        shortcut = x
        if self.downsample is not None:
            shortcut = self.downsample(out)
        out = self.conv1(out)
        out = self.conv2(gelu_gamma(out))
        out = self.conv2b(gelu_gamma(out))
        out = self.conv3(gelu_gamma(out))
        out = self.attn_gain * self.attn_last(out)
        return out * self.alpha + shortcut


class NFNet(nn.Module):
    """Brock et al.'s NFNet (timm's NormFreeNet, F-variant blocks): a 'deep_quad' stem of
    ``ScaledStdConv2d`` (weights standardized in forward by ``F.batch_norm(training=True)``
    with ``gain * scale``) and scaled GELU (``F.gelu(x).mul_(gamma)``), normalizer-free
    blocks (β-scaled input, ``DownsampleAvg`` shortcut, grouped 3×3 convs, SE after the last
    conv with gain 2, α-scaled residual), a 1×1 final conv, pooled head."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.ModuleList([ScaledStdConv2d(3, 8, 3, 2), ScaledStdConv2d(8, 16, 3),
                                   ScaledStdConv2d(16, 16, 3), ScaledStdConv2d(16, 32, 3, 2)])
        alpha, expected_var = 0.2, 1.0
        blocks = []
        for c_in, c_out, s in ((32, 64, 1), (64, 96, 2)):
            if s > 1:
                expected_var = 1.0  # reset at a transition, as timm does
            blocks.append(NormFreeBlock(c_in, c_out, s, alpha, beta=1.0 / expected_var ** 0.5))
            expected_var += alpha ** 2
        self.stages = nn.Sequential(*blocks)
        self.final_conv = ScaledStdConv2d(96, 192, 1)
        self.fc = nn.Linear(192, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, conv in enumerate(self.stem):
            x = conv(x if i == 0 else gelu_gamma(x))
        x = gelu_gamma(self.final_conv(self.stages(x)))
        return self.fc(x.mean((2, 3)))


# --------------------------------------------------------------------------------------------
# google-research/big_transfer: BiT ResNetV2 (StdConv2d by var_mean, GroupNorm pre-activation)
# --------------------------------------------------------------------------------------------
class StdConv2d(nn.Conv2d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        v, m = torch.var_mean(w, dim=[1, 2, 3], keepdim=True, unbiased=False)
        w = (w - m) / torch.sqrt(v + 1e-10)
        return F.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


def conv3x3(cin: int, cout: int, stride: int = 1) -> StdConv2d:
    return StdConv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(cin: int, cout: int, stride: int = 1) -> StdConv2d:
    return StdConv2d(cin, cout, kernel_size=1, stride=stride, padding=0, bias=False)


class PreActBottleneck(nn.Module):
    def __init__(self, cin: int, cout: int, cmid: int, stride: int = 1, groups: int = 8) -> None:
        super().__init__()
        self.gn1 = nn.GroupNorm(groups, cin)
        self.conv1 = conv1x1(cin, cmid)
        self.gn2 = nn.GroupNorm(groups, cmid)
        self.conv2 = conv3x3(cmid, cmid, stride)
        self.gn3 = nn.GroupNorm(groups, cmid)
        self.conv3 = conv1x1(cmid, cout)
        self.relu = nn.ReLU(inplace=True)
        if stride != 1 or cin != cout:
            self.downsample = conv1x1(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.gn1(x))
        residual = x
        if hasattr(self, "downsample"):
            residual = self.downsample(out)
        out = self.conv1(out)
        out = self.conv2(self.relu(self.gn2(out)))
        out = self.conv3(self.relu(self.gn3(out)))
        return out + residual


class BiTResNetV2(nn.Module):
    """Kolesnikov et al.'s BiT-ResNetV2 as the big_transfer repository writes it: a root of
    ``StdConv2d`` 7×7/2 (weights standardized in forward by ``torch.var_mean``),
    ``ConstantPad2d(1, 0)`` and an unpadded 3×3/2 max pool, pre-activation GroupNorm
    bottlenecks (8 groups at this width, 32 in the reference), a head of GroupNorm, ReLU,
    ``AdaptiveAvgPool2d(1)``, a 1×1 conv and ``[..., 0, 0]``."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.root = nn.Sequential(StdConv2d(3, 32, kernel_size=7, stride=2, padding=3,
                                            bias=False),
                                  nn.ConstantPad2d(1, 0), nn.MaxPool2d(kernel_size=3, stride=2,
                                                                       padding=0))
        self.body = nn.Sequential(PreActBottleneck(32, 64, 16), PreActBottleneck(64, 64, 16),
                                  PreActBottleneck(64, 128, 32, stride=2))
        self.head = nn.Sequential(nn.GroupNorm(8, 128), nn.ReLU(inplace=True),
                                  nn.AdaptiveAvgPool2d(output_size=1),
                                  nn.Conv2d(128, num_classes, kernel_size=1, bias=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.body(self.root(x)))
        return x[..., 0, 0]


def _built(cls: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    return lambda: finalize(cls(), CALIB)


MODELS: dict[str, Callable[[], nn.Module]] = {
    "edgenext_sdta": _built(EdgeNeXt),
    "davit_block": _built(DaViT),
    "gcvit_global_query": _built(GCViT),
    "swiftformer_additive": _built(SwiftFormer),
    "pit_pooling": _built(PiT),
    "coatnet_relattn": _built(CoAtNet),
    "fastvit_repmixer": _built(FastViT),
    "van_lka": _built(VAN),
    "segnext_msca": _built(SegNeXtMSCAN),
    "replknet_31": _built(RepLKNet),
    "ghostnetv2_dfc": _built(GhostNetV2),
    "nfnet_scaled_std": _built(NFNet),
    "bit_stdconv": _built(BiTResNetV2),
}

#: Input sizes other than quant_zoo's 32×32 (the reference fixes the map size at construction)
SIZES: dict[str, int] = {"gcvit_global_query": 64, "pit_pooling": 64, "coatnet_relattn": 64}
