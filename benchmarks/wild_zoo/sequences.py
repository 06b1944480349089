"""Sequence, audio and video models as deployed code writes them, small, random weights, each
fed the zoo's image: CRNN for text recognition (a conv stack, the height squeezed, a
bidirectional LSTM over the width), a Conformer block (torchaudio: conv subsampling, half-step
FFNs, MHSA, the conv module's pointwise ``Conv1d`` + GLU + depthwise ``Conv1d`` +
``BatchNorm1d`` between two transposes), wav2vec2's feature encoder (``Conv1d`` over raw
samples, GroupNorm, the grouped positional conv), a dilated causal TCN (``F.pad`` on the left),
gMLP's spatial gating (a Linear over tokens on the transposed half), ResMLP (affine norms,
token mixing on the transpose), a Perceiver (learned latents cross-attending to the pixels)
and an X3D-style block (``Conv3d``, depthwise over time, squeeze-excite in 3-D).
Their floors come from the exported graph (`graph_floor`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


class CRNN(nn.Module):
    """Shi et al.: conv-BN-ReLU with (2, 1) pools, ``conv.squeeze(2).permute(2, 0, 1)``, a
    two-layer bidirectional LSTM, a per-step classifier (CTC logits, time first)."""

    def __init__(self, classes: int = 12) -> None:
        super().__init__()

        def block(i: int, o: int, pool: tuple[int, int]) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(i, o, 3, 1, 1), nn.BatchNorm2d(o), nn.ReLU(),
                                 nn.MaxPool2d(pool, pool))

        self.cnn = nn.Sequential(block(3, 16, (2, 2)), block(16, 32, (2, 2)),
                                 block(32, 32, (2, 1)), block(32, 32, (2, 1)),
                                 nn.Conv2d(32, 32, (2, 1)))
        self.rnn = nn.LSTM(32, 24, num_layers=2, bidirectional=True)
        self.fc = nn.Linear(48, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.cnn(x)  # (B, C, 1, W)
        seq = conv.squeeze(2).permute(2, 0, 1)  # (W, B, C)
        out, _ = self.rnn(seq)
        return self.fc(out)


class ConformerBlock(nn.Module):
    """torchaudio's Conformer layer after its conv subsampling: ½ FFN, MHSA, the conv module
    (LayerNorm, ``transpose(1, 2)``, pointwise Conv1d to 2C, GLU over channels, depthwise
    Conv1d, BatchNorm1d, SiLU, pointwise Conv1d, ``transpose(1, 2)``), ½ FFN, LayerNorm."""

    def __init__(self, d: int = 32, heads: int = 4, kernel: int = 7) -> None:
        super().__init__()
        self.sub = nn.Sequential(nn.Conv2d(1, 8, 3, 2), nn.ReLU(), nn.Conv2d(8, 8, 3, 2),
                                 nn.ReLU())
        self.proj = nn.Linear(8 * 7, d)  # 8 channels x 7 frequencies of a 32 x 32 input

        def ffn() -> nn.Sequential:
            return nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.SiLU(),
                                 nn.Linear(2 * d, d))

        self.ffn1, self.ffn2 = ffn(), ffn()
        self.attn_norm = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.conv_norm = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)
        self.out_norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.sub(x.mean(1, keepdim=True))  # a spectrogram (B, 1, T, F) subsampled
        b, c, t, f = s.shape
        h = self.proj(s.permute(0, 2, 1, 3).reshape(b, t, c * f))
        h = h + 0.5 * self.ffn1(h)
        a = self.attn_norm(h)
        h = h + self.attn(a, a, a, need_weights=False)[0]
        y = self.conv_norm(h).transpose(1, 2)
        y = F.glu(self.pw1(y), dim=1)
        y = self.pw2(F.silu(self.bn(self.dw(y))))
        h = h + y.transpose(1, 2)
        h = h + 0.5 * self.ffn2(h)
        return self.out_norm(h)


class Wav2Vec2Features(nn.Module):
    """transformers' wav2vec2 feature encoder: raw samples through strided Conv1d + GELU (the
    first with GroupNorm, one group per channel), ``transpose(1, 2)``, LayerNorm, a feature
    projection, the grouped positional Conv1d (even kernel: its last step dropped), GELU,
    added, LayerNorm."""

    def __init__(self, c: int = 32, d: int = 48) -> None:
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(1, c, 10, 5, bias=False),
                                    nn.Conv1d(c, c, 3, 2, bias=False),
                                    nn.Conv1d(c, c, 2, 2, bias=False)])
        self.gn = nn.GroupNorm(c, c)
        self.norm, self.fp = nn.LayerNorm(c), nn.Linear(c, d)
        self.pos = nn.Conv1d(d, d, 16, padding=8, groups=4)
        self.out_norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.flatten(1)[:, None, :]  # the image's values as one channel of samples
        for i, conv in enumerate(self.convs):
            h = conv(h)
            h = F.gelu(self.gn(h) if i == 0 else h)
        h = self.fp(self.norm(h.transpose(1, 2)))
        p = self.pos(h.transpose(1, 2))[:, :, :-1]
        return self.out_norm(h + F.gelu(p).transpose(1, 2))


class TCN(nn.Module):
    """Bai et al.'s temporal conv net: residual blocks of two dilated causal Conv1d (padded on
    the left with ``F.pad``), ReLU, a 1x1 Conv1d on the skip where channels change."""

    def __init__(self, c: int = 24, levels: int = 3, k: int = 3) -> None:
        super().__init__()
        self.k = k
        chans = [3 * 8, *[c] * levels]
        self.blocks = nn.ModuleList()
        for i in range(levels):
            self.blocks.append(nn.ModuleDict({
                "c1": nn.Conv1d(chans[i], c, k, dilation=2 ** i),
                "c2": nn.Conv1d(c, c, k, dilation=2 ** i),
                "skip": nn.Conv1d(chans[i], c, 1) if chans[i] != c else nn.Identity(),
            }))
        self.head = nn.Linear(c, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, ch, _, w = x.shape
        h = x[:, :, :8].reshape(b, ch * 8, w)  # the first rows as channels
        for i, blk in enumerate(self.blocks):
            pad = (self.k - 1) * 2 ** i
            y = F.relu(blk["c1"](F.pad(h, (pad, 0))))
            y = F.relu(blk["c2"](F.pad(y, (pad, 0))))
            h = F.relu(y + blk["skip"](h))
        return self.head(h[:, :, -1])


class SpatialGating(nn.Module):
    """gMLP's spatial gating unit: ``u, v = x.chunk(2, -1)``, v normalized, a Linear over
    the tokens on ``v.transpose(1, 2)``, transposed back, ``u * v``."""

    def __init__(self, d: int, n: int) -> None:
        super().__init__()
        self.norm, self.spatial = nn.LayerNorm(d // 2), nn.Linear(n, n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u, v = x.chunk(2, dim=-1)
        v = self.spatial(self.norm(v).transpose(1, 2)).transpose(1, 2)
        return u * v


class GMLP(nn.Module):
    def __init__(self, d: int = 32, n: int = 64, depth: int = 2) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, d, 4, 4)
        self.blocks = nn.ModuleList(nn.Sequential(
            nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), SpatialGating(4 * d, n),
            nn.Linear(2 * d, d)) for _ in range(depth))
        self.head = nn.Linear(d, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)
        for blk in self.blocks:
            t = t + blk(t)
        return self.head(t.mean(1))


class Affine(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.alpha, self.beta = nn.Parameter(torch.rand(d) + 0.5), nn.Parameter(torch.randn(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.alpha * x + self.beta


class ResMLP(nn.Module):
    """Touvron et al.: per block ``x + ls1 * linear_tokens(aff1(x).transpose(1, 2))
    .transpose(1, 2)``, then ``x + ls2 * mlp(aff2(x))``; an affine norm before the head."""

    def __init__(self, d: int = 32, n: int = 64, depth: int = 2) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, d, 4, 4)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "aff1": Affine(d), "tokens": nn.Linear(n, n), "aff2": Affine(d),
            "mlp": nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)),
        }) for _ in range(depth))
        self.ls = nn.Parameter(torch.full((depth, 2, d), 0.1))
        self.norm, self.head = Affine(d), nn.Linear(d, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)
        for i, blk in enumerate(self.blocks):
            t = t + self.ls[i, 0] * blk["tokens"](blk["aff1"](t).transpose(1, 2)).transpose(1, 2)
            t = t + self.ls[i, 1] * blk["mlp"](blk["aff2"](t))
        return self.head(self.norm(t).mean(1))


class Perceiver(nn.Module):
    """Jaegle et al.: a learned latent array cross-attends to the pixels (channels last, with
    Fourier-free learned positions), then self-attends; the latents' mean is classified."""

    def __init__(self, latents: int = 16, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.latents = nn.Parameter(torch.randn(latents, d))
        self.inp = nn.Conv2d(3, d, 1)
        self.pos = nn.Parameter(torch.randn(1, d, 32, 32) * 0.1)
        self.cross = nn.MultiheadAttention(d, 1, batch_first=True)
        self.cross_norm, self.kv_norm = nn.LayerNorm(d), nn.LayerNorm(d)
        self.selfs = nn.ModuleList(nn.MultiheadAttention(d, heads, batch_first=True)
                                   for _ in range(2))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(2))
        self.head = nn.Linear(d, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        kv = self.kv_norm((self.inp(x) + self.pos).flatten(2).transpose(1, 2))
        lat = self.latents.expand(b, -1, -1)
        q = self.cross_norm(lat)
        lat = lat + self.cross(q, kv, kv, need_weights=False)[0]
        for attn, norm in zip(self.selfs, self.norms, strict=True):
            a = norm(lat)
            lat = lat + attn(a, a, a, need_weights=False)[0]
        return self.head(lat.mean(1))


class X3DBlock(nn.Module):
    """An X3D-style video block on a two-frame clip (the image and its mirror): a (1, 3, 3)
    Conv3d stem, a bottleneck with a depthwise (3, 3, 3) Conv3d and squeeze-excite over
    (T, H, W), a residual, global 3-D pooling, a classifier."""

    def __init__(self, c: int = 16, mid: int = 32) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(3, c, (1, 3, 3), (1, 2, 2), (0, 1, 1), bias=False),
                                  nn.BatchNorm3d(c), nn.ReLU())
        self.a = nn.Sequential(nn.Conv3d(c, mid, 1, bias=False), nn.BatchNorm3d(mid), nn.ReLU())
        self.b = nn.Sequential(nn.Conv3d(mid, mid, 3, 1, 1, groups=mid, bias=False),
                               nn.BatchNorm3d(mid))
        self.se = nn.Sequential(nn.AdaptiveAvgPool3d(1), nn.Conv3d(mid, 8, 1), nn.ReLU(),
                                nn.Conv3d(8, mid, 1), nn.Sigmoid())
        self.c = nn.Sequential(nn.Conv3d(mid, c, 1, bias=False), nn.BatchNorm3d(c))
        self.head = nn.Linear(c, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.stem(torch.stack([x, x.flip(-1)], dim=2))  # (B, 3, 2, H, W)
        y = self.b(self.a(v))
        y = self.c(F.silu(y * self.se(y)))
        v = F.relu(v + y)
        return self.head(F.adaptive_avg_pool3d(v, 1).flatten(1))


MODELS: dict[str, Callable[[], nn.Module]] = {
    "crnn_bilstm": lambda: CRNN(),
    "conformer_block": lambda: ConformerBlock(),
    "wav2vec2_features": lambda: Wav2Vec2Features(),
    "tcn_causal": lambda: TCN(),
    "gmlp_sgu": lambda: GMLP(),
    "resmlp": lambda: ResMLP(),
    "perceiver_latents": lambda: Perceiver(),
    "x3d_block": lambda: X3DBlock(),
}
