"""Attention architectures of a ninth held-out set, continued (`attention3` has the first
part), written as the papers' repositories and transformers write them, small, random weights,
each fed the zoo's 32×32 image: CrossFormer (a cross-scale patch embedding, convs of two
kernel sizes ``cat`` on the channels, short- and long-distance group attention by
``reshape(B, H // G, G, W // G, G, C).permute`` and ``reshape(B, G, H // G, G, W // G, C)
.permute``, a dynamic position bias MLP over ``meshgrid`` offsets built in forward and indexed,
a cross-scale patch merging), Shunted Transformer (the heads split in two, each half attending
to keys and values of its own spatial reduction by a strided conv + LayerNorm + GELU,
``q[:, :heads // 2]``, a local depthwise conv on each half's values through
``transpose``/``reshape``/``view``, the halves ``cat`` on the channels), BiFormer (bi-level
routing attention on a channels-last map, regions by ``reshape``/``permute`` (einops written
out), a region router by ``topk``, keys and values of the routed regions by ``torch.gather`` on
an ``expand``-ed tensor, a depthwise conv on the values as local position enhancement) and DPT
(transformers: a ViT whose tokens of two layers are reassembled, the cls token as readout
``cat``-ed and projected, ``permute(0, 2, 1).reshape`` to maps, a ``ConvTranspose2d`` on the
shallower one for a pyramid, fusion blocks of residual conv units and ``interpolate(
align_corners=True)``, a depth head).
Norm affines are randomized and BatchNorm calibrated on one batch (`finalize`); the floors come
from the exported graph (`graph_floor`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from wild_zoo.attention3 import SIZE, Mlp, _built

# CrossFormer -------------------------------------------------------------------------------


class DynamicPosBias(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        pos = dim // 4
        self.pos_proj = nn.Linear(2, pos)
        self.pos1 = nn.Sequential(nn.LayerNorm(pos), nn.ReLU(inplace=True), nn.Linear(pos, pos))
        self.pos2 = nn.Sequential(nn.LayerNorm(pos), nn.ReLU(inplace=True), nn.Linear(pos, pos))
        self.pos3 = nn.Sequential(nn.LayerNorm(pos), nn.ReLU(inplace=True), nn.Linear(pos, heads))

    def forward(self, biases: torch.Tensor) -> torch.Tensor:
        return self.pos3(self.pos2(self.pos1(self.pos_proj(biases))))


class CrossAttention(nn.Module):
    def __init__(self, dim: int, group: int, heads: int) -> None:
        super().__init__()
        self.group, self.heads = group, heads
        self.scale = (dim // heads) ** -0.5
        self.pos = DynamicPosBias(dim, heads)
        self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B_, N, C = x.shape
        G = self.group
        qkv = self.qkv(x).reshape(B_, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias_h = torch.arange(1 - G, G, device=attn.device)
        bias_w = torch.arange(1 - G, G, device=attn.device)
        biases = torch.stack(torch.meshgrid([bias_h, bias_w], indexing="ij"))
        biases = biases.flatten(1).transpose(0, 1).float()
        coords = torch.stack(torch.meshgrid([torch.arange(G), torch.arange(G)], indexing="ij"))
        flat = torch.flatten(coords, 1)
        rel = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += G - 1
        rel[:, :, 1] += G - 1
        rel[:, :, 0] *= 2 * G - 1
        index = rel.sum(-1)
        pos = self.pos(biases)
        bias = pos[index.view(-1)].view(G * G, G * G, -1).permute(2, 0, 1).contiguous()
        attn = (attn + bias.unsqueeze(0)).softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B_, N, C)
        return self.proj(x)


class CrossFormerBlock(nn.Module):
    def __init__(self, dim: int, res: int, heads: int, group: int, long_distance: bool) -> None:
        super().__init__()
        self.res, self.group, self.long = res, group, long_distance
        self.norm1, self.attn = nn.LayerNorm(dim), CrossAttention(dim, group, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim), Mlp(dim, dim * 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        H = W = self.res
        B, _, C = x.shape
        G = self.group
        shortcut = x
        x = self.norm1(x).view(B, H, W, C)
        if self.long:
            x = x.reshape(B, G, H // G, G, W // G, C).permute(0, 2, 4, 1, 3, 5)
        else:
            x = x.reshape(B, H // G, G, W // G, G, C).permute(0, 1, 3, 2, 4, 5)
        x = self.attn(x.reshape(B * H * W // G ** 2, G ** 2, C))
        x = x.reshape(B, H // G, W // G, G, G, C)
        if self.long:
            x = x.permute(0, 3, 1, 4, 2, 5).reshape(B, H, W, C)
        else:
            x = x.permute(0, 1, 3, 2, 4, 5).reshape(B, H, W, C)
        x = shortcut + x.view(B, H * W, C)
        return x + self.mlp(self.norm2(x))


class CrossScaleMerge(nn.Module):
    def __init__(self, dim: int, out: int, res: int) -> None:
        super().__init__()
        self.res = res
        self.norm = nn.LayerNorm(dim)
        self.reductions = nn.ModuleList([nn.Conv2d(dim, out // 2, 2, 2, 0),
                                         nn.Conv2d(dim, out // 2, 4, 2, 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, _, C = x.shape
        x = self.norm(x).view(B, self.res, self.res, C).permute(0, 3, 1, 2)
        return torch.cat([r(x).flatten(2).transpose(1, 2) for r in self.reductions], dim=2)


class CrossFormer(nn.Module):
    def __init__(self, dim: int = 48, num_classes: int = 10) -> None:
        super().__init__()
        self.projs = nn.ModuleList([nn.Conv2d(3, dim // 2, 4, 4, 0),
                                    nn.Conv2d(3, dim // 2, 8, 4, 2)])
        self.embed_norm = nn.LayerNorm(dim)
        res = SIZE // 4
        self.stage1 = nn.Sequential(CrossFormerBlock(dim, res, 3, 4, False),
                                    CrossFormerBlock(dim, res, 3, 4, True))
        self.merge = CrossScaleMerge(dim, dim * 2, res)
        self.stage2 = CrossFormerBlock(dim * 2, res // 2, 6, res // 2, False)
        self.norm, self.head = nn.LayerNorm(dim * 2), nn.Linear(dim * 2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.cat([p(x).flatten(2).transpose(1, 2) for p in self.projs], dim=2)
        x = self.stage2(self.merge(self.stage1(self.embed_norm(x))))
        return self.head(self.norm(x).mean(1))


# Shunted Transformer -----------------------------------------------------------------------

class ShuntedAttention(nn.Module):
    def __init__(self, dim: int, heads: int, sr_ratio: int) -> None:
        super().__init__()
        self.heads, self.sr = heads, sr_ratio
        self.scale = (dim // heads) ** -0.5
        self.q, self.proj = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.act = nn.GELU()
        self.sr1, self.norm1 = nn.Conv2d(dim, dim, sr_ratio, sr_ratio), nn.LayerNorm(dim)
        self.sr2 = nn.Conv2d(dim, dim, sr_ratio // 2, sr_ratio // 2)
        self.norm2 = nn.LayerNorm(dim)
        self.kv1, self.kv2 = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.local_conv1 = nn.Conv2d(dim // 2, dim // 2, 3, 1, 1, groups=dim // 2)
        self.local_conv2 = nn.Conv2d(dim // 2, dim // 2, 3, 1, 1, groups=dim // 2)

    def forward(self, x: torch.Tensor, H: int, W: int) -> torch.Tensor:
        B, N, C = x.shape
        h, hd, sr = self.heads, C // self.heads, self.sr
        q = self.q(x).reshape(B, N, h, hd).permute(0, 2, 1, 3)
        x_ = x.permute(0, 2, 1).reshape(B, C, H, W)
        x_1 = self.act(self.norm1(self.sr1(x_).reshape(B, C, -1).permute(0, 2, 1)))
        x_2 = self.act(self.norm2(self.sr2(x_).reshape(B, C, -1).permute(0, 2, 1)))
        kv1 = self.kv1(x_1).reshape(B, -1, 2, h // 2, hd).permute(2, 0, 3, 1, 4)
        kv2 = self.kv2(x_2).reshape(B, -1, 2, h // 2, hd).permute(2, 0, 3, 1, 4)
        k1, v1 = kv1[0], kv1[1]
        k2, v2 = kv2[0], kv2[1]
        attn1 = ((q[:, :h // 2] @ k1.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        v1 = v1 + self.local_conv1(
            v1.transpose(1, 2).reshape(B, -1, C // 2).transpose(1, 2)
            .view(B, C // 2, H // sr, W // sr)).view(B, C // 2, -1).view(
            B, h // 2, hd, -1).transpose(-1, -2)
        x1 = (attn1 @ v1).transpose(1, 2).reshape(B, N, C // 2)
        attn2 = ((q[:, h // 2:] @ k2.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        v2 = v2 + self.local_conv2(
            v2.transpose(1, 2).reshape(B, -1, C // 2).transpose(1, 2)
            .view(B, C // 2, H * 2 // sr, W * 2 // sr)).view(B, C // 2, -1).view(
            B, h // 2, hd, -1).transpose(-1, -2)
        x2 = (attn2 @ v2).transpose(1, 2).reshape(B, N, C // 2)
        return self.proj(torch.cat([x1, x2], dim=-1))


class ShuntedMlp(nn.Module):
    """PVT's Mlp: a depthwise conv between the Linears, through ``transpose(1, 2).view``."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.dwconv = nn.Conv2d(hidden, hidden, 3, 1, 1, groups=hidden)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor, H: int, W: int) -> torch.Tensor:
        x = self.fc1(x)
        B, _, C = x.shape
        x = x + self.dwconv(x.transpose(1, 2).view(B, C, H, W)).flatten(2).transpose(1, 2)
        return self.fc2(self.act(x))


class Shunted(nn.Module):
    def __init__(self, dim: int = 64, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dim // 2, 7, 2, 3, bias=False),
                                  nn.BatchNorm2d(dim // 2), nn.ReLU(True),
                                  nn.Conv2d(dim // 2, dim, 2, 2))
        self.stem_norm = nn.LayerNorm(dim)
        self.blocks = nn.ModuleList(nn.ModuleDict(dict(
            norm1=nn.LayerNorm(dim), attn=ShuntedAttention(dim, 4, 4), norm2=nn.LayerNorm(dim),
            mlp=ShuntedMlp(dim, dim * 4))) for _ in range(2))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        _, _, H, W = x.shape
        x = self.stem_norm(x.flatten(2).transpose(1, 2))
        for blk in self.blocks:
            x = x + blk["attn"](blk["norm1"](x), H, W)
            x = x + blk["mlp"](blk["norm2"](x), H, W)
        return self.head(self.norm(x).mean(dim=1))


# BiFormer ----------------------------------------------------------------------------------

class BiLevelRoutingAttention(nn.Module):
    def __init__(self, dim: int, heads: int, n_win: int, topk: int) -> None:
        super().__init__()
        self.dim, self.heads, self.n_win, self.topk = dim, heads, n_win, topk
        self.scale = dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.lepe = nn.Conv2d(dim, dim, 5, 1, 2, groups=dim)
        self.wo = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N, H, W, C = x.shape
        j = i = self.n_win
        h, w, m = H // j, W // i, self.heads
        # n (j h) (i w) c -> n (j i) h w c
        x = x.reshape(N, j, h, i, w, C).permute(0, 1, 3, 2, 4, 5).reshape(N, j * i, h, w, C)
        q, kv = self.qkv(x).split([C, 2 * C], dim=-1)
        q_pix = q.reshape(N, j * i, h * w, C)
        kv_pix = kv.reshape(N, j * i, h * w, 2 * C)
        q_win, k_win = q.mean([2, 3]), kv[..., :C].mean([2, 3])
        # n (j i) h w c -> n c (j h) (i w)
        lepe = kv[..., C:].reshape(N, j, i, h, w, C).permute(0, 5, 1, 3, 2, 4).reshape(N, C, H, W)
        lepe = self.lepe(lepe).permute(0, 2, 3, 1)
        logit = (q_win * self.scale) @ k_win.transpose(-2, -1)
        _, r_idx = torch.topk(logit, k=self.topk, dim=-1)
        p2, w2, c_kv = kv_pix.shape[1:]
        topk_kv = torch.gather(kv_pix.view(N, 1, p2, w2, c_kv).expand(-1, p2, -1, -1, -1), dim=2,
                               index=r_idx.view(N, p2, self.topk, 1, 1).expand(-1, -1, -1, w2,
                                                                               c_kv))
        k_sel, v_sel = topk_kv.split([C, C], dim=-1)
        # n p2 k w2 (m c) -> (n p2) m c (k w2)
        k_sel = k_sel.reshape(N, p2, self.topk, w2, m, C // m).permute(0, 1, 4, 5, 2, 3).reshape(
            N * p2, m, C // m, self.topk * w2)
        # n p2 k w2 (m c) -> (n p2) m (k w2) c
        v_sel = v_sel.reshape(N, p2, self.topk, w2, m, C // m).permute(0, 1, 4, 2, 3, 5).reshape(
            N * p2, m, self.topk * w2, C // m)
        # n p2 w2 (m c) -> (n p2) m w2 c
        q_pix = q_pix.reshape(N, p2, w2, m, C // m).permute(0, 1, 3, 2, 4).reshape(
            N * p2, m, w2, C // m)
        attn = ((q_pix * self.scale) @ k_sel).softmax(dim=-1)
        out = attn @ v_sel
        # (n j i) m (h w) c -> n (j h) (i w) (m c)
        out = out.reshape(N, j, i, m, h, w, C // m).permute(0, 1, 4, 2, 5, 3, 6).reshape(
            N, H, W, C)
        return self.wo(out + lepe)


class BiFormer(nn.Module):
    def __init__(self, dim: int = 64, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dim // 2, 3, 2, 1), nn.BatchNorm2d(dim // 2),
                                  nn.GELU(), nn.Conv2d(dim // 2, dim, 3, 2, 1),
                                  nn.BatchNorm2d(dim))
        self.blocks = nn.ModuleList(nn.ModuleDict(dict(
            pos_embed=nn.Conv2d(dim, dim, 3, 1, 1, groups=dim), norm1=nn.LayerNorm(dim),
            attn=BiLevelRoutingAttention(dim, 4, 2, 2), norm2=nn.LayerNorm(dim),
            mlp=Mlp(dim, dim * 3))) for _ in range(2))
        self.norm, self.head = nn.BatchNorm2d(dim), nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for blk in self.blocks:
            x = x + blk["pos_embed"](x)
            x = x.permute(0, 2, 3, 1)
            x = x + blk["attn"](blk["norm1"](x))
            x = x + blk["mlp"](blk["norm2"](x))
            x = x.permute(0, 3, 1, 2)
        return self.head(self.norm(x).flatten(2).mean(-1))


# DPT ---------------------------------------------------------------------------------------

class ViTLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.qkv, self.proj = nn.LayerNorm(dim), nn.Linear(dim, 3 * dim), \
            nn.Linear(dim, dim)
        self.norm2, self.mlp = nn.LayerNorm(dim), Mlp(dim, dim * 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(B, N, 3, self.heads, C // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(B, N, C))
        return x + self.mlp(self.norm2(x))


class ResidualConvUnit(nn.Module):
    def __init__(self, ch: int) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(ch, ch, 3, 1, 1), nn.Conv2d(ch, ch, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.c2(F.relu(self.c1(F.relu(x))))


class FusionLayer(nn.Module):
    def __init__(self, ch: int) -> None:
        super().__init__()
        self.res1, self.res2 = ResidualConvUnit(ch), ResidualConvUnit(ch)
        self.projection = nn.Conv2d(ch, ch, 1)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if residual is not None:
            x = x + self.res1(residual)
        x = self.res2(x)
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
        return self.projection(x)


class DPT(nn.Module):
    def __init__(self, dim: int = 64, feat: int = 32) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (SIZE // 4) ** 2 + 1, dim) * 0.02)
        self.layers = nn.ModuleList(ViTLayer(dim, 4) for _ in range(2))
        self.readout = nn.ModuleList(nn.Sequential(nn.Linear(2 * dim, dim), nn.GELU())
                                     for _ in range(2))
        self.reassemble = nn.ModuleList([
            nn.Sequential(nn.Conv2d(dim, 32, 1), nn.ConvTranspose2d(32, 32, 2, 2)),
            nn.Sequential(nn.Conv2d(dim, 64, 1))])
        self.neck = nn.ModuleList([nn.Conv2d(32, feat, 3, 1, 1, bias=False),
                                   nn.Conv2d(64, feat, 3, 1, 1, bias=False)])
        self.fusion = nn.ModuleList(FusionLayer(feat) for _ in range(2))
        self.head = nn.Sequential(nn.Conv2d(feat, feat // 2, 3, 1, 1),
                                  nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
                                  nn.Conv2d(feat // 2, 16, 3, 1, 1), nn.ReLU(),
                                  nn.Conv2d(16, 1, 1), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B = x.shape[0]
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(B, -1, -1), x), dim=1) + self.pos
        maps = []
        for i, layer in enumerate(self.layers):
            x = layer(x)
            cls, tokens = x[:, 0], x[:, 1:]
            size = int(math.sqrt(tokens.shape[1]))
            state = tokens.reshape(B, size, size, -1).permute(0, 3, 1, 2).contiguous()
            shape = state.shape
            state = state.flatten(2).permute((0, 2, 1))
            readout = cls.unsqueeze(1).expand_as(state)
            state = self.readout[i](torch.cat((state, readout), -1))
            state = state.permute(0, 2, 1).reshape(shape)
            maps.append(self.neck[i](self.reassemble[i](state)))
        fused = self.fusion[1](maps[1])
        fused = self.fusion[0](fused, maps[0])
        return self.head(fused).squeeze(dim=1)



MODELS: dict[str, Callable[[], nn.Module]] = {
    "crossformer_lsda": _built(CrossFormer),
    "shunted_multi_rate": _built(Shunted),
    "biformer_routing": _built(BiFormer),
    "dpt_reassemble": _built(DPT),
}
