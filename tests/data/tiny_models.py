"""Tiny PyTorch models for the integration tests: seconds to compile, real TVM all the way."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


class ConvReLU(nn.Module):
    """conv3x3 → ReLU → conv3x3, NCHW in and out: two boundary transforms under NHWC."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(torch.relu(self.conv1(x)))


class Classifier(nn.Module):
    """conv → ReLU → global mean → Linear: a classifier (1 transform: input boundary)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


class NaNModel(nn.Module):
    """Produces NaN for every input (log of a negative number): numerics must fail."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(-torch.abs(self.conv(x)) - 1.0)


class TwoOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.conv(x)
        return y, y.sum((2, 3))


def conv_relu() -> nn.Module:
    return ConvReLU()


def classifier() -> nn.Module:
    return Classifier()


def conv_relu_half() -> nn.Module:
    """`conv_relu` in float16 (``model.half()``, as teams deploy on a GPU)."""
    return ConvReLU().half()


def nan_model() -> nn.Module:
    return NaNModel()


def two_outputs() -> nn.Module:
    return TwoOutputs()


def not_a_module() -> object:
    return [1, 2, 3]


def raises() -> nn.Module:
    raise RuntimeError("weights file missing")


class ReLU6Net(nn.Module):
    """conv → ReLU6 → conv: `clip` has no layout rule in TVM 0.27's ConvertLayout."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU6(),
                                      nn.Conv2d(8, 8, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


class OwnPermute(nn.Module):
    """Takes NHWC, permutes to NCHW itself, convolves, returns NCHW."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x.permute(0, 3, 1, 2))).sum(1)


def relu6_net() -> nn.Module:
    return ReLU6Net()


def own_permute() -> nn.Module:
    return OwnPermute()


class SequenceFirst(nn.Module):
    """Conv features as a sequence, the way nn.MultiheadAttention(batch_first=False) wants
    them: (H·W, N, C). At batch 1 moving the batch axis moves nothing (a free reshape); at
    batch 8 it is a real transpose: a layout transform that only some shapes have. (Its
    output is the sequence itself: a Linear after it would read the tokens in place.)"""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = self.conv(x).flatten(2).permute(2, 0, 1)  # (H·W, N, C)
        return torch.relu(seq)


def sequence_first() -> nn.Module:
    return SequenceFirst()


class FixedBatch(nn.Module):
    """Reshapes with a constant batch size: it cannot be exported with a dynamic batch."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).view(4, -1)


def fixed_batch() -> nn.Module:
    return FixedBatch()


class Cancelling(nn.Module):
    """Two large convolutions whose difference is small: float32 rounding in each is large
    next to the result, in whatever order a backend sums. TVM is as far from a float64 run as
    eager float32 is, and both are far from each other by a tight rtol."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.a = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.b = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        w = torch.randn(8, 3, 3, 3, generator=g) * 1000.0
        with torch.no_grad():
            self.a.weight.copy_(w)
            self.b.weight.copy_(w + torch.randn(8, 3, 3, 3, generator=g) * 0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) - self.b(x)


def cancelling() -> nn.Module:
    return Cancelling()


class Float32Only(nn.Module):
    """Multiplies by a float32 matrix made in forward(): a float64 copy of it fails as it is
    (``mm`` does not promote), and runs with that matrix made float64."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x).flatten(1)
        return torch.mm(y, torch.ones(y.shape[1], 2, dtype=torch.float32))


def float32_only() -> nn.Module:
    return Float32Only()


class Float32Checked(nn.Module):
    """Refuses any input but float32 (as code that checks its dtype does): no float64 run."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            raise ValueError(f"float32 input expected, got {x.dtype}")
        return self.conv(x)


def float32_checked() -> nn.Module:
    return Float32Checked()


class TimestepBlock(nn.Module):
    """A diffusion block called as a sampler's loop calls it: a 0-d int64 timestep (a
    sinusoidal embedding of it added to the features), and the step's mean as a 0-d output."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.embed = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = torch.exp(torch.arange(4, dtype=torch.float32) * -2.0)
        angles = t[None].expand(x.shape[0])[:, None].float() * freqs[None, :]
        emb = self.embed(torch.cat([angles.sin(), angles.cos()], dim=-1))
        y = self.conv(x) + emb[:, :, None, None]
        return y, y.mean()


def timestep_block() -> nn.Module:
    return TimestepBlock()


def ballast() -> nn.Module:
    """conv_relu, from a factory that holds 512 MB for a moment (touched, then freed): a case
    whose worker peaks high, for the per-case peak memory."""
    block = bytearray(512 << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    del block
    return ConvReLU()


class ChannelShuffle(nn.Module):
    """A ShuffleNet channel shuffle between two convolutions: the model's own transpose."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 1), nn.Conv2d(8, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        n, c, h, w = y.shape
        y = y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
        return self.b(y)


class FlattenMatmul(nn.Module):
    """A flatten of a feature map multiplied by a run-time tensor: the transpose before the
    flatten is needed (no weight takes it), and it is not the model's own permute."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = torch.flatten(self.conv(x), 1)
        return f @ f.t()


class FloorDivPositions(nn.Module):
    """A positional encoding helper: float positions floor-divided by a Python int."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[-1], dtype=torch.float32)
        return self.conv(x) + torch.floor_divide(pos, 2) + torch.div(pos, 3, rounding_mode="trunc")


class RadixSoftmax(nn.Module):
    """Split attention's radix softmax (ResNeSt): per-channel gates viewed as
    (B, groups, radix, C'), transposed to put the radix first, softmaxed over it and viewed
    back as channels; the transpose is the model's, left after the views around it fold.
    (A sigmoid after the gates' Linear: straight after it, the Linear writes through the
    transpose and none is left.)"""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 1)
        self.fc = nn.Conv2d(16, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        gates = torch.sigmoid(self.fc(y.mean((2, 3), keepdim=True)))
        gates = torch.softmax(gates.view(x.shape[0], 2, 2, -1).transpose(1, 2), dim=1)
        return y * gates.reshape(x.shape[0], -1).view(x.shape[0], -1, 1, 1)


def radix_softmax() -> nn.Module:
    return RadixSoftmax()


class ChannelsFirstConv1d(nn.Module):
    """Tokens projected channels-first (``W @ x.t()``, as Mamba's in_proj is written), viewed
    as (B, D, L), a running sum over (D, L) flattened in that order (which no other layout
    computes without a transpose), chunked into x and z, x read by a causal depthwise
    Conv1d, gated by z: the transpose into the NWC conv is there because the model computes
    (B, D, L) in that order, not because of the conv. (Without the sum, the projection
    writes (B, L, D) and no transpose is left; a ``flip`` there, now carried, left none.)"""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 4, 4)
        self.proj = nn.Parameter(torch.randn(16, 8) * 0.3)
        self.conv1d = nn.Conv1d(8, 8, 3, groups=8, padding=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.stem(x).flatten(2).transpose(1, 2)  # (B, L, C)
        b, n, c = tokens.shape
        xz = (self.proj @ tokens.reshape(-1, c).t()).view(-1, b, n).permute(1, 0, 2)
        xz = xz.reshape(b, -1).cumsum(-1).reshape(xz.shape) / n  # over D·L in that order
        x, z = xz.chunk(2, dim=1)
        y = F.silu(self.conv1d(x)[..., :n]) * F.silu(z)
        return y.transpose(1, 2)


def channels_first_conv1d() -> nn.Module:
    return ChannelsFirstConv1d()


class InvolutionBlock(nn.Module):
    """RedNet's involution: a kernel per pixel (from the map, viewed (B, G, 1, k², H, W)),
    multiplied with the unfolded map and summed over the taps, viewed back to channels, then
    BatchNorm, ReLU and a convolution. The unfold's pad is read by the unfold's view: the
    region stays NCHW for its views, not for the pad (or, quantized, the quantize after the
    view back), which the cleanup carries a layout through."""

    def __init__(self, channels: int = 8, k: int = 3, groups: int = 2) -> None:
        super().__init__()
        self.k, self.groups = k, groups
        self.stem = nn.Conv2d(3, channels, 1)
        self.span = nn.Conv2d(channels, groups * k * k, 1)
        self.norm = nn.BatchNorm2d(channels)
        self.head = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        b, c, h, w = x.shape
        kernel = self.span(x).view(b, self.groups, self.k * self.k, h, w).unsqueeze(2)
        taps = F.unfold(x, self.k, padding=self.k // 2).view(
            b, self.groups, c // self.groups, self.k * self.k, h, w)
        out = (kernel * taps).sum(dim=3).view(b, c, h, w)
        return self.head(torch.relu(self.norm(out))).mean((2, 3))


def involution_block() -> nn.Module:
    return InvolutionBlock()


def channel_shuffle() -> nn.Module:
    return ChannelShuffle()


class ShuffleBlock(nn.Module):
    """A convolution, then a channel shuffle in this module's own code."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        n, c, h, w = y.shape
        return y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)


class ShuffleNetlet(nn.Module):
    """A stem and three shuffle blocks: three own permutes, each from its own module."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.blocks = nn.Sequential(*(ShuffleBlock(8) for _ in range(3)))
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


def shufflenetlet() -> nn.Module:
    return ShuffleNetlet()


def flatten_matmul() -> nn.Module:
    return FlattenMatmul()


def floor_div_positions() -> nn.Module:
    return FloorDivPositions()


class SpatialGateViewHead(nn.Module):
    """CBAM's spatial gate (channel mean and ``amax`` concatenated, a 7×7 conv) and a
    classifier that flattens the C×H×W map with ``x.view(n, -1)`` (AlexNet-era heads)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.gate = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(2, 1, 7, padding=3)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        s = torch.cat([y.mean(dim=1, keepdim=True), y.amax(dim=1, keepdim=True)], dim=1)
        y = F.max_pool2d(y * torch.sigmoid(self.gate(s)), 2) - y.amin((2, 3), keepdim=True)
        return self.fc(y.view(y.size(0), -1))


def spatial_gate_view_head() -> nn.Module:
    return SpatialGateViewHead()


class DFLHead(nn.Module):
    """A detector's distribution-focal-loss decode: box logits viewed as (b, 4, bins, a),
    the bins moved to dim 1 by the model's own transpose, softmax over them, and a fixed 1x1
    convolution taking the expectation (YOLOv8's DFL)."""

    def __init__(self, bins: int = 8) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.box = nn.Conv2d(8, 4 * bins, 1)
        self.proj = nn.Conv2d(bins, 1, 1, bias=False)
        self.proj.weight.data[:] = torch.arange(bins, dtype=torch.float).view(1, bins, 1, 1)
        self.bins = bins

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        box = self.box(torch.relu(self.stem(x))).flatten(2)
        b, _, a = box.shape
        dist = box.view(b, 4, self.bins, a).transpose(2, 1).softmax(1)
        return self.proj(dist).view(b, 4, a)


class AttentionNorm(nn.Module):
    """A diffusion UNet's self-attention over a conv feature map, its residual add, and the
    GroupNorm right after it: ``transpose(-1, -2).reshape(b, c, h, w)`` hands the residual
    stream back in the model's NCHW view."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.qkv = nn.Linear(channels, 3 * channels)
        self.norm = nn.GroupNorm(2, channels)
        self.out = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        b, c, hh, ww = h.shape
        seq = h.reshape(b, c, hh * ww).transpose(1, 2)
        q, k, v = self.qkv(seq).chunk(3, dim=-1)
        attn = torch.softmax(q @ k.transpose(-1, -2) / c ** 0.5, dim=-1) @ v
        h = h + attn.transpose(-1, -2).reshape(b, c, hh, ww)
        return self.out(torch.relu(self.norm(h)))


class ConvTransposeNet(nn.Module):
    """conv → ConvTranspose2d (k3, s2, p1, output_padding 1) → conv: a segmentation head's
    learned 2x upsampling."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.up = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.up(torch.relu(self.conv(x)))))


def dfl_head() -> nn.Module:
    torch.manual_seed(0)
    return DFLHead().eval()


def attention_norm() -> nn.Module:
    torch.manual_seed(0)
    return AttentionNorm().eval()


def conv_transpose_net() -> nn.Module:
    torch.manual_seed(0)
    return ConvTransposeNet().eval()


def deep_bn(layers: int = 12) -> nn.Module:
    """conv → BatchNorm → ReLU, `layers` deep, as built: PyTorch's default init shrinks the
    signal at every layer and the fresh BatchNorms do not undo it, so by 12 layers the
    output is the biases' (changes by RMS ~1e-7 under another input, RMS ~0.1)."""
    torch.manual_seed(0)
    body: list[nn.Module] = []
    c = 3
    for _ in range(layers):
        body += [nn.Conv2d(c, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()]
        c = 8
    return nn.Sequential(*body, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)).eval()


class NormalizesInPlace(nn.Module):
    """Normalizes its input in place, as preprocessing code often does, then conv → ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = ConvReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.sub_(0.5).div_(0.25)
        return self.inner(x)


def normalizes_in_place() -> nn.Module:
    return NormalizesInPlace()


class ModelOutput(collections.OrderedDict):  # type: ignore[type-arg]
    """A Hugging Face ``ModelOutput`` as a model library without transformers writes it: a
    dict subclass torch.export does not know."""


@dataclasses.dataclass
class Detections:
    scores: torch.Tensor
    boxes: torch.Tensor
    extra: torch.Tensor | None = None


class Structured(nn.Module):
    """conv → ReLU, its result returned in a structure of `kind` (dict, ModelOutput,
    dataclass, nested, None, a number among the tensors): outputs named ``logits``,
    ``1.k``…"""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.inner = ConvReLU()

    def forward(self, x: torch.Tensor) -> Any:
        y = self.inner(x)
        if self.kind == "dict":
            return {"logits": y, "aux": None, "pred_boxes": y.mean(dim=(2, 3))}
        if self.kind == "model_output":
            return ModelOutput(logits=y, pred_boxes=y * 2)
        if self.kind == "dataclass":
            return Detections(y.amax(dim=1), y[:, :2])
        if self.kind == "nested":
            return y, [y.sum(dim=1), {"k": y * 3}], None
        if self.kind == "none":
            return None
        return y, 3  # "number"


def returns_dict() -> nn.Module:
    return Structured("dict")


def returns_model_output() -> nn.Module:
    return Structured("model_output")


def returns_dataclass() -> nn.Module:
    return Structured("dataclass")


def returns_nested() -> nn.Module:
    return Structured("nested")


def returns_none() -> nn.Module:
    return Structured("none")


def returns_a_number() -> nn.Module:
    return Structured("number")


class PooledBatchNorm(nn.Module):
    """conv → BatchNorm → ReLU → global pool → linear → BatchNorm1d: the last BatchNorm sees
    one value per channel at batch 1 (a classifier head with a BN neck)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 6),
                                  nn.BatchNorm1d(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def pooled_batchnorm() -> nn.Module:
    return PooledBatchNorm().eval()


class SmallStdTransformer(nn.Module):
    """A patch embedding and two pre-norm transformer blocks (LayerNorm, no BatchNorm),
    initialised as transformers are (std 0.02): its output barely depends on its input."""

    def __init__(self, dim: int = 64, depth: int = 2) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, 4, 2 * dim, dropout=0.0, batch_first=True,
                                       norm_first=True) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)
        for m in self.modules():
            for name, p in m.named_parameters(recurse=False):
                if p.dim() >= 2:
                    nn.init.trunc_normal_(p, std=0.02)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(dim=1))


def small_std_transformer() -> nn.Module:
    return SmallStdTransformer().eval()


class TopKHead(nn.Module):
    """An NMS-free detector's head in small (YOLOv10's): per-position class scores and boxes
    from convolutions, the top `k` positions kept, one row (x1, y1, x2, y2, score, class) each.
    Scores rounded to 1/256 tie as random weights make them near-tie: which of the tied
    positions come first, and which make the cut, is the implementation's choice."""

    def __init__(self, k: int = 24) -> None:
        super().__init__()
        self.k = k
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.cls = nn.Conv2d(8, 3, 1)
        self.box = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = F.relu(self.stem(x))
        cls = torch.round(self.cls(f).flatten(2) * 256) / 256  # (n, classes, positions)
        box = self.box(f).flatten(2).transpose(1, 2)  # (n, positions, 4)
        best, label = cls.max(dim=1)
        score, index = best.topk(self.k, dim=1)
        boxes = box.gather(1, index.unsqueeze(-1).expand(-1, -1, 4))
        return torch.cat([boxes, score.unsqueeze(-1),
                          label.gather(1, index).unsqueeze(-1).float()], dim=-1)


def topk_head() -> nn.Module:
    return TopKHead()


class PadAfterPool(nn.Module):
    """A ceil-mode average pool whose output is padded (ResNet-D's shortcut, then an
    Inception-style ``F.pad`` before a max pool): FuseOps makes the pool and the pad one
    kernel whose output is larger than the pool's."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.down = nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False)
        self.head = nn.Conv2d(8, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.pad(self.down(torch.relu(self.conv(x))), (0, 1, 0, 1))
        return self.head(F.max_pool2d(x, 3, 2, ceil_mode=True))


def pad_after_pool() -> nn.Module:
    torch.manual_seed(0)
    return PadAfterPool().eval()


class TiledPatches(nn.Module):
    """MobileViTV2's global block in miniature: ``F.unfold`` into 2×2 tiling patches, a
    GroupNorm and 1×1 convs over (B, C, pixels-in-patch, patches), ``F.fold`` back."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.norm = nn.GroupNorm(1, c)
        self.mix = nn.Conv2d(c, c, 1)
        self.proj = nn.Conv2d(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.stem(x)
        b, c, h, w = f.shape
        p = F.unfold(f, kernel_size=2, stride=2).reshape(b, c, 4, -1)
        p = p + self.mix(self.norm(p))
        f = F.fold(p.reshape(b, c * 4, -1), output_size=(h, w), kernel_size=2, stride=2)
        return self.proj(f)


def tiled_patches() -> nn.Module:
    torch.manual_seed(0)
    return TiledPatches().eval()


class TopkThenPad(nn.Module):
    """A computation no other layout does without a transpose (a running sum over the map
    flattened in NCHW order) whose result is padded before the next conv: the pad is
    carried by the cleanup, the sum is what stays NCHW. (It was the channels' top k, which
    has a layout rule now.)"""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        y = y.flatten(1).cumsum(-1).view_as(y) / y[0].numel()  # over C·H·W in that order
        return self.b(F.pad(y, (1, 1, 1, 1)))


def topk_then_pad() -> nn.Module:
    torch.manual_seed(0)
    return TopkThenPad().eval()



class TalkingHeads(nn.Module):
    """CaiT's talking-heads attention: a Linear over the heads on each side of the softmax
    (the scores permuted heads-last, projected, permuted back), so it is not attention's
    computation and its matmuls stay; with `residual`, a projection and a residual add."""

    def __init__(self, residual: bool = True) -> None:
        super().__init__()
        self.residual = residual
        self.qkv, self.proj_l, self.proj_w = nn.Linear(8, 24), nn.Linear(2, 2), nn.Linear(2, 2)
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
        a = (q * 0.5) @ k.transpose(-2, -1)
        a = self.proj_l(a.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).softmax(-1)
        a = self.proj_w(a.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        out = (a @ v).transpose(1, 2).reshape(b, n, c)
        return x + self.proj(out) if self.residual else out


class MaskedOutput(nn.Module):
    """A detector's tail: masks of a convolution's sigmoid, combined (``all`` over the
    channels, a product, a maximum) and applied with ``where``, returned NCHW."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x).sigmoid()
        valid = ((y > 0.01) * (y < 0.99)).all(1, keepdim=True)
        return torch.where(valid, y, torch.zeros_like(y)) + torch.maximum(y > 0.3, y < 0.2)


def masked_output() -> nn.Module:
    return MaskedOutput()


class RescaledOutput(nn.Module):
    """A segmentation tail: logits rescaled by a factor whose output size is rounded (the
    resize is a gather with weights along each axis), softmax over the classes, a crop."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.interpolate(self.conv(x), scale_factor=1.4, mode="bilinear")
        return y.softmax(1)[:, :, 1:-1, 2:]


def rescaled_output() -> nn.Module:
    return RescaledOutput()


class CountingDown(nn.Module):
    """Ranges counting down by an integer step, as models write them: a reversed channel
    index, a descending position ramp in float (Transformer-XL's ``arange(klen - 1, -1,
    -1.0)``, here with an integer step and a float dtype), every other row backwards."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.out = nn.Conv2d(6, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y = y[:, torch.arange(y.shape[1] - 1, -1, -1)]  # channels reversed
        y = y + torch.arange(y.shape[3] - 1, -1, -1, dtype=torch.float32) * 0.1
        y = y[:, :, torch.arange(y.shape[2] - 1, -1, -2)]
        return self.out(y) + torch.arange(x.shape[0] - 1, -1, -1)[:, None, None, None]


def counting_down() -> nn.Module:
    return CountingDown()
