"""Blocks of the models teams deploy vision models from, written after the libraries' public
configs (random weights): diffusers' ResnetBlock2D / self-attention block / Transformer2D
(GroupNorm right after attention; the UNet mid-block on an NCHW input), YOLOv8's C2f / SPPF /
DFL-decoding detect head with its channel-major output, YOLOv10/11's PSA attention (a conv
output ``view``-ed into heads and back) and unfold-style patch extraction by advanced indexing
(``x[:, :, ih, iw]``).

The small factories at the end are the bundled cases, one pattern each (32–64 px, tiny
widths); ``benchmarks/wild_zoo/deploy.py`` builds whole architectures from the same blocks.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from zoo._common import finalize


class ConvSiLU(nn.Sequential):
    """Ultralytics' ``Conv``: conv (no bias) → BatchNorm → SiLU."""

    def __init__(self, c_in: int, c_out: int, k: int = 1, s: int = 1, g: int = 1,
                 act: bool = True) -> None:
        layers: list[nn.Module] = [nn.Conv2d(c_in, c_out, k, s, k // 2, groups=g, bias=False),
                                   nn.BatchNorm2d(c_out)]
        if act:
            layers.append(nn.SiLU())
        super().__init__(*layers)


class C2f(nn.Module):
    """YOLOv8's C2f: a 1×1 conv, chunked in two, bottlenecks chained off the second half,
    everything concatenated and mixed by a 1×1 conv."""

    def __init__(self, c_in: int, c_out: int, n: int = 1, shortcut: bool = True) -> None:
        super().__init__()
        self.c = c_out // 2
        self.cv1 = ConvSiLU(c_in, 2 * self.c)
        self.cv2 = ConvSiLU((2 + n) * self.c, c_out)
        self.m = nn.ModuleList(nn.Sequential(ConvSiLU(self.c, self.c, 3),
                                             ConvSiLU(self.c, self.c, 3)) for _ in range(n))
        self.shortcut = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(y[-1] + m(y[-1]) if self.shortcut else m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: three chained 5×5 max pools concatenated."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.cv1, self.cv2 = ConvSiLU(c_in, c_in // 2), ConvSiLU(c_in * 2, c_out)
        self.pool = nn.MaxPool2d(5, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1(x)]
        y += [self.pool(y[-1]) for _ in range(3)]
        return self.cv2(torch.cat(y, 1))


class DFL(nn.Module):
    """Distribution focal loss decode: per box side a softmax over ``reg_max`` bins, its
    expectation taken by a fixed 1×1 conv with weights 0..reg_max-1 (ultralytics' DFL)."""

    def __init__(self, reg_max: int = 16) -> None:
        super().__init__()
        self.reg_max = reg_max
        self.conv = nn.Conv2d(reg_max, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = torch.arange(reg_max, dtype=torch.float32).view(
            1, reg_max, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, a = x.shape
        y = x.view(b, 4, self.reg_max, a).transpose(2, 1).softmax(1)
        return self.conv(y).view(b, 4, a)


def make_anchors(shapes: list[tuple[int, int]], strides: list[int]
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    points, stride_t = [], []
    for (h, w), s in zip(shapes, strides, strict=True):
        sy, sx = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
        points.append(torch.stack((sx, sy), -1).view(-1, 2))
        stride_t.append(torch.full((h * w, 1), float(s)))
    return torch.cat(points).T, torch.cat(stride_t).T


class Detect(nn.Module):
    """YOLOv8's detect head: per level a box branch (4·reg_max channels) and a class branch,
    concatenated; the levels flattened and concatenated along the anchors (channel-major,
    ``(B, 4 + classes, anchors)``), boxes DFL-decoded against the anchor grid.
    ``transpose_out`` returns anchor-major ``(B, anchors, 4 + classes)`` as export scripts do."""

    def __init__(self, channels: tuple[int, ...], strides: tuple[int, ...], nc: int = 4,
                 reg_max: int = 8, transpose_out: bool = False) -> None:
        super().__init__()
        self.nc, self.reg_max, self.no = nc, reg_max, nc + 4 * reg_max
        self.strides, self.transpose_out = list(strides), transpose_out
        c2, c3 = max(16, channels[0] // 4, 4 * reg_max), max(channels[0], min(nc, 100))
        self.cv2 = nn.ModuleList(nn.Sequential(ConvSiLU(c, c2, 3), ConvSiLU(c2, c2, 3),
                                               nn.Conv2d(c2, 4 * reg_max, 1)) for c in channels)
        self.cv3 = nn.ModuleList(nn.Sequential(ConvSiLU(c, c3, 3), ConvSiLU(c3, c3, 3),
                                               nn.Conv2d(c3, nc, 1)) for c in channels)
        self.dfl = DFL(reg_max)

    def forward(self, feats: list[torch.Tensor]) -> torch.Tensor:
        b = feats[0].shape[0]
        x = [torch.cat((box(f), cls(f)), 1) for f, box, cls in zip(feats, self.cv2, self.cv3,
                                                                    strict=True)]
        anchors, strides = make_anchors([(f.shape[2], f.shape[3]) for f in x], self.strides)
        x_cat = torch.cat([xi.view(b, self.no, -1) for xi in x], 2)
        box, cls = x_cat.split((4 * self.reg_max, self.nc), 1)
        lt, rb = self.dfl(box).chunk(2, 1)
        a = anchors.unsqueeze(0)
        xy, wh = (a - lt + a + rb) / 2, rb + lt  # dist2bbox, xywh
        y = torch.cat((torch.cat((xy, wh), 1) * strides, cls.sigmoid()), 1)
        return y.transpose(1, 2) if self.transpose_out else y


class PSAAttention(nn.Module):
    """YOLOv10/11's attention: a 1×1 conv's output ``view``-ed into heads, split into q, k, v,
    attention over the pixels, ``view``-ed back to a map plus a depthwise positional conv."""

    def __init__(self, dim: int, heads: int = 2, attn_ratio: float = 0.5) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.key_dim = int(self.head_dim * attn_ratio)
        self.scale = self.key_dim ** -0.5
        self.qkv = ConvSiLU(dim, dim + self.key_dim * heads * 2, act=False)
        self.proj = ConvSiLU(dim, dim, act=False)
        self.pe = ConvSiLU(dim, dim, 3, g=dim, act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        n = h * w
        q, k, v = self.qkv(x).view(b, self.heads, self.key_dim * 2 + self.head_dim, n).split(
            [self.key_dim, self.key_dim, self.head_dim], dim=2)
        attn = ((q.transpose(-2, -1) @ k) * self.scale).softmax(dim=-1)
        x = (v @ attn.transpose(-2, -1)).view(b, c, h, w) + self.pe(v.reshape(b, c, h, w))
        return self.proj(x)


class PSABlock(nn.Module):
    """C2PSA's inner block: attention and a conv feed-forward, both residual."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.attn = PSAAttention(dim)
        self.ffn = nn.Sequential(ConvSiLU(dim, dim * 2), ConvSiLU(dim * 2, dim, act=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x)
        return x + self.ffn(x)


class C2PSA(nn.Module):
    def __init__(self, dim: int, n: int = 1) -> None:
        super().__init__()
        self.c = dim // 2
        self.cv1, self.cv2 = ConvSiLU(dim, 2 * self.c), ConvSiLU(2 * self.c, dim)
        self.m = nn.Sequential(*(PSABlock(self.c) for _ in range(n)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.cv1(x).split((self.c, self.c), dim=1)
        return self.cv2(torch.cat((a, self.m(b)), 1))


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """diffusers' sinusoidal ``get_timestep_embedding`` (flip_sin_to_cos, shift 0)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    angle = t[:, None].float() * freqs[None, :]
    return torch.cat([torch.cos(angle), torch.sin(angle)], dim=-1)


class ResnetBlock2D(nn.Module):
    """diffusers' ResnetBlock2D: GroupNorm → SiLU → conv, the time embedding projected and
    added per channel (``[:, :, None, None]``), GroupNorm → SiLU → conv, 1×1 shortcut."""

    def __init__(self, c_in: int, c_out: int, temb: int | None = None, groups: int = 4) -> None:
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(groups, c_in), nn.Conv2d(c_in, c_out, 3, 1, 1)
        self.temb = nn.Linear(temb, c_out) if temb else None
        self.norm2, self.conv2 = nn.GroupNorm(groups, c_out), nn.Conv2d(c_out, c_out, 3, 1, 1)
        self.short = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else None

    def forward(self, x: torch.Tensor, temb: torch.Tensor | None = None) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        if self.temb is not None and temb is not None:
            h = h + self.temb(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return (x if self.short is None else self.short(x)) + h


class AttnBlock(nn.Module):
    """diffusers' ``Attention`` as the UNet mid-block and the VAE use it: GroupNorm, the map
    flattened to tokens (``view(b, c, h·w).transpose(1, 2)``), multi-head attention with
    Linear projections, then ``transpose(-1, -2).reshape(b, c, h, w)`` back, residual."""

    def __init__(self, dim: int, heads: int = 1, groups: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.GroupNorm(groups, dim)
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        t = self.norm(x).view(b, c, h * w).transpose(1, 2)

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, -1, self.heads, c // self.heads).transpose(1, 2)

        o = F.scaled_dot_product_attention(heads(self.q(t)), heads(self.k(t)), heads(self.v(t)))
        o = self.out(o.transpose(1, 2).reshape(b, -1, c))
        return o.transpose(-1, -2).reshape(b, c, h, w) + x


class Transformer2D(nn.Module):
    """diffusers' Transformer2DModel (1×1 conv in/out): GroupNorm, ``permute(0, 2, 3, 1)`` to
    tokens, self-attention + GEGLU feed-forward with LayerNorms, back with
    ``permute(0, 3, 1, 2)``, residual."""

    def __init__(self, dim: int, heads: int = 2, groups: int = 4) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(groups, dim)
        self.proj_in, self.proj_out = nn.Conv2d(dim, dim, 1), nn.Conv2d(dim, dim, 1)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ff_in, self.ff_out = nn.Linear(dim, 4 * dim * 2), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        t = self.proj_in(self.norm(x)).permute(0, 2, 3, 1).reshape(b, h * w, c)
        n = self.ln1(t)
        t = t + self.attn(n, n, n, need_weights=False)[0]
        a, gate = self.ff_in(self.ln2(t)).chunk(2, dim=-1)
        t = t + self.ff_out(a * F.gelu(gate))
        return self.proj_out(t.reshape(b, h, w, c).permute(0, 3, 1, 2)) + x


def unfold_index(x: torch.Tensor, k: int, s: int) -> torch.Tensor:
    """``F.unfold`` written as advanced indexing with broadcasting index tensors:
    ``(B, C, H, W)`` → ``(B, C, nh, nw, k, k)``, the k×k patch at each stride-s position."""
    h, w = x.shape[2], x.shape[3]
    ih = (torch.arange(0, h - k + 1, s)[:, None] + torch.arange(k)[None, :])  # (nh, k)
    iw = (torch.arange(0, w - k + 1, s)[:, None] + torch.arange(k)[None, :])  # (nw, k)
    return x[:, :, ih[:, None, :, None], iw[None, :, None, :]]


class IndexPatchEmbed(nn.Module):
    """Tokens from overlapping k×k patches gathered by indexing (T2T-ViT's soft split),
    then a Linear of the flattened patch."""

    def __init__(self, c_in: int, dim: int, k: int = 3, s: int = 2) -> None:
        super().__init__()
        self.k, self.s = k, s
        self.proj = nn.Linear(c_in * k * k, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = unfold_index(x, self.k, self.s)  # (B, C, nh, nw, k, k)
        b, _, nh, nw = p.shape[:4]
        return self.proj(p.permute(0, 2, 3, 1, 4, 5).reshape(b, nh * nw, -1))


# ---- the bundled cases: one pattern each, tiny --------------------------------------------


class _NormAfterAttention(nn.Module):
    """conv → attention block → ResnetBlock2D (its GroupNorm reads the attention's output)
    → Transformer2D → conv: the residual stream goes through ``transpose.reshape`` twice."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv_in, self.attn = nn.Conv2d(3, dim, 3, 1, 1), AttnBlock(dim)
        self.res, self.tf = ResnetBlock2D(dim, dim), Transformer2D(dim)
        self.norm, self.conv_out = nn.GroupNorm(4, dim), nn.Conv2d(dim, 3, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.tf(self.res(self.attn(self.conv_in(x))))
        return self.conv_out(F.silu(self.norm(x)))


def norm_after_attention(dim: int = 16) -> nn.Module:
    return finalize(_NormAfterAttention(dim))


class _MidBlock(nn.Module):
    """diffusers' UNetMidBlock2D on the NCHW map it is given: ResnetBlock2D → attention
    block → ResnetBlock2D. The input is read by the first GroupNorm and by the residual add."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.res1, self.attn = ResnetBlock2D(dim, dim), AttnBlock(dim, heads=2)
        self.res2 = ResnetBlock2D(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.res2(self.attn(self.res1(x)))


def mid_block(dim: int = 16) -> nn.Module:
    return finalize(_MidBlock(dim))


class _DetectorHead(nn.Module):
    def __init__(self, transpose_out: bool) -> None:
        super().__init__()
        self.p3, self.p4 = ConvSiLU(3, 16, 3, 2), ConvSiLU(16, 16, 3, 2)
        self.head = Detect((16, 16), (2, 4), nc=3, reg_max=4, transpose_out=transpose_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.p3(x)
        return self.head([p3, self.p4(p3)])


def dfl_head(transpose_out: bool = False) -> nn.Module:
    """Two levels into YOLOv8's head: DFL decode and the channel-major output."""
    return finalize(_DetectorHead(transpose_out), (2, 3, 32, 32))


def dfl_head_anchor_major() -> nn.Module:
    """The same head exported anchor-major, ``(B, anchors, 4 + classes)``, as detector export
    scripts transpose it for NMS: the flattened NHWC maps are already in that order."""
    return dfl_head(transpose_out=True)


class _ConvAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.stem, self.psa = ConvSiLU(3, dim, 3, 2), C2PSA(dim)
        self.out = nn.Conv2d(dim, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.psa(self.stem(x)))


def conv_attention(dim: int = 16) -> nn.Module:
    """C2PSA between convs: a conv output ``view``-ed into heads and back."""
    return finalize(_ConvAttention(dim), (2, 3, 32, 32))


class _IndexUnfold(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, 1, 1)
        self.embed, self.norm = IndexPatchEmbed(8, dim), nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.embed(self.conv(x))).mean(1))


def index_unfold(dim: int = 16) -> nn.Module:
    """A conv, then tokens gathered as overlapping patches by advanced indexing."""
    return finalize(_IndexUnfold(dim))
