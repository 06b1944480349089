"""Attention inside a convolutional network, small: BoTNet's bottleneck attention (timm's
``BottleneckAttn``: a 1×1 conv for q, k and v on the NCHW map, the heads cut from its
channels and folded into the batch by ``reshape(B * heads, dim_head, -1)``, ``q @ k``
without a transpose, ``(attn @ v).transpose(-1, -2).reshape(B, C, H, W)``) and CCNet's
criss-cross attention (each pixel attends to its column and its row: the map permuted to
``(B·W, C, H)`` and ``(B·H, C, W)``, ``bmm``, a ``-inf`` diagonal so a pixel is counted once,
one softmax over the concatenated column and row energies, each branch permuted back to
NCHW its own way, their sum scaled and added to the map; applied twice, as CCNet's
recurrence).

The floor, derived from the model: its NCHW input and output. BoTNet's heads are the conv
output's channels, so with the map NHWC the attention reads q, k and v where the conv wrote
them; CCNet's branches are matmuls whose results can be written in any order, so neither
branch's permute back needs a copy of its own.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo._common import finalize


class BottleneckAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Conv2d(dim, 3 * dim, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        q, k, v = torch.split(self.qkv(x), [c, c, c], dim=1)
        q = q.reshape(b * self.heads, self.head_dim, -1).transpose(-1, -2)
        k = k.reshape(b * self.heads, self.head_dim, -1)
        v = v.reshape(b * self.heads, self.head_dim, -1).transpose(-1, -2)
        attn = ((q @ k) * self.head_dim ** -0.5).softmax(dim=-1)
        return (attn @ v).transpose(-1, -2).reshape(b, c, h, w)


class CrissCrossAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.q, self.k = nn.Conv2d(dim, dim // 4, 1), nn.Conv2d(dim, dim // 4, 1)
        self.v = nn.Conv2d(dim, dim, 1)
        self.gamma = nn.Parameter(torch.tensor([0.5]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        q, k, v = self.q(x), self.k(x), self.v(x)
        q_h = q.permute(0, 3, 1, 2).reshape(b * w, -1, h).permute(0, 2, 1)
        q_w = q.permute(0, 2, 1, 3).reshape(b * h, -1, w).permute(0, 2, 1)
        k_h = k.permute(0, 3, 1, 2).reshape(b * w, -1, h)
        k_w = k.permute(0, 2, 1, 3).reshape(b * h, -1, w)
        v_h = v.permute(0, 3, 1, 2).reshape(b * w, -1, h)
        v_w = v.permute(0, 2, 1, 3).reshape(b * h, -1, w)
        diagonal = torch.diag(torch.full((h,), float("-inf"))).unsqueeze(0)
        e_h = (torch.bmm(q_h, k_h) + diagonal).view(b, w, h, h).permute(0, 2, 1, 3)
        e_w = torch.bmm(q_w, k_w).view(b, h, w, w)
        a = torch.cat([e_h, e_w], 3).softmax(dim=3)
        a_h = a[..., :h].permute(0, 2, 1, 3).reshape(b * w, h, h)
        a_w = a[..., h:].reshape(b * h, w, w)
        out_h = torch.bmm(v_h, a_h.permute(0, 2, 1)).view(b, w, -1, h).permute(0, 2, 3, 1)
        out_w = torch.bmm(v_w, a_w.permute(0, 2, 1)).view(b, h, -1, w).permute(0, 2, 1, 3)
        return self.gamma * (out_h + out_w) + x


class ConvHeads(nn.Module):
    """A stem, a BoT block (residual, BatchNorm after the attention), a conv, the
    criss-cross attention twice, a classifier conv."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dim, 3, 2, 1), nn.BatchNorm2d(dim), nn.ReLU())
        self.bot = BottleneckAttention(dim, heads)
        self.bot_norm = nn.BatchNorm2d(dim)
        self.conv = nn.Sequential(nn.Conv2d(dim, dim, 3, 1, 1), nn.ReLU())
        self.cca = CrissCrossAttention(dim)
        self.out = nn.Conv2d(dim, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        y = self.conv(torch.relu(y + self.bot_norm(self.bot(y))))
        for _ in range(2):
            y = self.cca(y)
        return self.out(y)


def conv_heads(size: int = 32, dim: int = 16, heads: int = 4) -> nn.Module:
    """BoTNet's heads cut from channels and CCNet's criss-cross attention between convs."""
    return finalize(ConvHeads(dim, heads), (2, 3, size, size))
