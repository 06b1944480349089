"""Attention architectures of a sixth held-out set, written as their reference code writes them
(transformers, timm, diffusers, the papers' repositories), small, random weights, each fed the
zoo's image: GPT-2 on patch tokens (HF's ``Conv1D`` as ``addmm`` with an (in, out) weight,
``split`` of the fused qkv, a causal ``bias`` buffer sliced and applied by ``torch.where``
against ``finfo.min``, scores divided by ``torch.full([], sqrt(d))``, gelu_new written out),
T5's encoder (relative position buckets from ``arange`` in forward, log-spaced, an
``nn.Embedding`` lookup permuted to (1, H, q, k), no 1/sqrt(d), the RMS LayerNorm written out),
CvT's convolutional projection (tokens to a map by reshape/permute, depthwise conv + BatchNorm
for q and strided for k/v, a cls token split off and concatenated back, ``einsum`` scores),
PVTv2's linear spatial-reduction attention (K/V from ``AdaptiveAvgPool2d(7)``, a 1×1 conv,
LayerNorm and GELU on the token map; the Mlp's depthwise conv through ``transpose(1, 2).view``),
CrossViT's cross-attention (two patch sizes, one branch bicubically resized, a cls token as the
single query over the other branch), ConViT's gated positional self-attention (relative
indices in a buffer, ``pos_proj`` to heads, two softmaxes mixed by ``sigmoid(gating)`` and
renormalized in place), a Swin V2 stage (window partition/reverse, ``roll`` shifts with a mask
buffer, cosine attention with a clamped ``logit_scale``, the continuous position bias MLP and
``16 * sigmoid``, res-post-norm, V2's patch merging), Whisper's encoder (two ``Conv1d`` + GELU
over a mel-like map, sinusoids in a buffer, q and k both scaled by d**-0.25), Nyströmformer
(segment-mean landmarks, three softmax kernels, the iterative pseudo-inverse with ``torch.eye``,
the ``Conv2d`` over (heads, sequence, head_dim) on V), Linformer (fairseq's: sequence-first, K
and V inputs compressed along the sequence by ``F.linear`` with a sliced (k, n) weight on the
transpose, ``bmm`` over batch × heads), DiT (patchify, a sinusoidal timestep embedding of a
constant timestep made in forward, adaLN-Zero modulation and gates, timm's fused Attention,
unpatchify by ``einsum('nhwpqc->nchpwq')``) and diffusers' Transformer2DModel (GroupNorm, a 1×1
``proj_in``, ``permute``+``reshape`` to tokens, BasicTransformerBlock with self- and
cross-attention over a 77×64 buffer by SDPA, GEGLU, back to the map, ``proj_out``, residual)
and MobileNetV4's mobile multi-query attention on conv maps (timm's ``MultiQueryAttention2d``:
one K/V head broadcast by SDPA, strided K/V and strided queries), and SAM's vision encoder
with decomposed relative positions (transformers' ``SamVisionAttention``: heads folded
into the batch, interpolated tables indexed by ``long()`` coordinates, two einsums; padded
windows).
Norm affines are randomized and BatchNorm calibrated on one batch (`finalize`); the floors come
from the exported graph (`graph_floor`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from zoo._common import finalize

#: The input size the models are built for (token counts, windows and buffers depend on it)
SIZE = 32
CALIB = (2, 3, SIZE, SIZE)


def _patch_tokens(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """timm's PatchEmbed: the conv, then ``flatten(2).transpose(1, 2)``."""
    return conv(x).flatten(2).transpose(1, 2)


# --------------------------------------------------------------------------------------------
# transformers: GPT-2 (eager attention)
# --------------------------------------------------------------------------------------------
class Conv1D(nn.Module):
    """transformers' Conv1D: a Linear with its weight transposed, run as ``addmm``."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size_out = (*x.size()[:-1], self.nf)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class NewGELUActivation(nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return 0.5 * input * (1.0 + torch.tanh(
            math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


class GPT2Attention(nn.Module):
    """GPT2Attention's eager path: ``c_attn(x).split(n_embd, dim=2)``, ``_split_heads`` (view +
    permute), scores ``/ torch.full([], sqrt(d))``, the ``bias`` buffer sliced to the causal
    mask and ``torch.where`` against ``finfo.min``, ``_merge_heads``, ``c_proj``."""

    def __init__(self, embed_dim: int, heads: int, max_positions: int) -> None:
        super().__init__()
        self.register_buffer(
            "bias", torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool))
            .view(1, 1, max_positions, max_positions), persistent=False)
        self.embed_dim, self.num_heads = embed_dim, heads
        self.head_dim = embed_dim // heads
        self.split_size = embed_dim
        self.c_attn = Conv1D(3 * embed_dim, embed_dim)
        self.c_proj = Conv1D(embed_dim, embed_dim)
        self.attn_dropout = nn.Dropout(0.0)
        self.resid_dropout = nn.Dropout(0.0)

    def _attn(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
              ) -> torch.Tensor:
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full(
            [], value.size(-1) ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype,
                                device=attn_weights.device)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = attn_weights.type(value.dtype)
        attn_weights = self.attn_dropout(attn_weights)
        return torch.matmul(attn_weights, value)

    def _split_heads(self, tensor: torch.Tensor) -> torch.Tensor:
        new_shape = (*tensor.size()[:-1], self.num_heads, self.head_dim)
        return tensor.view(new_shape).permute(0, 2, 1, 3)

    def _merge_heads(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = (*tensor.size()[:-2], self.num_heads * self.head_dim)
        return tensor.view(new_shape)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query, key, value = (self._split_heads(t) for t in (query, key, value))
        attn_output = self._merge_heads(self._attn(query, key, value))
        return self.resid_dropout(self.c_proj(attn_output))


class GPT2MLP(nn.Module):
    def __init__(self, intermediate: int, embed_dim: int) -> None:
        super().__init__()
        self.c_fc = Conv1D(intermediate, embed_dim)
        self.c_proj = Conv1D(embed_dim, intermediate)
        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(0.0)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(hidden_states))))


class GPT2Block(nn.Module):
    def __init__(self, dim: int, heads: int, max_positions: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = GPT2Attention(dim, heads, max_positions)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = GPT2MLP(4 * dim, dim)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        residual = hidden_states
        hidden_states = self.attn(self.ln_1(hidden_states))
        hidden_states = hidden_states + residual
        residual = hidden_states
        feed_forward = self.mlp(self.ln_2(hidden_states))
        return residual + feed_forward


class GPT2OnPatches(nn.Module):
    """GPT2Model with ``inputs_embeds`` from a 4×4 patch conv: ``wpe(arange)`` added, two
    blocks, ``ln_f``, an ``lm_head``-like Linear per token."""

    def __init__(self, dim: int = 64, heads: int = 4, depth: int = 2, patch: int = 4,
                 n_positions: int = 96) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.wpe = nn.Embedding(n_positions, dim)
        self.h = nn.ModuleList(GPT2Block(dim, heads, n_positions) for _ in range(depth))
        self.ln_f = nn.LayerNorm(dim, eps=1e-5)
        self.head = nn.Linear(dim, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inputs_embeds = _patch_tokens(self.patch, x)
        input_shape = inputs_embeds.size()[:-1]
        position_ids = torch.arange(0, input_shape[-1], dtype=torch.long,
                                    device=inputs_embeds.device).unsqueeze(0)
        hidden_states = inputs_embeds + self.wpe(position_ids)
        for block in self.h:
            hidden_states = block(hidden_states)
        return self.head(self.ln_f(hidden_states))


# --------------------------------------------------------------------------------------------
# transformers: T5 encoder (relative position buckets)
# --------------------------------------------------------------------------------------------
class T5LayerNorm(nn.Module):
    """T5's RMS norm: no mean subtracted, no bias, the variance in float32."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


class T5Attention(nn.Module):
    """T5Attention (encoder): q/k/v/o without bias, ``shape``/``unshape`` by view + transpose,
    scores unscaled, the position bias computed from ``arange`` in forward on the first layer
    (``has_relative_attention_bias``) and passed on to the others."""

    def __init__(self, d_model: int, heads: int, has_relative_attention_bias: bool,
                 num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__()
        self.has_relative_attention_bias = has_relative_attention_bias
        self.relative_attention_num_buckets = num_buckets
        self.relative_attention_max_distance = max_distance
        self.n_heads, self.key_value_proj_dim = heads, d_model // heads
        self.inner_dim = d_model
        self.q = nn.Linear(d_model, self.inner_dim, bias=False)
        self.k = nn.Linear(d_model, self.inner_dim, bias=False)
        self.v = nn.Linear(d_model, self.inner_dim, bias=False)
        self.o = nn.Linear(self.inner_dim, d_model, bias=False)
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(num_buckets, heads)

    @staticmethod
    def _relative_position_bucket(relative_position: torch.Tensor, bidirectional: bool = True,
                                  num_buckets: int = 32, max_distance: int = 128
                                  ) -> torch.Tensor:
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position,
                                           torch.zeros_like(relative_position))
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large,
            torch.full_like(relative_position_if_large, num_buckets - 1))
        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets

    def compute_bias(self, query_length: int, key_length: int,
                     device: torch.device | None = None) -> torch.Tensor:
        context_position = torch.arange(query_length, dtype=torch.long, device=device)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        relative_position = memory_position - context_position  # (query_length, key_length)
        relative_position_bucket = self._relative_position_bucket(
            relative_position, bidirectional=True,
            num_buckets=self.relative_attention_num_buckets,
            max_distance=self.relative_attention_max_distance)
        values = self.relative_attention_bias(relative_position_bucket)  # (q, k, heads)
        return values.permute([2, 0, 1]).unsqueeze(0)  # (1, heads, q, k)

    def forward(self, hidden_states: torch.Tensor, position_bias: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        batch_size, seq_length = hidden_states.shape[:2]

        def shape(states: torch.Tensor) -> torch.Tensor:
            return states.view(batch_size, -1, self.n_heads,
                               self.key_value_proj_dim).transpose(1, 2)

        def unshape(states: torch.Tensor) -> torch.Tensor:
            return states.transpose(1, 2).contiguous().view(batch_size, -1, self.inner_dim)

        query_states = shape(self.q(hidden_states))
        key_states = shape(self.k(hidden_states))
        value_states = shape(self.v(hidden_states))
        scores = torch.matmul(query_states, key_states.transpose(3, 2))
        if position_bias is None:
            position_bias = self.compute_bias(seq_length, seq_length,
                                              device=scores.device)
        scores += position_bias
        attn_weights = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
        attn_output = unshape(torch.matmul(attn_weights, value_states))
        return self.o(attn_output), position_bias


class T5Layer(nn.Module):
    def __init__(self, d_model: int, heads: int, d_ff: int, first: bool) -> None:
        super().__init__()
        self.attn_norm = T5LayerNorm(d_model)
        self.SelfAttention = T5Attention(d_model, heads, has_relative_attention_bias=first)
        self.ff_norm = T5LayerNorm(d_model)
        self.wi = nn.Linear(d_model, d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, hidden_states: torch.Tensor, position_bias: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        attention_output, position_bias = self.SelfAttention(self.attn_norm(hidden_states),
                                                             position_bias)
        hidden_states = hidden_states + attention_output
        forwarded = self.wo(F.relu(self.wi(self.ff_norm(hidden_states))))
        return hidden_states + forwarded, position_bias


class T5Encoder(nn.Module):
    """T5Stack (encoder) on 4×4 patch tokens: two layers, the position bias of the first
    reused by the second, a final RMS norm."""

    def __init__(self, d_model: int = 64, heads: int = 4, depth: int = 2) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, d_model, 4, 4)
        self.block = nn.ModuleList(T5Layer(d_model, heads, 2 * d_model, i == 0)
                                   for i in range(depth))
        with torch.no_grad():
            for layer in self.block:  # random RMS-norm weights (T5's are ones when built)
                layer.attn_norm.weight.uniform_(0.5, 1.5)
                layer.ff_norm.weight.uniform_(0.5, 1.5)
        self.final_layer_norm = T5LayerNorm(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden_states = _patch_tokens(self.patch, x)
        position_bias = None
        for layer in self.block:
            hidden_states, position_bias = layer(hidden_states, position_bias)
        return self.final_layer_norm(hidden_states)


# --------------------------------------------------------------------------------------------
# CvT (microsoft/CvT): convolutional projection attention
# --------------------------------------------------------------------------------------------
class CvTAttention(nn.Module):
    """CvT's Attention with ``method='dw_bn'``: the cls token ``torch.split`` off, tokens to
    a map (``rearrange('b (h w) c -> b c h w')``), a depthwise conv + BatchNorm per q/k/v
    (k/v strided), back to tokens, cls concatenated to each, per-projection Linears, heads by
    ``rearrange('b t (h d) -> b h t d')``, ``einsum`` scores (scaled by dim_out**-0.5)."""

    def __init__(self, dim: int, heads: int, stride_kv: int = 2, stride_q: int = 1) -> None:
        super().__init__()
        self.num_heads = heads
        self.scale = dim ** -0.5
        self.conv_proj_q = self._build_projection(dim, 3, 1, stride_q)
        self.conv_proj_k = self._build_projection(dim, 3, 1, stride_kv)
        self.conv_proj_v = self._build_projection(dim, 3, 1, stride_kv)
        self.proj_q = nn.Linear(dim, dim, bias=True)
        self.proj_k = nn.Linear(dim, dim, bias=True)
        self.proj_v = nn.Linear(dim, dim, bias=True)
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)

    @staticmethod
    def _build_projection(dim: int, kernel: int, padding: int, stride: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(dim, dim, kernel, padding=padding, stride=stride, bias=False, groups=dim),
            nn.BatchNorm2d(dim))

    @staticmethod
    def _to_tokens(x: torch.Tensor) -> torch.Tensor:  # rearrange 'b c h w -> b (h w) c'
        b, c, h, w = x.shape
        return x.permute(0, 2, 3, 1).reshape(b, h * w, c)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # rearrange 'b t (h d) -> b h t d'
        b, t, _ = x.shape
        return x.reshape(b, t, self.num_heads, -1).permute(0, 2, 1, 3)

    def forward_conv(self, x: torch.Tensor, h: int, w: int
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cls_token, x = torch.split(x, [1, h * w], 1)
        b, _, c = x.shape
        x = x.reshape(b, h, w, c).permute(0, 3, 1, 2)  # rearrange 'b (h w) c -> b c h w'
        q = self._to_tokens(self.conv_proj_q(x))
        k = self._to_tokens(self.conv_proj_k(x))
        v = self._to_tokens(self.conv_proj_v(x))
        q = torch.cat((cls_token, q), dim=1)
        k = torch.cat((cls_token, k), dim=1)
        v = torch.cat((cls_token, v), dim=1)
        return q, k, v

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        q, k, v = self.forward_conv(x, h, w)
        q = self._heads(self.proj_q(q))
        k = self._heads(self.proj_k(k))
        v = self._heads(self.proj_v(v))
        attn_score = torch.einsum("bhlk,bhtk->bhlt", q, k) * self.scale
        attn = self.attn_drop(F.softmax(attn_score, dim=-1))
        x = torch.einsum("bhlt,bhtv->bhlv", attn, v)
        b, _, t, _ = x.shape
        x = x.permute(0, 2, 1, 3).reshape(b, t, -1)  # rearrange 'b h t d -> b t (h d)'
        return self.proj(x)


class CvTBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = CvTAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), h, w)
        return x + self.mlp(self.norm2(x))


class CvTStage(nn.Module):
    """CvT's VisionTransformer stage with a cls token (stage 3): ConvEmbed (a 7×7 stride-4
    conv, tokens, LayerNorm), cls concatenated, two blocks, cls split off, the tokens back
    to a map; a head on the cls token and the map returned both."""

    def __init__(self, dim: int = 64, heads: int = 4, depth: int = 2) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, 7, 4, 2)
        self.embed_norm = nn.LayerNorm(dim)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.blocks = nn.ModuleList(CvTBlock(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.patch_embed(x)
        b, c, h, w = x.shape
        x = self.embed_norm(x.permute(0, 2, 3, 1).reshape(b, h * w, c))
        cls_tokens = self.cls_token.expand(b, -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)
        for blk in self.blocks:
            x = blk(x, h, w)
        cls_tokens, x = torch.split(x, [1, h * w], 1)
        x = x.reshape(b, h, w, c).permute(0, 3, 1, 2)  # rearrange 'b (h w) c -> b c h w'
        return x, self.head(self.norm(cls_tokens).squeeze(1))


# --------------------------------------------------------------------------------------------
# PVTv2 (whai362/PVT): linear spatial-reduction attention (pvt_v2_b*_li)
# --------------------------------------------------------------------------------------------
class DWConv(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 3, 1, 1, bias=True, groups=dim)

    def forward(self, x: torch.Tensor, H: int, W: int) -> torch.Tensor:
        B, _N, C = x.shape
        x = x.transpose(1, 2).view(B, C, H, W)
        x = self.dwconv(x)
        return x.flatten(2).transpose(1, 2)


class PVTMlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.dwconv = DWConv(hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.relu = nn.ReLU(inplace=True)  # linear=True

    def forward(self, x: torch.Tensor, H: int, W: int) -> torch.Tensor:
        x = self.relu(self.fc1(x))
        x = self.act(self.dwconv(x, H, W))
        return self.fc2(x)


class PVTLinearAttention(nn.Module):
    """PVTv2's Attention with ``linear=True``: q from every token; K/V from the token map
    ``permute(0, 2, 1).reshape(B, C, H, W)`` pooled to 7×7, a 1×1 conv, LayerNorm, GELU."""

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.q = nn.Linear(dim, dim, bias=True)
        self.kv = nn.Linear(dim, dim * 2, bias=True)
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)
        self.pool = nn.AdaptiveAvgPool2d(7)
        self.sr = nn.Conv2d(dim, dim, kernel_size=1, stride=1)
        self.norm = nn.LayerNorm(dim)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor, H: int, W: int) -> torch.Tensor:
        B, N, C = x.shape
        q = self.q(x).reshape(B, N, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        x_ = x.permute(0, 2, 1).reshape(B, C, H, W)
        x_ = self.sr(self.pool(x_)).reshape(B, C, -1).permute(0, 2, 1)
        x_ = self.act(self.norm(x_))
        kv = self.kv(x_).reshape(B, -1, 2, self.num_heads, C // self.num_heads
                                 ).permute(2, 0, 3, 1, 4)
        k, v = kv[0], kv[1]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = self.attn_drop(attn.softmax(dim=-1))
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class PVTBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = PVTLinearAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = PVTMlp(dim, 4 * dim)

    def forward(self, x: torch.Tensor, H: int, W: int) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), H, W)
        return x + self.mlp(self.norm2(x), H, W)


class OverlapPatchEmbed(nn.Module):
    def __init__(self, patch_size: int, stride: int, in_chans: int, embed_dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=stride,
                              padding=(patch_size // 2, patch_size // 2))
        self.norm = nn.LayerNorm(embed_dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        x = self.proj(x)
        _, _, H, W = x.shape
        x = x.flatten(2).transpose(1, 2)
        return self.norm(x), H, W


class PVTv2Li(nn.Module):
    """PyramidVisionTransformerV2 (``linear=True``), two stages: overlapping patch embeds
    (7×7/4, then 3×3/2), a block each, each stage's ``reshape(B, H, W, -1).permute(0, 3, 1,
    2)`` back to a map (8×8 then 4×4, both pooled to 7×7 for K/V)."""

    def __init__(self, dims: tuple[int, int] = (32, 64), heads: tuple[int, int] = (1, 2)
                 ) -> None:
        super().__init__()
        self.patch_embed1 = OverlapPatchEmbed(7, 4, 3, dims[0])
        self.block1 = nn.ModuleList([PVTBlock(dims[0], heads[0])])
        self.norm1 = nn.LayerNorm(dims[0])
        self.patch_embed2 = OverlapPatchEmbed(3, 2, dims[0], dims[1])
        self.block2 = nn.ModuleList([PVTBlock(dims[1], heads[1])])
        self.norm2 = nn.LayerNorm(dims[1])

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        B = x.shape[0]
        outs = []
        for i in (1, 2):
            x, H, W = getattr(self, f"patch_embed{i}")(x)
            for blk in getattr(self, f"block{i}"):
                x = blk(x, H, W)
            x = getattr(self, f"norm{i}")(x)
            x = x.reshape(B, H, W, -1).permute(0, 3, 1, 2).contiguous()
            outs.append(x)
        return outs


# --------------------------------------------------------------------------------------------
# CrossViT (IBM/CrossViT): cross-attention between two patch-size branches
# --------------------------------------------------------------------------------------------
class CrossViTAttention(nn.Module):
    """timm-style self-attention of the branches' blocks (qkv, reshape, permute, matmuls)."""

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads
                                  ).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class CrossViTBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = CrossViTAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 3 * dim), nn.GELU(), nn.Linear(3 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class CrossAttention(nn.Module):
    """CrossViT's CrossAttention: q from ``x[:, 0:1, ...]`` only (B, H, 1, C/H), k and v from
    every token; the (B, H, 1, N) scores, ``transpose(1, 2).reshape(B, 1, C)``."""

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        q = self.wq(x[:, 0:1, ...]).reshape(B, 1, self.num_heads, C // self.num_heads
                                            ).permute(0, 2, 1, 3)
        k = self.wk(x).reshape(B, N, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        v = self.wv(x).reshape(B, N, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, 1, C)
        return self.proj(x)


class CrossAttentionBlock(nn.Module):
    """``has_mlp=False``: ``x[:, 0:1, ...] + attn(norm1(x))``."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = CrossAttention(dim, heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 0:1, ...] + self.attn(self.norm1(x))


class MultiScaleBlock(nn.Module):
    """A block per branch, each branch's cls projected to the other's width, concatenated with
    the other's patch tokens, cross-attended, projected back and concatenated again."""

    def __init__(self, dim: tuple[int, int], heads: tuple[int, int]) -> None:
        super().__init__()
        self.num_branches = nb = len(dim)
        self.blocks = nn.ModuleList(nn.Sequential(CrossViTBlock(dim[d], heads[d]))
                                    for d in range(nb))
        self.projs = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(dim[d]), nn.GELU(), nn.Linear(dim[d], dim[(d + 1) % nb]))
            for d in range(nb))
        self.fusion = nn.ModuleList(CrossAttentionBlock(dim[(d + 1) % nb], heads[(d + 1) % nb])
                                    for d in range(nb))
        self.revert_projs = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(dim[(d + 1) % nb]), nn.GELU(),
                          nn.Linear(dim[(d + 1) % nb], dim[d]))
            for d in range(nb))

    def forward(self, x: list[torch.Tensor]) -> list[torch.Tensor]:
        outs_b = [block(x_) for x_, block in zip(x, self.blocks, strict=True)]
        proj_cls_token = [proj(x[:, 0:1]) for x, proj in zip(outs_b, self.projs, strict=True)]
        outs = []
        for i in range(self.num_branches):
            tmp = torch.cat((proj_cls_token[i],
                             outs_b[(i + 1) % self.num_branches][:, 1:, ...]), dim=1)
            tmp = self.fusion[i](tmp)
            reverted_proj_cls_token = self.revert_projs[i](tmp[:, 0:1, ...])
            tmp = torch.cat((reverted_proj_cls_token, outs_b[i][:, 1:, ...]), dim=1)
            outs.append(tmp)
        return outs


class CrossViT(nn.Module):
    """CrossViT with img_size (32, 24), patches (4, 8): the second branch's image resized by
    ``F.interpolate(..., mode='bicubic')``, cls + pos per branch, one multi-scale block, the
    two heads' logits averaged (``mean(stack)``)."""

    def __init__(self, img_size: tuple[int, int] = (32, 24), patch: tuple[int, int] = (4, 8),
                 dim: tuple[int, int] = (32, 64), heads: tuple[int, int] = (4, 4),
                 num_classes: int = 10) -> None:
        super().__init__()
        self.img_size = img_size
        self.num_branches = len(dim)
        self.patch_embed = nn.ModuleList(nn.Conv2d(3, d, p, p)
                                         for d, p in zip(dim, patch, strict=True))
        self.cls_token = nn.ParameterList(nn.Parameter(torch.randn(1, 1, d) * 0.02)
                                          for d in dim)
        self.pos_embed = nn.ParameterList(
            nn.Parameter(torch.randn(1, 1 + (s // p) ** 2, d) * 0.02)
            for s, p, d in zip(img_size, patch, dim, strict=True))
        self.blocks = nn.ModuleList([MultiScaleBlock(dim, heads)])
        self.norm = nn.ModuleList(nn.LayerNorm(d) for d in dim)
        self.head = nn.ModuleList(nn.Linear(d, num_classes) for d in dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, _C, H, _W = x.shape
        xs = []
        for i in range(self.num_branches):
            x_ = F.interpolate(x, size=(self.img_size[i], self.img_size[i]), mode="bicubic") \
                if H != self.img_size[i] else x
            tmp = _patch_tokens(self.patch_embed[i], x_)
            cls_tokens = self.cls_token[i].expand(B, -1, -1)
            tmp = torch.cat((cls_tokens, tmp), dim=1)
            tmp = tmp + self.pos_embed[i]
            xs.append(tmp)
        for blk in self.blocks:
            xs = blk(xs)
        xs = [self.norm[i](x) for i, x in enumerate(xs)]
        out = [x[:, 0] for x in xs]
        ce_logits = [self.head[i](x) for i, x in enumerate(out)]
        return torch.mean(torch.stack(ce_logits, dim=0), dim=0)


# --------------------------------------------------------------------------------------------
# ConViT (timm convit.py): gated positional self-attention
# --------------------------------------------------------------------------------------------
class GPSA(nn.Module):
    """timm's GPSA: ``qk`` Linear, heads by reshape + ``permute(2, 0, 3, 1, 4)``; positional
    scores ``pos_proj(rel_indices.expand(B, ...)).permute(0, 3, 1, 2)``; both softmaxed, mixed
    by ``sigmoid(gating_param.view(1, -1, 1, 1))``, ``attn /= attn.sum(-1).unsqueeze(-1)``.
    The relative indices (dx, dy, dx² + dy²) are a buffer (timm fills them lazily)."""

    def __init__(self, dim: int, num_heads: int, num_patches: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qk = nn.Linear(dim, dim * 2, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)
        self.pos_proj = nn.Linear(3, num_heads)
        self.gating_param = nn.Parameter(torch.ones(num_heads) + torch.randn(num_heads))
        self.register_buffer("rel_indices", self.get_rel_indices(num_patches), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        attn = self.get_attention(x)
        v = self.v(x).reshape(B, N, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)

    def get_attention(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qk = self.qk(x).reshape(B, N, 2, self.num_heads, C // self.num_heads
                                ).permute(2, 0, 3, 1, 4)
        q, k = qk[0], qk[1]
        pos_score = self.rel_indices.expand(B, -1, -1, -1)
        pos_score = self.pos_proj(pos_score).permute(0, 3, 1, 2)
        patch_score = (q @ k.transpose(-2, -1)) * self.scale
        patch_score = patch_score.softmax(dim=-1)
        pos_score = pos_score.softmax(dim=-1)
        gating = self.gating_param.view(1, -1, 1, 1)
        attn = (1.0 - torch.sigmoid(gating)) * patch_score + torch.sigmoid(gating) * pos_score
        attn /= attn.sum(dim=-1).unsqueeze(-1)
        return self.attn_drop(attn)

    @staticmethod
    def get_rel_indices(num_patches: int) -> torch.Tensor:
        img_size = int(num_patches ** 0.5)
        rel_indices = torch.zeros(1, num_patches, num_patches, 3)
        ind = torch.arange(img_size).view(1, -1) - torch.arange(img_size).view(-1, 1)
        indx = ind.repeat(img_size, img_size)
        indy = ind.repeat_interleave(img_size, dim=0).repeat_interleave(img_size, dim=1)
        indd = indx ** 2 + indy ** 2
        rel_indices[:, :, :, 2] = indd.unsqueeze(0)
        rel_indices[:, :, :, 1] = indy.unsqueeze(0)
        rel_indices[:, :, :, 0] = indx.unsqueeze(0)
        return rel_indices


class ConViTMHSA(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads
                                  ).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class ConViTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, attn: nn.Module) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = attn
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ConViT(nn.Module):
    """timm's ConVit: patch embed + pos embed, two GPSA blocks on the patches
    (``local_up_to_layer=2``), the cls token concatenated, one MHSA block, norm, head."""

    def __init__(self, dim: int = 48, heads: int = 4, patch: int = 4, local: int = 2,
                 depth: int = 3) -> None:
        super().__init__()
        n = (SIZE // patch) ** 2
        self.local_up_to_layer = local
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.pos_embed = nn.Parameter(torch.randn(1, n, dim) * 0.02)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.blocks = nn.ModuleList(
            ConViTBlock(dim, heads, GPSA(dim, heads, n) if i < local else ConViTMHSA(dim, heads))
            for i in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _patch_tokens(self.patch_embed, x)
        x = x + self.pos_embed
        cls_tokens = self.cls_token.expand(x.shape[0], -1, -1)
        for u, blk in enumerate(self.blocks):
            if u == self.local_up_to_layer:
                x = torch.cat((cls_tokens, x), dim=1)
            x = blk(x)
        x = self.norm(x)
        return self.head(x[:, 0])


# --------------------------------------------------------------------------------------------
# Swin Transformer V2 (microsoft/Swin-Transformer swin_transformer_v2.py)
# --------------------------------------------------------------------------------------------
def window_partition(x: torch.Tensor, window_size: int) -> torch.Tensor:
    B, H, W, C = x.shape
    x = x.view(B, H // window_size, window_size, W // window_size, window_size, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window_size, window_size, C)


def window_reverse(windows: torch.Tensor, window_size: int, H: int, W: int) -> torch.Tensor:
    B = int(windows.shape[0] / (H * W / window_size / window_size))
    x = windows.view(B, H // window_size, W // window_size, window_size, window_size, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(B, H, W, -1)


class SwinV2WindowAttention(nn.Module):
    """Cosine attention (``F.normalize(q) @ F.normalize(k).transpose``) times
    ``torch.clamp(logit_scale, max=log(100)).exp()``; the continuous position bias: ``cpb_mlp``
    over the log-spaced ``relative_coords_table`` buffer, gathered by
    ``relative_position_index``, ``16 * sigmoid``; q and v biases by ``F.linear`` with
    ``cat((q_bias, zeros_like(v_bias), v_bias))``; the shift mask added per window."""

    def __init__(self, dim: int, window_size: int, num_heads: int) -> None:
        super().__init__()
        self.dim = dim
        self.window_size = (window_size, window_size)
        self.num_heads = num_heads
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones((num_heads, 1, 1)))
                                        + 0.3 * torch.randn(num_heads, 1, 1))
        self.cpb_mlp = nn.Sequential(nn.Linear(2, 512, bias=True), nn.ReLU(inplace=True),
                                     nn.Linear(512, num_heads, bias=False))
        ws = self.window_size
        relative_coords_h = torch.arange(-(ws[0] - 1), ws[0], dtype=torch.float32)
        relative_coords_w = torch.arange(-(ws[1] - 1), ws[1], dtype=torch.float32)
        relative_coords_table = torch.stack(
            torch.meshgrid([relative_coords_h, relative_coords_w], indexing="ij")
        ).permute(1, 2, 0).contiguous().unsqueeze(0)  # 1, 2*Wh-1, 2*Ww-1, 2
        relative_coords_table[:, :, :, 0] /= ws[0] - 1
        relative_coords_table[:, :, :, 1] /= ws[1] - 1
        relative_coords_table *= 8  # normalize to -8, 8
        relative_coords_table = torch.sign(relative_coords_table) * torch.log2(
            torch.abs(relative_coords_table) + 1.0) / math.log2(8)
        self.register_buffer("relative_coords_table", relative_coords_table)

        coords = torch.stack(torch.meshgrid([torch.arange(ws[0]), torch.arange(ws[1])],
                                            indexing="ij"))  # 2, Wh, Ww
        coords_flatten = torch.flatten(coords, 1)  # 2, Wh*Ww
        relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]
        relative_coords = relative_coords.permute(1, 2, 0).contiguous()  # Wh*Ww, Wh*Ww, 2
        relative_coords[:, :, 0] += ws[0] - 1
        relative_coords[:, :, 1] += ws[1] - 1
        relative_coords[:, :, 0] *= 2 * ws[1] - 1
        self.register_buffer("relative_position_index", relative_coords.sum(-1))

        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.q_bias = nn.Parameter(0.1 * torch.randn(dim))
        self.v_bias = nn.Parameter(0.1 * torch.randn(dim))
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        B_, N, C = x.shape
        qkv_bias = torch.cat((self.q_bias, torch.zeros_like(self.v_bias, requires_grad=False),
                              self.v_bias))
        qkv = F.linear(input=x, weight=self.qkv.weight, bias=qkv_bias)
        qkv = qkv.reshape(B_, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]

        attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        logit_scale = torch.clamp(self.logit_scale, max=math.log(1.0 / 0.01)).exp()
        attn = attn * logit_scale

        relative_position_bias_table = self.cpb_mlp(self.relative_coords_table
                                                    ).view(-1, self.num_heads)
        relative_position_bias = relative_position_bias_table[
            self.relative_position_index.view(-1)].view(
            self.window_size[0] * self.window_size[1],
            self.window_size[0] * self.window_size[1], -1)  # Wh*Ww, Wh*Ww, nH
        relative_position_bias = relative_position_bias.permute(2, 0, 1).contiguous()
        relative_position_bias = 16 * torch.sigmoid(relative_position_bias)
        attn = attn + relative_position_bias.unsqueeze(0)

        if mask is not None:
            nW = mask.shape[0]
            attn = attn.view(B_ // nW, nW, self.num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, N, N)
        attn = self.attn_drop(self.softmax(attn))
        x = (attn @ v).transpose(1, 2).reshape(B_, N, C)
        return self.proj(x)


class SwinV2Block(nn.Module):
    """SwinTransformerBlock (V2): ``view(B, H, W, C)``, ``torch.roll`` by -shift, windows,
    attention with the ``attn_mask`` buffer (built in ``__init__`` from slices, as Swin does),
    windows reversed, rolled back; res-post-norm ``x + norm1(attn(x))``,
    ``x + norm2(mlp(x))``."""

    def __init__(self, dim: int, input_resolution: tuple[int, int], num_heads: int,
                 window_size: int, shift_size: int) -> None:
        super().__init__()
        self.input_resolution = input_resolution
        self.window_size, self.shift_size = window_size, shift_size
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SwinV2WindowAttention(dim, window_size, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        if self.shift_size > 0:
            H, W = self.input_resolution
            img_mask = torch.zeros((1, H, W, 1))
            slices = (slice(0, -window_size), slice(-window_size, -shift_size),
                      slice(-shift_size, None))
            cnt = 0
            for h in slices:
                for w in slices:
                    img_mask[:, h, w, :] = cnt
                    cnt += 1
            mask_windows = window_partition(img_mask, window_size)
            mask_windows = mask_windows.view(-1, window_size * window_size)
            attn_mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
            attn_mask = attn_mask.masked_fill(attn_mask != 0, -100.0
                                              ).masked_fill(attn_mask == 0, 0.0)
        else:
            attn_mask = None
        self.register_buffer("attn_mask", attn_mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        H, W = self.input_resolution
        B, _L, C = x.shape
        shortcut = x
        x = x.view(B, H, W, C)
        if self.shift_size > 0:
            shifted_x = torch.roll(x, shifts=(-self.shift_size, -self.shift_size), dims=(1, 2))
        else:
            shifted_x = x
        x_windows = window_partition(shifted_x, self.window_size)
        x_windows = x_windows.view(-1, self.window_size * self.window_size, C)
        attn_windows = self.attn(x_windows, mask=self.attn_mask)
        attn_windows = attn_windows.view(-1, self.window_size, self.window_size, C)
        shifted_x = window_reverse(attn_windows, self.window_size, H, W)
        if self.shift_size > 0:
            x = torch.roll(shifted_x, shifts=(self.shift_size, self.shift_size), dims=(1, 2))
        else:
            x = shifted_x
        x = x.view(B, H * W, C)
        x = shortcut + self.norm1(x)
        return x + self.norm2(self.mlp(x))


class SwinV2PatchMerging(nn.Module):
    """V2's PatchMerging: four strided slices of the (B, H, W, C) view concatenated, the
    reduction Linear, then the norm (V2 normalizes after reducing)."""

    def __init__(self, input_resolution: tuple[int, int], dim: int) -> None:
        super().__init__()
        self.input_resolution = input_resolution
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(2 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        H, W = self.input_resolution
        B, _L, C = x.shape
        x = x.view(B, H, W, C)
        x0 = x[:, 0::2, 0::2, :]
        x1 = x[:, 1::2, 0::2, :]
        x2 = x[:, 0::2, 1::2, :]
        x3 = x[:, 1::2, 1::2, :]
        x = torch.cat([x0, x1, x2, x3], -1)
        x = x.view(B, -1, 4 * C)
        return self.norm(self.reduction(x))


class SwinV2(nn.Module):
    """Patch embed (4×4 conv, tokens, LayerNorm), a W-MSA and an SW-MSA block on the 8×8
    grid (windows 4, shift 2), V2 patch merging, norm, average pool, head."""

    def __init__(self, dim: int = 32, heads: int = 4, window: int = 4) -> None:
        super().__init__()
        res = (SIZE // 4, SIZE // 4)
        self.patch_embed = nn.Conv2d(3, dim, 4, 4)
        self.patch_norm = nn.LayerNorm(dim)
        self.blocks = nn.ModuleList(
            SwinV2Block(dim, res, heads, window, 0 if i % 2 == 0 else window // 2)
            for i in range(2))
        self.downsample = SwinV2PatchMerging(res, dim)
        self.norm = nn.LayerNorm(2 * dim)
        self.head = nn.Linear(2 * dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_norm(_patch_tokens(self.patch_embed, x))
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(self.downsample(x))  # B L C
        x = torch.flatten(F.adaptive_avg_pool1d(x.transpose(1, 2), 1), 1)
        return self.head(x)


# --------------------------------------------------------------------------------------------
# Whisper (openai/whisper model.py): the audio encoder
# --------------------------------------------------------------------------------------------
def sinusoids(length: int, channels: int, max_timescale: int = 10000) -> torch.Tensor:
    """Returns sinusoids for positional embedding"""
    assert channels % 2 == 0
    log_timescale_increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, None] * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


class WhisperMultiHeadAttention(nn.Module):
    """Whisper's MultiHeadAttention (the non-SDPA path): key without bias, heads by
    ``view(*shape[:2], n_head, -1).permute(0, 2, 1, 3)``, ``(q * scale) @ (k * scale).T`` with
    scale = d**-0.25, softmax in float, ``permute(0, 2, 1, 3).flatten(start_dim=2)``."""

    def __init__(self, n_state: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.query(x), self.key(x), self.value(x)
        return self.out(self.qkv_attention(q, k, v))

    def qkv_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                      ) -> torch.Tensor:
        _, _, n_state = q.shape
        scale = (n_state // self.n_head) ** -0.25
        q = q.view(*q.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        v = v.view(*v.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        qk = (q * scale) @ (k * scale).transpose(-1, -2)
        qk = qk.float()
        w = F.softmax(qk, dim=-1).to(q.dtype)
        return (w @ v).permute(0, 2, 1, 3).flatten(start_dim=2)


class WhisperLayerNorm(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.float()).type(x.dtype)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int) -> None:
        super().__init__()
        self.attn = WhisperMultiHeadAttention(n_state, n_head)
        self.attn_ln = WhisperLayerNorm(n_state)
        self.mlp = nn.Sequential(nn.Linear(n_state, 4 * n_state), nn.GELU(),
                                 nn.Linear(4 * n_state, n_state))
        self.mlp_ln = WhisperLayerNorm(n_state)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_ln(x))
        return x + self.mlp(self.mlp_ln(x))


class WhisperEncoder(nn.Module):
    """Whisper's AudioEncoder on a mel-like (B, n_mels, T) = ``x.mean(1)`` (the image's rows
    as mel bins, its columns as frames): ``conv1`` (k3) and ``conv2`` (k3, stride 2) with
    GELU, ``permute(0, 2, 1)``, the sinusoid buffer added, two blocks, ``ln_post``."""

    def __init__(self, n_mels: int = SIZE, n_ctx: int = SIZE // 2, n_state: int = 64,
                 n_head: int = 4, n_layer: int = 2) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(n_mels, n_state, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(n_state, n_state, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(n_ctx, n_state))
        self.blocks = nn.ModuleList(ResidualAttentionBlock(n_state, n_head)
                                    for _ in range(n_layer))
        self.ln_post = WhisperLayerNorm(n_state)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = image.mean(1)  # (B, n_mels, n_frames)
        x = F.gelu(self.conv1(x))
        x = F.gelu(self.conv2(x))
        x = x.permute(0, 2, 1)
        x = (x + self.positional_embedding).to(x.dtype)
        for block in self.blocks:
            x = block(x)
        return self.ln_post(x)


# --------------------------------------------------------------------------------------------
# transformers: Nyströmformer
# --------------------------------------------------------------------------------------------
class NystromformerSelfAttention(nn.Module):
    """transformers' NystromformerSelfAttention: q and k divided by sqrt(sqrt(d)); landmarks
    by ``reshape(-1, H, m, n // m, d).mean(dim=-2)``; kernels 1-3 by softmax; kernel 2
    inverted by ``iterative_inv`` (6 Newton-Schulz steps on ``torch.eye``, init
    ``1 / max(sum(K, -2)) * K^T``); ``context += conv(value)`` (a depthwise Conv2d over
    (heads, sequence, head_dim) with a (k, 1) kernel)."""

    def __init__(self, hidden: int, heads: int, num_landmarks: int, seq_len: int,
                 conv_kernel_size: int) -> None:
        super().__init__()
        self.num_attention_heads = heads
        self.attention_head_size = hidden // heads
        self.all_head_size = hidden
        self.num_landmarks = num_landmarks
        self.seq_len = seq_len
        self.conv_kernel_size = conv_kernel_size
        self.init_option = "original"
        self.query = nn.Linear(hidden, self.all_head_size)
        self.key = nn.Linear(hidden, self.all_head_size)
        self.value = nn.Linear(hidden, self.all_head_size)
        self.dropout = nn.Dropout(0.0)
        self.conv = nn.Conv2d(in_channels=heads, out_channels=heads,
                              kernel_size=(conv_kernel_size, 1),
                              padding=(conv_kernel_size // 2, 0), bias=False, groups=heads)

    def iterative_inv(self, mat: torch.Tensor, n_iter: int = 6) -> torch.Tensor:
        identity = torch.eye(mat.size(-1), device=mat.device)
        key = mat
        value = 1 / torch.max(torch.sum(key, dim=-2)) * key.transpose(-1, -2)
        for _ in range(n_iter):
            key_value = torch.matmul(key, value)
            value = torch.matmul(
                0.25 * value,
                13 * identity
                - torch.matmul(key_value,
                               15 * identity - torch.matmul(key_value, 7 * identity - key_value)),
            )
        return value

    def transpose_for_scores(self, layer: torch.Tensor) -> torch.Tensor:
        new_layer_shape = (*layer.size()[:-1], self.num_attention_heads,
                           self.attention_head_size)
        layer = layer.view(*new_layer_shape)
        return layer.permute(0, 2, 1, 3)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        mixed_query_layer = self.query(hidden_states)
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        query_layer = self.transpose_for_scores(mixed_query_layer)

        query_layer = query_layer / math.sqrt(math.sqrt(self.attention_head_size))
        key_layer = key_layer / math.sqrt(math.sqrt(self.attention_head_size))

        shape = (-1, self.num_attention_heads, self.num_landmarks,
                 self.seq_len // self.num_landmarks, self.attention_head_size)
        q_landmarks = query_layer.reshape(*shape).mean(dim=-2)
        k_landmarks = key_layer.reshape(*shape).mean(dim=-2)

        kernel_1 = F.softmax(torch.matmul(query_layer, k_landmarks.transpose(-1, -2)), dim=-1)
        kernel_2 = F.softmax(torch.matmul(q_landmarks, k_landmarks.transpose(-1, -2)), dim=-1)
        attention_scores = torch.matmul(q_landmarks, key_layer.transpose(-1, -2))
        kernel_3 = F.softmax(attention_scores, dim=-1)
        attention_probs = torch.matmul(kernel_1, self.iterative_inv(kernel_2))
        new_value_layer = torch.matmul(kernel_3, value_layer)
        context_layer = torch.matmul(attention_probs, new_value_layer)

        context_layer += self.conv(value_layer)

        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = (*context_layer.size()[:-2], self.all_head_size)
        return context_layer.view(*new_context_layer_shape)


class NystromformerLayer(nn.Module):
    """BERT-style post-norm layer: SelfOutput (dense, ``LayerNorm(h + input)``),
    Intermediate (dense, GELU), Output (dense, ``LayerNorm(h + input)``)."""

    def __init__(self, hidden: int, heads: int, num_landmarks: int, seq_len: int,
                 conv_kernel_size: int) -> None:
        super().__init__()
        self.self = NystromformerSelfAttention(hidden, heads, num_landmarks, seq_len,
                                               conv_kernel_size)
        self.attn_dense = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=1e-5)
        self.intermediate = nn.Linear(hidden, 2 * hidden)
        self.output = nn.Linear(2 * hidden, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        attention_output = self.attn_norm(self.attn_dense(self.self(hidden_states))
                                          + hidden_states)
        intermediate_output = F.gelu(self.intermediate(attention_output))
        return self.out_norm(self.output(intermediate_output) + attention_output)


class Nystromformer(nn.Module):
    """NystromformerModel with patch tokens for ``inputs_embeds``: embeddings add
    ``position_embeddings(position_ids[:, :n])`` (a buffer ``arange + 2``) and token-type
    embeddings of a zero buffer, LayerNorm; two layers (64 tokens, 8 landmarks, conv 17)."""

    def __init__(self, hidden: int = 64, heads: int = 4, depth: int = 2, patch: int = 4,
                 num_landmarks: int = 8, conv_kernel_size: int = 17) -> None:
        super().__init__()
        seq_len = (SIZE // patch) ** 2
        max_positions = seq_len + 2
        self.patch = nn.Conv2d(3, hidden, patch, patch)
        self.position_embeddings = nn.Embedding(max_positions + 2, hidden)
        self.token_type_embeddings = nn.Embedding(2, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-5)
        self.register_buffer("position_ids",
                             torch.arange(max_positions).expand((1, -1)) + 2, persistent=False)
        self.register_buffer("token_type_ids",
                             torch.zeros(self.position_ids.size(), dtype=torch.long),
                             persistent=False)
        self.layer = nn.ModuleList(
            NystromformerLayer(hidden, heads, num_landmarks, seq_len, conv_kernel_size)
            for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inputs_embeds = _patch_tokens(self.patch, x)
        batch_size, seq_length = inputs_embeds.shape[:2]
        position_ids = self.position_ids[:, :seq_length]
        buffered_token_type_ids = self.token_type_ids[:, :seq_length]
        token_type_ids = buffered_token_type_ids.expand(batch_size, seq_length)
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids)
        embeddings += self.position_embeddings(position_ids)
        hidden_states = self.LayerNorm(embeddings)
        for layer in self.layer:
            hidden_states = layer(hidden_states)
        return hidden_states


# --------------------------------------------------------------------------------------------
# Linformer (fairseq examples/linformer: MultiheadLinearAttention)
# --------------------------------------------------------------------------------------------
class MultiheadLinearAttention(nn.Module):
    """fairseq's MultiheadLinearAttention (self-attention, unshared compression): the
    sequence-first input ``permute(1, 2, 0)`` to (B, C, T), ``F.linear`` with
    ``compress_k.weight[:, 0:tgt_len]`` (an ``nn.Linear(max_seq_len, k)``: E and F), back by
    ``permute(2, 0, 1)``, then k_proj/v_proj; q scaled in place, heads into the batch by
    ``view(T, B*H, d).transpose(0, 1)``, ``bmm``, softmax, ``bmm``, back to (T, B, C)."""

    def __init__(self, embed_dim: int, num_heads: int, max_seq_len: int, compressed: int
                 ) -> None:
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.compress_k = nn.Linear(max_seq_len, max_seq_len // compressed, bias=False)
        self.compress_v = nn.Linear(max_seq_len, max_seq_len // compressed, bias=False)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query: torch.Tensor) -> torch.Tensor:
        tgt_len, bsz, embed_dim = query.size()
        q = self.q_proj(query)
        k_input = query.permute(1, 2, 0).contiguous()  # B * C * T
        k_input = F.linear(k_input, self.compress_k.weight[:, 0:tgt_len]
                           ).permute(2, 0, 1).contiguous()
        k = self.k_proj(k_input)
        v_input = query.permute(1, 2, 0).contiguous()  # B * C * T
        v_input = F.linear(v_input, self.compress_v.weight[:, 0:tgt_len]
                           ).permute(2, 0, 1).contiguous()
        v = self.v_proj(v_input)
        q *= self.scaling
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))
        attn_weights_float = F.softmax(attn_weights, dim=-1, dtype=torch.float32)
        attn_probs = attn_weights_float.type_as(attn_weights)
        attn = torch.bmm(attn_probs, v)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(attn)


class LinformerEncoderLayer(nn.Module):
    """fairseq's TransformerEncoderLayer, post-norm: ``x = norm(residual + attn(x))``,
    ``x = norm(residual + fc2(gelu(fc1(x))))``."""

    def __init__(self, dim: int, heads: int, max_seq_len: int, compressed: int) -> None:
        super().__init__()
        self.self_attn = MultiheadLinearAttention(dim, heads, max_seq_len, compressed)
        self.self_attn_layer_norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)
        self.final_layer_norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x
        x = self.self_attn(x)
        x = self.self_attn_layer_norm(residual + x)
        residual = x
        x = self.fc2(F.gelu(self.fc1(x)))
        return self.final_layer_norm(residual + x)


class Linformer(nn.Module):
    """Patch tokens sequence-first (``flatten(2).permute(2, 0, 1)``, as fairseq's encoder
    runs), learned positions, two Linformer layers (64 tokens compressed to 16), back to
    batch-first."""

    def __init__(self, dim: int = 64, heads: int = 4, depth: int = 2, patch: int = 4,
                 compressed: int = 4) -> None:
        super().__init__()
        n = (SIZE // patch) ** 2
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.embed_positions = nn.Parameter(torch.randn(n, 1, dim) * 0.02)
        self.layers = nn.ModuleList(LinformerEncoderLayer(dim, heads, n, compressed)
                                    for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).permute(2, 0, 1)  # T x B x C
        x = x + self.embed_positions
        for layer in self.layers:
            x = layer(x)
        return x.transpose(0, 1)


# --------------------------------------------------------------------------------------------
# DiT (facebookresearch/DiT models.py)
# --------------------------------------------------------------------------------------------
def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden_size: int, frequency_embedding_size: int = 64) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(frequency_embedding_size, hidden_size, bias=True),
                                 nn.SiLU(), nn.Linear(hidden_size, hidden_size, bias=True))
        self.frequency_embedding_size = frequency_embedding_size

    @staticmethod
    def timestep_embedding(t: torch.Tensor, dim: int, max_period: int = 10000) -> torch.Tensor:
        half = dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half,
                                                               dtype=torch.float32) / half
                          ).to(device=t.device)
        args = t[:, None].float() * freqs[None]
        embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        if dim % 2:
            embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
        return embedding

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.timestep_embedding(t, self.frequency_embedding_size))


class TimmFusedAttention(nn.Module):
    """timm's Attention with ``fused_attn``: qkv reshape + ``permute(2, 0, 3, 1, 4)``,
    ``unbind(0)``, q/k norms (Identity), SDPA, ``transpose(1, 2).reshape``."""

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.q_norm, self.k_norm = nn.Identity(), nn.Identity()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0)
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class DiTBlock(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.attn = TimmFusedAttention(hidden_size, num_heads)
        self.norm2 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        mlp_hidden_dim = int(hidden_size * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(hidden_size, mlp_hidden_dim),
                                 nn.GELU(approximate="tanh"),
                                 nn.Linear(mlp_hidden_dim, hidden_size))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(),
                                              nn.Linear(hidden_size, 6 * hidden_size, bias=True))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = \
            self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + gate_msa.unsqueeze(1) * self.attn(modulate(self.norm1(x), shift_msa, scale_msa))
        return x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp,
                                                             scale_mlp))


class FinalLayer(nn.Module):
    def __init__(self, hidden_size: int, patch_size: int, out_channels: int) -> None:
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(hidden_size, patch_size * patch_size * out_channels, bias=True)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(),
                                              nn.Linear(hidden_size, 2 * hidden_size, bias=True))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        x = modulate(self.norm_final(x), shift, scale)
        return self.linear(x)


def _sincos_2d(embed_dim: int, grid_size: int) -> torch.Tensor:
    """DiT's get_2d_sincos_pos_embed (numpy there), (grid_size², embed_dim)."""
    def one_d(dim: int, pos: torch.Tensor) -> torch.Tensor:
        omega = 1.0 / 10000 ** (torch.arange(dim // 2, dtype=torch.float64) / (dim / 2.0))
        out = pos.reshape(-1)[:, None] * omega[None]
        return torch.cat([torch.sin(out), torch.cos(out)], dim=1)

    grid_h = torch.arange(grid_size, dtype=torch.float64)
    grid = torch.stack(torch.meshgrid(grid_h, grid_h, indexing="xy"), dim=0)
    emb = torch.cat([one_d(embed_dim // 2, grid[0]), one_d(embed_dim // 2, grid[1])], dim=1)
    return emb.float()


class DiT(nn.Module):
    """DiT with ``learn_sigma`` on the image as the latent (3 channels in, 6 out): a 4×4
    patchify conv, fixed 2-D sin-cos positions, the timestep (a constant made in forward)
    and class label (constant too) embedded and summed into ``c``, two adaLN-Zero blocks,
    the final layer, ``unpatchify`` by ``reshape`` + ``einsum('nhwpqc->nchpwq')``."""

    def __init__(self, hidden_size: int = 64, num_heads: int = 4, depth: int = 2,
                 patch_size: int = 4, in_channels: int = 3, num_classes: int = 10) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = in_channels * 2
        self.patch_size = patch_size
        self.x_embedder = nn.Conv2d(in_channels, hidden_size, patch_size, patch_size, bias=True)
        self.t_embedder = TimestepEmbedder(hidden_size)
        self.y_embedder = nn.Embedding(num_classes + 1, hidden_size)  # LabelEmbedder's table
        self.pos_embed = nn.Parameter(_sincos_2d(hidden_size, SIZE // patch_size).unsqueeze(0),
                                      requires_grad=False)
        self.blocks = nn.ModuleList(DiTBlock(hidden_size, num_heads) for _ in range(depth))
        self.final_layer = FinalLayer(hidden_size, patch_size, self.out_channels)

    def unpatchify(self, x: torch.Tensor) -> torch.Tensor:
        c = self.out_channels
        p = self.patch_size
        h = w = int(x.shape[1] ** 0.5)
        assert h * w == x.shape[1]
        x = x.reshape(shape=(x.shape[0], h, w, p, p, c))
        x = torch.einsum("nhwpqc->nchpwq", x)
        return x.reshape(shape=(x.shape[0], c, h * p, h * p))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        t = torch.full((n,), 500, dtype=torch.long, device=x.device)
        y = torch.full((n,), 3, dtype=torch.long, device=x.device)
        x = _patch_tokens(self.x_embedder, x) + self.pos_embed  # (N, T, D)
        c = self.t_embedder(t) + self.y_embedder(y)  # (N, D)
        for block in self.blocks:
            x = block(x, c)
        x = self.final_layer(x, c)  # (N, T, patch_size ** 2 * out_channels)
        return self.unpatchify(x)  # (N, out_channels, H, W)


# --------------------------------------------------------------------------------------------
# diffusers: Transformer2DModel (continuous input, conv proj_in/proj_out)
# --------------------------------------------------------------------------------------------
class DiffusersAttention(nn.Module):
    """diffusers' Attention with AttnProcessor2_0: to_q/k/v without bias (k/v from the
    encoder states for cross-attention), ``view(B, -1, heads, d).transpose(1, 2)``, SDPA,
    ``transpose(1, 2).reshape``, ``to_out`` (Linear, Dropout), ``/ rescale_output_factor``."""

    def __init__(self, query_dim: int, heads: int, dim_head: int,
                 cross_attention_dim: int | None = None) -> None:
        super().__init__()
        inner_dim = dim_head * heads
        self.heads = heads
        self.rescale_output_factor = 1.0
        kv_dim = cross_attention_dim if cross_attention_dim is not None else query_dim
        self.to_q = nn.Linear(query_dim, inner_dim, bias=False)
        self.to_k = nn.Linear(kv_dim, inner_dim, bias=False)
        self.to_v = nn.Linear(kv_dim, inner_dim, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner_dim, query_dim, bias=True),
                                     nn.Dropout(0.0)])

    def forward(self, hidden_states: torch.Tensor,
                encoder_hidden_states: torch.Tensor | None = None) -> torch.Tensor:
        batch_size, _, _ = (hidden_states.shape if encoder_hidden_states is None
                            else encoder_hidden_states.shape)
        query = self.to_q(hidden_states)
        if encoder_hidden_states is None:
            encoder_hidden_states = hidden_states
        key = self.to_k(encoder_hidden_states)
        value = self.to_v(encoder_hidden_states)
        inner_dim = key.shape[-1]
        head_dim = inner_dim // self.heads
        query = query.view(batch_size, -1, self.heads, head_dim).transpose(1, 2)
        key = key.view(batch_size, -1, self.heads, head_dim).transpose(1, 2)
        value = value.view(batch_size, -1, self.heads, head_dim).transpose(1, 2)
        hidden_states = F.scaled_dot_product_attention(query, key, value, attn_mask=None,
                                                       dropout_p=0.0, is_causal=False)
        hidden_states = hidden_states.transpose(1, 2).reshape(batch_size, -1,
                                                              self.heads * head_dim)
        hidden_states = hidden_states.to(query.dtype)
        hidden_states = self.to_out[0](hidden_states)
        hidden_states = self.to_out[1](hidden_states)
        return hidden_states / self.rescale_output_factor


class GEGLU(nn.Module):
    def __init__(self, dim_in: int, dim_out: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out * 2, bias=True)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.proj(hidden_states)
        hidden_states, gate = hidden_states.chunk(2, dim=-1)
        return hidden_states * F.gelu(gate)


class BasicTransformerBlock(nn.Module):
    """``norm_type='layer_norm'``: self-attention, cross-attention, GEGLU feed-forward, each
    pre-norm with a residual."""

    def __init__(self, dim: int, heads: int, dim_head: int, cross_attention_dim: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=True, eps=1e-5)
        self.attn1 = DiffusersAttention(dim, heads, dim_head)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=True, eps=1e-5)
        self.attn2 = DiffusersAttention(dim, heads, dim_head, cross_attention_dim)
        self.norm3 = nn.LayerNorm(dim, elementwise_affine=True, eps=1e-5)
        self.ff = nn.Sequential(GEGLU(dim, dim * 4), nn.Dropout(0.0), nn.Linear(dim * 4, dim))

    def forward(self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor
                ) -> torch.Tensor:
        norm_hidden_states = self.norm1(hidden_states)
        attn_output = self.attn1(norm_hidden_states)
        hidden_states = attn_output + hidden_states
        if hidden_states.ndim == 4:
            hidden_states = hidden_states.squeeze(1)
        norm_hidden_states = self.norm2(hidden_states)
        attn_output = self.attn2(norm_hidden_states, encoder_hidden_states=encoder_hidden_states)
        hidden_states = attn_output + hidden_states
        norm_hidden_states = self.norm3(hidden_states)
        ff_output = self.ff(norm_hidden_states)
        return ff_output + hidden_states


class Transformer2DModel(nn.Module):
    """diffusers' Transformer2DModel (``use_linear_projection=False``) on a 16×16 map from a
    stride-2 conv: GroupNorm, ``proj_in`` 1×1 conv, ``permute(0, 2, 3, 1).reshape(B, HW,
    inner)``, one BasicTransformerBlock against a (1, 77, 64) ``encoder_hidden_states``
    buffer expanded to the batch, ``reshape(B, H, W, inner).permute(0, 3, 1, 2)``,
    ``proj_out`` 1×1 conv, the residual added."""

    def __init__(self, in_channels: int = 32, heads: int = 2, dim_head: int = 16,
                 cross_attention_dim: int = 64, norm_num_groups: int = 8) -> None:
        super().__init__()
        inner_dim = heads * dim_head
        self.conv_in = nn.Conv2d(3, in_channels, 3, 2, 1)
        self.norm = nn.GroupNorm(num_groups=norm_num_groups, num_channels=in_channels,
                                 eps=1e-6, affine=True)
        self.proj_in = nn.Conv2d(in_channels, inner_dim, kernel_size=1, stride=1, padding=0)
        self.transformer_blocks = nn.ModuleList(
            [BasicTransformerBlock(inner_dim, heads, dim_head, cross_attention_dim)])
        self.proj_out = nn.Conv2d(inner_dim, in_channels, kernel_size=1, stride=1, padding=0)
        self.register_buffer("encoder_hidden_states", torch.randn(1, 77, cross_attention_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden_states = self.conv_in(x)
        encoder_hidden_states = self.encoder_hidden_states.expand(x.shape[0], -1, -1)
        batch, _, height, width = hidden_states.shape
        residual = hidden_states
        hidden_states = self.norm(hidden_states)
        hidden_states = self.proj_in(hidden_states)
        inner_dim = hidden_states.shape[1]
        hidden_states = hidden_states.permute(0, 2, 3, 1).reshape(batch, height * width,
                                                                  inner_dim)
        for block in self.transformer_blocks:
            hidden_states = block(hidden_states, encoder_hidden_states)
        hidden_states = hidden_states.reshape(batch, height, width, inner_dim
                                              ).permute(0, 3, 1, 2).contiguous()
        hidden_states = self.proj_out(hidden_states)
        return hidden_states + residual


# --------------------------------------------------------------------------------------------
# timm: MobileNetV4's mobile multi-query attention (MultiQueryAttention2d, MobileAttention)
# --------------------------------------------------------------------------------------------
class MultiQueryAttention2d(nn.Module):
    """timm's ``MultiQueryAttention2d``: queries by a 1x1 conv reshaped ``(B, heads, key_dim,
    H·W)`` and transposed; one key and one value head, each a 1x1 conv (after a strided
    depthwise conv + BatchNorm where ``kv_stride > 1``) reshaped ``(B, C, m·m)``, transposed
    and ``unsqueeze(1)``; SDPA broadcasts the one K/V head over the query heads; the output
    transposed back, reshaped to ``(B, H, W, heads·value_dim)``, permuted to NCHW and
    projected by a 1x1 conv (an average pool and a bilinear upsample where
    ``query_strides > 1``)."""

    def __init__(self, dim: int, num_heads: int = 4, key_dim: int = 16, value_dim: int = 16,
                 query_strides: int = 1, kv_stride: int = 1) -> None:
        super().__init__()
        self.num_heads, self.key_dim, self.value_dim = num_heads, key_dim, value_dim
        self.query_strides = query_strides
        self.query = nn.Sequential()
        if query_strides > 1:
            self.query.add_module("down_pool", nn.AvgPool2d(kernel_size=query_strides))
            self.query.add_module("norm", nn.BatchNorm2d(dim))
        self.query.add_module("proj", nn.Conv2d(dim, num_heads * key_dim, 1, bias=False))

        def kv(out: int) -> nn.Sequential:
            seq = nn.Sequential()
            if kv_stride > 1:
                seq.add_module("down_conv", nn.Conv2d(dim, dim, 3, kv_stride, 1, groups=dim,
                                                      bias=False))
                seq.add_module("norm", nn.BatchNorm2d(dim))
            seq.add_module("proj", nn.Conv2d(dim, out, 1, bias=False))
            return seq

        self.key, self.value = kv(key_dim), kv(value_dim)
        self.output = nn.Sequential()
        if query_strides > 1:
            self.output.add_module("upsample", nn.Upsample(scale_factor=query_strides,
                                                           mode="bilinear",
                                                           align_corners=False))
        self.output.add_module("proj", nn.Conv2d(value_dim * num_heads, dim, 1, bias=False))

    def _reshape_input(self, t: torch.Tensor) -> torch.Tensor:
        s = t.shape
        t = t.reshape(s[0], s[1], -1).transpose(1, 2)
        return t.unsqueeze(1).contiguous()

    def _reshape_projected_query(self, t: torch.Tensor) -> torch.Tensor:
        s = t.shape
        t = t.reshape(s[0], self.num_heads, self.key_dim, -1)
        return t.transpose(-1, -2).contiguous()

    def _reshape_output(self, t: torch.Tensor, h_px: int, w_px: int) -> torch.Tensor:
        s = t.shape
        feat_dim = s[-1] * self.num_heads
        t = t.transpose(1, 2)
        return t.reshape(s[0], h_px, w_px, feat_dim).permute(0, 3, 1, 2).contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, _, h, w = x.shape
        q = self._reshape_projected_query(self.query(x))
        k = self._reshape_input(self.key(x))
        v = self._reshape_input(self.value(x))
        o = F.scaled_dot_product_attention(q, k, v)
        o = self._reshape_output(o, h // self.query_strides, w // self.query_strides)
        return self.output(o)


class MobileAttention(nn.Module):
    """timm's ``MobileAttention`` block: BatchNorm, the attention, a layer scale, the
    residual."""

    def __init__(self, dim: int, **attn: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm2d(dim)
        self.attn = MultiQueryAttention2d(dim, **attn)
        self.gamma = nn.Parameter(1e-1 * torch.rand(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.attn(self.norm(x)) * self.gamma.reshape(1, -1, 1, 1)


class MobileNetV4Hybrid(nn.Module):
    """A MobileNetV4-hybrid stage, small: a conv stem, an inverted residual, mobile MQA
    blocks with ``kv_stride = 2`` and with ``query_strides = 2``, a pooled head."""

    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dim, 3, 2, 1, bias=False), nn.BatchNorm2d(dim),
                                  nn.ReLU())
        self.ir = nn.Sequential(nn.Conv2d(dim, 2 * dim, 1, bias=False),
                                nn.BatchNorm2d(2 * dim), nn.ReLU(),
                                nn.Conv2d(2 * dim, 2 * dim, 3, 1, 1, groups=2 * dim,
                                          bias=False), nn.BatchNorm2d(2 * dim), nn.ReLU(),
                                nn.Conv2d(2 * dim, dim, 1, bias=False), nn.BatchNorm2d(dim))
        self.blocks = nn.Sequential(MobileAttention(dim, kv_stride=2),
                                    MobileAttention(dim, query_strides=2))
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.blocks(x + self.ir(x))
        return self.head(x.mean((2, 3)))


# --------------------------------------------------------------------------------------------
# transformers: SAM's vision encoder with decomposed relative positions
# --------------------------------------------------------------------------------------------
class SamVisionAttention(nn.Module):
    """transformers' ``SamVisionAttention`` with ``use_rel_pos``: qkv reshaped ``(B, H·W, 3,
    heads, -1)``, permuted and folded to ``(3, B·heads, H·W, -1)``, ``unbind``; the
    decomposed relative positions (``get_rel_pos``: the tables linearly interpolated, indexed
    by ``long()`` coordinates; two einsums ``bhwc,hkc->bhwk``) added to the scores; softmax
    in float32 and ``.to(query.dtype)``; the heads unfolded back to ``(B, H, W, C)``."""

    def __init__(self, dim: int, heads: int, input_size: tuple[int, int]) -> None:
        super().__init__()
        self.num_attention_heads = heads
        head_dim = dim // heads
        self.scale = head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.rel_pos_h = nn.Parameter(0.1 * torch.randn(2 * input_size[0] - 1, head_dim))
        self.rel_pos_w = nn.Parameter(0.1 * torch.randn(2 * input_size[1] - 1, head_dim))

    def get_rel_pos(self, q_size: int, k_size: int, rel_pos: torch.Tensor) -> torch.Tensor:
        max_rel_dist = int(2 * max(q_size, k_size) - 1)
        rel_pos_resized = F.interpolate(
            rel_pos.reshape(1, rel_pos.shape[0], -1).permute(0, 2, 1), size=max_rel_dist,
            mode="linear")
        rel_pos_resized = rel_pos_resized.reshape(-1, max_rel_dist).permute(1, 0)
        q_coords = torch.arange(q_size)[:, None] * max(k_size / q_size, 1.0)
        k_coords = torch.arange(k_size)[None, :] * max(q_size / k_size, 1.0)
        relative_coords = (q_coords - k_coords) + (k_size - 1) * max(q_size / k_size, 1.0)
        return rel_pos_resized[relative_coords.long()]

    def get_decomposed_rel_pos(self, query: torch.Tensor, q_size: tuple[int, int],
                               k_size: tuple[int, int]) -> torch.Tensor:
        query_height, query_width = q_size
        key_height, key_width = k_size
        relative_position_height = self.get_rel_pos(query_height, key_height, self.rel_pos_h)
        relative_position_width = self.get_rel_pos(query_width, key_width, self.rel_pos_w)
        batch_size, _, dim = query.shape
        reshaped_query = query.reshape(batch_size, query_height, query_width, dim)
        rel_h = torch.einsum("bhwc,hkc->bhwk", reshaped_query, relative_position_height)
        rel_w = torch.einsum("bhwc,wkc->bhwk", reshaped_query, relative_position_width)
        return rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        batch_size, height, width, _ = hidden_states.shape
        qkv = (self.qkv(hidden_states)
               .reshape(batch_size, height * width, 3, self.num_attention_heads, -1)
               .permute(2, 0, 3, 1, 4))
        query, key, value = qkv.reshape(3, batch_size * self.num_attention_heads,
                                        height * width, -1).unbind(0)
        attn_weights = (query * self.scale) @ key.transpose(-2, -1)
        decomposed_rel_pos = self.get_decomposed_rel_pos(query, (height, width),
                                                         (height, width))
        attn_weights = attn_weights + decomposed_rel_pos.reshape_as(attn_weights)
        attn_weights = F.softmax(attn_weights, dtype=torch.float32, dim=-1).to(query.dtype)
        attn_output = (attn_weights @ value).reshape(batch_size, self.num_attention_heads,
                                                     height, width, -1)
        attn_output = attn_output.permute(0, 2, 3, 1, 4).reshape(batch_size, height, width, -1)
        return self.proj(attn_output)


class SamVisionLayer(nn.Module):
    """transformers' ``SamVisionLayer``: LayerNorm, window partition (padded to a multiple
    of the window) or global attention, unpartition, residual, MLP (GELU)."""

    def __init__(self, dim: int, heads: int, grid: int, window_size: int) -> None:
        super().__init__()
        self.window_size = window_size
        size = (window_size, window_size) if window_size else (grid, grid)
        self.layer_norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = SamVisionAttention(dim, heads, size)
        self.layer_norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def window_partition(self, hidden_states: torch.Tensor, window_size: int
                         ) -> tuple[torch.Tensor, tuple[int, int]]:
        batch_size, height, width, channel = hidden_states.shape
        pad_h = (window_size - height % window_size) % window_size
        pad_w = (window_size - width % window_size) % window_size
        hidden_states = F.pad(hidden_states, (0, 0, 0, pad_w, 0, pad_h))
        pad_height, pad_width = height + pad_h, width + pad_w
        hidden_states = hidden_states.reshape(batch_size, pad_height // window_size,
                                              window_size, pad_width // window_size,
                                              window_size, channel)
        windows = hidden_states.permute(0, 1, 3, 2, 4, 5).contiguous().reshape(
            -1, window_size, window_size, channel)
        return windows, (pad_height, pad_width)

    def window_unpartition(self, windows: torch.Tensor, window_size: int,
                           padding_shape: tuple[int, int], original_shape: tuple[int, int]
                           ) -> torch.Tensor:
        pad_height, pad_width = padding_shape
        height, width = original_shape
        batch_size = windows.shape[0] // (pad_height * pad_width // window_size // window_size)
        hidden_states = windows.reshape(batch_size, pad_height // window_size,
                                        pad_width // window_size, window_size, window_size, -1)
        hidden_states = hidden_states.permute(0, 1, 3, 2, 4, 5).contiguous().reshape(
            batch_size, pad_height, pad_width, -1)
        return hidden_states[:, :height, :width, :].contiguous()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        residual = hidden_states
        hidden_states = self.layer_norm1(hidden_states)
        if self.window_size > 0:
            height, width = hidden_states.shape[1], hidden_states.shape[2]
            hidden_states, padding_shape = self.window_partition(hidden_states,
                                                                 self.window_size)
        hidden_states = self.attn(hidden_states)
        if self.window_size > 0:
            hidden_states = self.window_unpartition(hidden_states, self.window_size,
                                                    padding_shape, (height, width))
        hidden_states = residual + hidden_states
        return hidden_states + self.mlp(self.layer_norm2(hidden_states))


class SamLayerNorm2d(nn.Module):
    """SAM's channels-first LayerNorm (``data_format="channels_first"``), written out."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(dim))
        self.bias = nn.Parameter(0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class SamRelPosEncoder(nn.Module):
    """SAM's vision encoder, small: a patch conv then ``permute(0, 2, 3, 1)``, an absolute
    position embedding, a windowed layer (window 3 on the 8x8 grid: padded to 9) and a
    global one, both with decomposed relative positions, and the neck (1x1 conv,
    LayerNorm2d, 3x3 conv, LayerNorm2d) back on NCHW."""

    def __init__(self, dim: int = 48, heads: int = 4, patch: int = 4) -> None:
        super().__init__()
        grid = SIZE // patch
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.pos_embed = nn.Parameter(0.1 * torch.randn(1, grid, grid, dim))
        self.layers = nn.ModuleList([SamVisionLayer(dim, heads, grid, 3),
                                     SamVisionLayer(dim, heads, grid, 0)])
        self.neck = nn.Sequential(nn.Conv2d(dim, 32, 1, bias=False), SamLayerNorm2d(32),
                                  nn.Conv2d(32, 32, 3, padding=1, bias=False),
                                  SamLayerNorm2d(32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden_states = self.patch_embed(x).permute(0, 2, 3, 1) + self.pos_embed
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return self.neck(hidden_states.permute(0, 3, 1, 2))


def _built(cls: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    return lambda: finalize(cls(), CALIB)


MODELS: dict[str, Callable[[], nn.Module]] = {
    "gpt2_causal": _built(GPT2OnPatches),
    "t5_relpos": _built(T5Encoder),
    "cvt_conv_proj": _built(CvTStage),
    "pvtv2_linear_sra": _built(PVTv2Li),
    "crossvit_cross": _built(CrossViT),
    "convit_gpsa": _built(ConViT),
    "swinv2_block": _built(SwinV2),
    "whisper_encoder": _built(WhisperEncoder),
    "nystromformer": _built(Nystromformer),
    "linformer": _built(Linformer),
    "dit_block": _built(DiT),
    "sd_transformer2d": _built(Transformer2DModel),
    "mnv4_mqa2d": _built(MobileNetV4Hybrid),
    "sam_relpos": _built(SamRelPosEncoder),
}
