"""Attention in convolutional networks, an eleventh held-out set, written as their reference code
writes them (timm's layers, the CCNet and Axial-DeepLab repositories), small, random weights,
each fed the zoo's 32×32 image: BoTNet (timm ``BottleneckAttn``: a 1×1 conv for q, k and v on
the NCHW map, ``torch.split`` of the channels, heads by ``reshape(B * heads, dim, -1)``, ``q @
k`` without a transpose, relative logits by ``rel_logits_1d`` — a matmul with the relative
table, ``F.pad`` by one column, ``flatten``, another ``F.pad``, a reshape and a slice that turn
relative into absolute positions, ``expand`` over the other axis and a 5-d ``permute`` — and
``(attn @ v).transpose(-1, -2).reshape(B, C, H, W)``), HaloNet (timm ``HaloAttn``: q cut into
blocks by a 6-d reshape and ``permute(0, 1, 3, 5, 2, 4)``, k and v as overlapping windows by
``F.pad`` and two ``Tensor.unfold``, the same relative logits per block, the blocks folded back
by a 5-d permute), LambdaNetworks (timm ``LambdaLayer``: content lambdas ``softmax(k) @ v``,
position lambdas once by a ``Conv3d`` over (H, W, value) and once by a relative embedding
gathered with a (2, M, M) index, BatchNorm on q and v), CCNet (``RCCAModule``: criss-cross
attention by ``permute(0, 3, 1, 2).contiguous().view(B * W, -1, H)`` and its row twin,
``bmm``, a ``-inf`` diagonal, one softmax over the concatenated column and row energies, the
recurrence applied twice) and Axial-DeepLab (``AxialBlock``: attention along H then along W,
the map permuted to ``(N * W, C, H)``, a ``Conv1d`` + ``BatchNorm1d`` qkv, relative
embeddings by ``index_select``, ``einsum`` for the similarities, a BatchNorm over the stacked
similarities and one over the stacked outputs, the sums by ``view(..., 3, ...).sum``).
Norm affines are randomized and BatchNorm calibrated on one batch (attention3's `_built`); the
floors come from the exported graph (`graph_floor`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from wild_zoo.attention3 import _built

SIZE = 32


def _conv_bn(cin: int, cout: int, k: int = 1, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU())


# timm layers/bottleneck_attn.py and halo_attn.py ------------------------------------------------

def rel_logits_1d(q: torch.Tensor, rel_k: torch.Tensor, permute_mask: tuple[int, ...]
                  ) -> torch.Tensor:
    """q: (batch, height, width, dim); rel_k: (2 * window - 1, dim)."""
    B, H, W, _ = q.shape
    rel_size = rel_k.shape[0]
    win_size = (rel_size + 1) // 2
    x = q @ rel_k.transpose(-1, -2)
    x = x.reshape(-1, W, rel_size)
    x_pad = F.pad(x, [0, 1]).flatten(1)
    x_pad = F.pad(x_pad, [0, rel_size - W])
    x_pad = x_pad.reshape(-1, W + 1, rel_size)
    x = x_pad[:, :W, win_size - 1:]
    x = x.reshape(B, H, 1, W, win_size).expand(-1, -1, win_size, -1, -1)
    return x.permute(permute_mask)


class PosEmbedRel(nn.Module):
    def __init__(self, block: int, win: int, dim_head: int) -> None:
        super().__init__()
        self.block, self.dim_head = block, dim_head
        self.height_rel = nn.Parameter(dim_head ** -0.5 * torch.randn(win * 2 - 1, dim_head))
        self.width_rel = nn.Parameter(dim_head ** -0.5 * torch.randn(win * 2 - 1, dim_head))

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        lead, hw = q.shape[:-2], q.shape[-2]
        q = q.reshape(-1, self.block, self.block, self.dim_head)
        rel_logits_w = rel_logits_1d(q, self.width_rel, permute_mask=(0, 1, 3, 2, 4))
        q = q.transpose(1, 2)
        rel_logits_h = rel_logits_1d(q, self.height_rel, permute_mask=(0, 3, 1, 4, 2))
        return (rel_logits_h + rel_logits_w).reshape(*lead, hw, -1)


class BottleneckAttn(nn.Module):
    def __init__(self, dim: int, feat: int, num_heads: int = 4) -> None:
        super().__init__()
        self.num_heads, self.dim_head = num_heads, dim // num_heads
        self.scale = self.dim_head ** -0.5
        self.qkv = nn.Conv2d(dim, dim * 3, 1, bias=False)
        self.pos_embed = PosEmbedRel(feat, feat, self.dim_head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape
        q, k, v = torch.split(self.qkv(x), [C, C, C], dim=1)
        q = q.reshape(B * self.num_heads, self.dim_head, -1).transpose(-1, -2)
        k = k.reshape(B * self.num_heads, self.dim_head, -1)
        v = v.reshape(B * self.num_heads, self.dim_head, -1).transpose(-1, -2)
        attn = (q @ k) * self.scale + self.pos_embed(q)
        attn = attn.softmax(dim=-1)
        return (attn @ v).transpose(-1, -2).reshape(B, C, H, W)


class HaloAttn(nn.Module):
    def __init__(self, dim: int, num_heads: int = 4, block_size: int = 4, halo_size: int = 1
                 ) -> None:
        super().__init__()
        self.num_heads, self.dim_head = num_heads, dim // num_heads
        self.scale = self.dim_head ** -0.5
        self.block_size, self.halo_size = block_size, halo_size
        self.win_size = block_size + halo_size * 2
        self.q = nn.Conv2d(dim, dim, 1, bias=False)
        self.kv = nn.Conv2d(dim, dim * 2, 1, bias=False)
        self.pos_embed = PosEmbedRel(block_size, self.win_size, self.dim_head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape
        bs, nh, nw = self.block_size, H // self.block_size, W // self.block_size
        num_blocks = nh * nw
        q = self.q(x).reshape(-1, self.dim_head, nh, bs, nw, bs).permute(0, 1, 3, 5, 2, 4)
        q = q.reshape(B * self.num_heads, self.dim_head, -1, num_blocks).transpose(1, 3)
        kv = F.pad(self.kv(x), [self.halo_size] * 4)
        kv = kv.unfold(2, self.win_size, bs).unfold(3, self.win_size, bs).reshape(
            B * self.num_heads, self.dim_head * 2, num_blocks, -1).permute(0, 2, 3, 1)
        k, v = torch.split(kv, [self.dim_head, self.dim_head], dim=-1)
        attn = (q @ k.transpose(-1, -2)) * self.scale + self.pos_embed(q)
        attn = attn.softmax(dim=-1)
        out = (attn @ v).transpose(1, 3)
        out = out.reshape(-1, bs, bs, nh, nw)
        return out.permute(0, 3, 1, 4, 2).contiguous().view(B, C, H, W)


class AttnBottleneck(nn.Module):
    """timm's ByobNet bottleneck with its 3×3 conv replaced by a self-attention layer:
    1×1 conv-BN-ReLU, the attention, BN-ReLU, 1×1 conv-BN, the shortcut, ReLU."""

    def __init__(self, cin: int, mid: int, attn: nn.Module, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = _conv_bn(cin, mid)
        self.attn = attn
        self.pool = nn.AvgPool2d(2, 2) if stride == 2 else nn.Identity()
        self.post = nn.Sequential(nn.BatchNorm2d(mid), nn.ReLU())
        self.conv3 = nn.Sequential(nn.Conv2d(mid, cin, 1, bias=False), nn.BatchNorm2d(cin))
        self.shortcut = nn.AvgPool2d(2, 2) if stride == 2 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.post(self.pool(self.attn(self.conv1(x))))
        return F.relu(self.conv3(y) + self.shortcut(x))


class BoTNet(nn.Module):
    """A stem to a quarter of the image (8×8 at 32×32), two BoT blocks on every position."""

    def __init__(self, width: int = 32, size: int = SIZE, heads: int = 4) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, 16, 3, 2), _conv_bn(16, width, 3, 2))
        self.blocks = nn.Sequential(*(AttnBottleneck(width, width, BottleneckAttn(
            width, size // 4, heads)) for _ in range(2)))
        self.head = nn.Conv2d(width, 10, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


class HaloNet(nn.Module):
    """A stem to 16×16, two halo blocks (4×4 blocks, halo 1), the second downsampling."""

    def __init__(self, width: int = 32, block: int = 4, halo: int = 1) -> None:
        super().__init__()
        self.stem = _conv_bn(3, width, 3, 2)
        self.blocks = nn.Sequential(
            AttnBottleneck(width, width, HaloAttn(width, 4, block, halo)),
            AttnBottleneck(width, width, HaloAttn(width, 4, block, halo), stride=2))
        self.head = nn.Conv2d(width, 10, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


# timm layers/lambda_layer.py ---------------------------------------------------------------------

def rel_pos_indices(size: int) -> torch.Tensor:
    pos = torch.stack(torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij"))
    pos = pos.flatten(1)
    rel_pos = pos[:, None, :] - pos[:, :, None]
    rel_pos[0] += size - 1
    rel_pos[1] += size - 1
    return rel_pos


class LambdaLayer(nn.Module):
    def __init__(self, dim: int, feat: int | None = None, num_heads: int = 4, dim_head: int = 8,
                 r: int | None = 5) -> None:
        super().__init__()
        self.num_heads, self.dim_qk, self.dim_v = num_heads, dim_head, dim // num_heads
        self.qkv = nn.Conv2d(dim, num_heads * dim_head + dim_head + self.dim_v, 1, bias=False)
        self.norm_q = nn.BatchNorm2d(num_heads * dim_head)
        self.norm_v = nn.BatchNorm2d(self.dim_v)
        self.conv_lambda: nn.Conv3d | None = None
        self.pos_emb: nn.Parameter | None = None
        if r is not None:
            self.conv_lambda = nn.Conv3d(1, dim_head, (r, r, 1), padding=(r // 2, r // 2, 0))
        else:
            assert feat is not None
            self.pos_emb = nn.Parameter(0.02 * torch.randn(2 * feat - 1, 2 * feat - 1, dim_head))
            self.register_buffer("rel_pos_indices", rel_pos_indices(feat), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape
        M = H * W
        q, k, v = torch.split(self.qkv(x), [self.num_heads * self.dim_qk, self.dim_qk,
                                            self.dim_v], dim=1)
        q = self.norm_q(q).reshape(B, self.num_heads, self.dim_qk, M).transpose(-1, -2)
        v = self.norm_v(v).reshape(B, self.dim_v, M).transpose(-1, -2)
        k = F.softmax(k.reshape(B, self.dim_qk, M), dim=-1)
        content_lam = k @ v
        content_out = q @ content_lam.unsqueeze(1)
        if self.conv_lambda is not None:
            position_lam = self.conv_lambda(v.reshape(B, 1, H, W, self.dim_v))
            position_lam = position_lam.reshape(B, 1, self.dim_qk, H * W,
                                                self.dim_v).transpose(2, 3)
        else:
            assert self.pos_emb is not None
            idx = self.rel_pos_indices
            pos_emb = self.pos_emb[idx[0], idx[1]].expand(B, -1, -1, -1)
            position_lam = (pos_emb.transpose(-1, -2) @ v.unsqueeze(1)).unsqueeze(1)
        position_out = (q.unsqueeze(-2) @ position_lam).squeeze(-2)
        return (content_out + position_out).transpose(-1, -2).reshape(B, C, H, W)


class LambdaResNet(nn.Module):
    """A stem to 8×8, a lambda block by convolution (r = 5), one by relative positions."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, 16, 3, 2), _conv_bn(16, width, 3, 2))
        self.blocks = nn.Sequential(AttnBottleneck(width, width, LambdaLayer(width)),
                                    AttnBottleneck(width, width, LambdaLayer(width, 8, r=None)))
        self.head = nn.Conv2d(width, 10, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


# CCNet (speedinghzl/CCNet, cc_attention) ---------------------------------------------------------

def INF(B: int, H: int, W: int) -> torch.Tensor:
    return -torch.diag(torch.tensor(float("inf")).repeat(H), 0).unsqueeze(0).repeat(B * W, 1, 1)


class CrissCrossAttention(nn.Module):
    def __init__(self, in_dim: int) -> None:
        super().__init__()
        self.query_conv = nn.Conv2d(in_dim, in_dim // 8, 1)
        self.key_conv = nn.Conv2d(in_dim, in_dim // 8, 1)
        self.value_conv = nn.Conv2d(in_dim, in_dim, 1)
        self.softmax = nn.Softmax(dim=3)
        self.gamma = nn.Parameter(torch.tensor([0.5]))  # zeros in the reference: trained weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m_batchsize, _, height, width = x.size()
        proj_query = self.query_conv(x)
        proj_query_H = proj_query.permute(0, 3, 1, 2).contiguous().view(
            m_batchsize * width, -1, height).permute(0, 2, 1)
        proj_query_W = proj_query.permute(0, 2, 1, 3).contiguous().view(
            m_batchsize * height, -1, width).permute(0, 2, 1)
        proj_key = self.key_conv(x)
        proj_key_H = proj_key.permute(0, 3, 1, 2).contiguous().view(m_batchsize * width, -1, height)
        proj_key_W = proj_key.permute(0, 2, 1, 3).contiguous().view(m_batchsize * height, -1, width)
        proj_value = self.value_conv(x)
        proj_value_H = proj_value.permute(0, 3, 1, 2).contiguous().view(
            m_batchsize * width, -1, height)
        proj_value_W = proj_value.permute(0, 2, 1, 3).contiguous().view(
            m_batchsize * height, -1, width)
        energy_H = (torch.bmm(proj_query_H, proj_key_H) + INF(m_batchsize, height, width)).view(
            m_batchsize, width, height, height).permute(0, 2, 1, 3)
        energy_W = torch.bmm(proj_query_W, proj_key_W).view(m_batchsize, height, width, width)
        concate = self.softmax(torch.cat([energy_H, energy_W], 3))
        att_H = concate[:, :, :, 0:height].permute(0, 2, 1, 3).contiguous().view(
            m_batchsize * width, height, height)
        att_W = concate[:, :, :, height:height + width].contiguous().view(
            m_batchsize * height, width, width)
        out_H = torch.bmm(proj_value_H, att_H.permute(0, 2, 1)).view(
            m_batchsize, width, -1, height).permute(0, 2, 3, 1)
        out_W = torch.bmm(proj_value_W, att_W.permute(0, 2, 1)).view(
            m_batchsize, height, -1, width).permute(0, 2, 1, 3)
        return self.gamma * (out_H + out_W) + x


class RCCAModule(nn.Module):
    """CCNet's head on a stride-4 backbone: conv-BN, criss-cross attention twice (the
    recurrence), conv-BN, ``cat`` with the input, a 3×3 bottleneck and the classifier."""

    def __init__(self, width: int = 64, inter: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.backbone = nn.Sequential(_conv_bn(3, 32, 3, 2), _conv_bn(32, width, 3, 2))
        self.conva = _conv_bn(width, inter, 3)
        self.cca = CrissCrossAttention(inter)
        self.convb = _conv_bn(inter, inter, 3)
        self.bottleneck = nn.Sequential(_conv_bn(width + inter, inter, 3),
                                        nn.Conv2d(inter, classes, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feat = self.backbone(x)
        output = self.conva(feat)
        for _ in range(2):
            output = self.cca(output)
        output = self.convb(output)
        return self.bottleneck(torch.cat([feat, output], 1))


# Axial-DeepLab (csrhddlam/axial-deeplab lib/models/axialnet.py) ----------------------------------

class qkv_transform(nn.Conv1d):
    """Conv1d"""


class AxialAttention(nn.Module):
    def __init__(self, in_planes: int, out_planes: int, groups: int, kernel_size: int,
                 width: bool = False) -> None:
        super().__init__()
        self.out_planes, self.groups = out_planes, groups
        self.group_planes = out_planes // groups
        self.kernel_size, self.width = kernel_size, width
        self.qkv_transform = qkv_transform(in_planes, out_planes * 2, 1, bias=False)
        self.bn_qkv = nn.BatchNorm1d(out_planes * 2)
        self.bn_similarity = nn.BatchNorm2d(groups * 3)
        self.bn_output = nn.BatchNorm1d(out_planes * 2)
        self.relative = nn.Parameter(torch.randn(self.group_planes * 2, kernel_size * 2 - 1))
        query_index = torch.arange(kernel_size).unsqueeze(0)
        key_index = torch.arange(kernel_size).unsqueeze(1)
        relative_index = key_index - query_index + kernel_size - 1
        self.register_buffer("flatten_index", relative_index.view(-1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 1, 3) if self.width else x.permute(0, 3, 1, 2)
        N, W, C, H = x.shape
        x = x.contiguous().view(N * W, C, H)
        qkv = self.bn_qkv(self.qkv_transform(x))
        gp = self.group_planes
        q, k, v = torch.split(qkv.reshape(N * W, self.groups, gp * 2, H), [gp // 2, gp // 2, gp],
                              dim=2)
        all_embeddings = torch.index_select(self.relative, 1, self.flatten_index).view(
            gp * 2, self.kernel_size, self.kernel_size)
        q_embedding, k_embedding, v_embedding = torch.split(all_embeddings, [gp // 2, gp // 2, gp],
                                                            dim=0)
        qr = torch.einsum("bgci,cij->bgij", q, q_embedding)
        kr = torch.einsum("bgci,cij->bgij", k, k_embedding).transpose(2, 3)
        qk = torch.einsum("bgci, bgcj->bgij", q, k)
        stacked_similarity = torch.cat([qk, qr, kr], dim=1)
        stacked_similarity = self.bn_similarity(stacked_similarity).view(
            N * W, 3, self.groups, H, H).sum(dim=1)
        similarity = F.softmax(stacked_similarity, dim=3)
        sv = torch.einsum("bgij,bgcj->bgci", similarity, v)
        sve = torch.einsum("bgij,cij->bgci", similarity, v_embedding)
        stacked_output = torch.cat([sv, sve], dim=-1).view(N * W, self.out_planes * 2, H)
        output = self.bn_output(stacked_output).view(N, W, self.out_planes, 2, H).sum(dim=-2)
        return output.permute(0, 2, 1, 3) if self.width else output.permute(0, 2, 3, 1)


class AxialBlock(nn.Module):
    def __init__(self, inplanes: int, planes: int, groups: int, kernel_size: int) -> None:
        super().__init__()
        self.conv_down = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.hight_block = AxialAttention(planes, planes, groups, kernel_size)
        self.width_block = AxialAttention(planes, planes, groups, kernel_size, width=True)
        self.conv_up = nn.Conv2d(planes, inplanes, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(inplanes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv_down(x)))
        out = F.relu(self.width_block(self.hight_block(out)))
        out = self.bn2(self.conv_up(out))
        return F.relu(out + x)


class AxialDeepLab(nn.Module):
    """A stem to 16×16 (axial attention spans the whole 16-position row or column), two axial
    blocks, a 1×1 classifier."""

    def __init__(self, width: int = 32, groups: int = 4, size: int = SIZE) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, width, 3, 2))
        self.blocks = nn.Sequential(*(AxialBlock(width, width, groups, size // 2)
                                      for _ in range(2)))
        self.head = nn.Conv2d(width, 10, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


MODELS: dict[str, Callable[[], nn.Module]] = {
    "botnet_rel_logits": _built(BoTNet),
    "halonet_unfold": _built(HaloNet),
    "lambda_resnet": _built(LambdaResNet),
    "ccnet_criss_cross": _built(RCCAModule),
    "axial_deeplab": _built(AxialDeepLab),
}
