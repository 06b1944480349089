"""Small models for the quantized-model tests (tests/test_quant.py): modules torch.export and
PT2E made, which refuse ``eval()``, and a model whose own ``eval()`` is broken."""

from __future__ import annotations

import torch
from torch import nn

SHAPE = (1, 3, 16, 16)


class Block(nn.Module):
    """conv → ReLU6 → depthwise conv → Hardswish, a residual add, a concat, max and global
    average pooling: the ops a quantized mobile network is made of."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = nn.Conv2d(16, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.relu6(self.conv(x))
        z = nn.functional.hardswish(self.dw(y)) + y
        z = self.pw(torch.cat([z, y], 1))
        return torch.flatten(nn.functional.adaptive_avg_pool2d(
            nn.functional.max_pool2d(z, 2), 1), 1)


def exported_module() -> nn.Module:
    """``ExportedProgram.module()``: refuses eval() ("not supported yet")."""
    return torch.export.export(Block().eval(), (torch.randn(SHAPE),)).module()


def exported_program() -> torch.export.ExportedProgram:
    return torch.export.export(Block().eval(), (torch.randn(SHAPE),))


def pt2e_block() -> nn.Module:
    """`Block` quantized as the README shows: PT2E with the x86 quantizer, calibrated on a few
    seeded batches; returned as convert_pt2e made it."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    quantizer = X86InductorQuantizer()
    quantizer.set_global(get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(exported_module(), quantizer)  # type: ignore[arg-type]
    for _ in range(3):
        prepared(torch.randn(SHAPE))
    return convert_pt2e(prepared)


class BrokenEval(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def train(self, mode: bool = True) -> BrokenEval:
        raise RuntimeError("\n    this model cannot leave training mode\n    (second line)")


def broken_eval() -> nn.Module:
    return BrokenEval()


class _FloatHead(nn.Module):
    """A quantized body and float ops after its last dequantize (as Arm's quantizer leaves a
    residual add and the pool): the output is off any grid."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) * 0.5 + 1.0


def pt2e_float_head() -> nn.Module:
    return _FloatHead(pt2e_block())


# --------------------------------------------------------------------------------------------
# The quantizers teams use, on one small network with a Linear head (integer_compute)
# --------------------------------------------------------------------------------------------
class Classifier(nn.Module):
    """`Block` (conv, depthwise conv, Hardswish, add, concat, pooling) and a Linear head:
    every product a quantized mobile classifier has."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))


def _quantized(quantizer: object, qat: bool = False) -> nn.Module:
    """`Classifier` through PT2E with `quantizer`: calibrated on three seeded batches
    (``prepare_qat_pt2e`` and three fake-quantized forward passes in training mode for QAT),
    converted."""
    from torchao.quantization.pt2e.quantize_pt2e import (
        convert_pt2e,
        prepare_pt2e,
        prepare_qat_pt2e,
    )

    model = Classifier().eval()
    exported = torch.export.export(model, (torch.randn(SHAPE),)).module()
    prepare = prepare_qat_pt2e if qat else prepare_pt2e
    prepared = prepare(exported, quantizer)  # type: ignore[operator]
    with torch.no_grad():
        for _ in range(3):
            prepared(torch.randn(SHAPE))
    return convert_pt2e(prepared)


def _x86_quantizer(qat: bool = False) -> object:
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    q = X86InductorQuantizer()
    q.set_global(get_default_x86_inductor_quantization_config(is_qat=qat))
    return q


def x86_classifier() -> nn.Module:
    """torchao's X86InductorQuantizer: uint8 activations, int8 weights per output channel."""
    return _quantized(_x86_quantizer())


def arm_classifier() -> nn.Module:
    """torchao's ArmInductorQuantizer: int8 activations, int8 weights per tensor."""
    from torchao.quantization.pt2e.quantizer.arm_inductor_quantizer import (
        ArmInductorQuantizer,
        get_default_arm_inductor_quantization_config,
    )

    q = ArmInductorQuantizer()
    q.set_global(get_default_arm_inductor_quantization_config())
    return _quantized(q)


def xnnpack_classifier() -> nn.Module:
    """An XNNPACK-style config: int8 activations (asymmetric), int8 weights symmetric per
    output channel (torchao's reference XNNPACKQuantizer)."""
    from torchao.testing.pt2e._xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    q = XNNPACKQuantizer()
    q.set_global(get_symmetric_quantization_config(is_per_channel=True))
    return _quantized(q)


def qat_classifier() -> nn.Module:
    """A QAT-converted model: the x86 quantizer's QAT config, fake-quantized passes in
    training mode, then converted."""
    return _quantized(_x86_quantizer(qat=True), qat=True)


def dynamic_classifier() -> nn.Module:
    """Dynamic quantization (``is_dynamic=True``): each Linear's activation scale and zero
    point are computed at run time (``choose_qparams.tensor``) from the batch it gets."""
    from torchao.testing.pt2e._xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    q = XNNPACKQuantizer()
    q.set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
    return _quantized(q)


class _TokenMixer(nn.Module):
    """MLP-Mixer's token mixing in small: a Linear over the tokens (the activation transposed,
    mixed, transposed back) and a Linear over the channels; an NCHW conv stem to tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 4, 4)
        self.tokens = nn.Linear(16, 16)
        self.channels = nn.Linear(8, 8)
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.stem(x).flatten(2).transpose(1, 2)  # (B, 16 tokens, 8)
        t = t + self.tokens(t.transpose(1, 2)).transpose(1, 2)
        t = t + self.channels(t)
        return self.head(t.mean(1))


def _x86(model: nn.Module) -> nn.Module:
    """`model` through PT2E with the x86 quantizer, calibrated on three random batches."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    exported = torch.export.export(model.eval(), (torch.randn(SHAPE),)).module()
    prepared = prepare_pt2e(exported, _x86_quantizer())  # type: ignore[arg-type]
    with torch.no_grad():
        for _ in range(3):
            prepared(torch.randn(SHAPE))
    return convert_pt2e(prepared)


def token_mixer() -> nn.Module:
    """`_TokenMixer` through PT2E with the x86 quantizer."""
    return _x86(_TokenMixer())


class _TalkingHeads(nn.Module):
    """CaiT's talking heads in small: scores of 2 heads over 16 conv tokens, a Linear over
    the heads of the permuted scores (``proj_l(attn.permute(0, 2, 3, 1)).permute(0, 3, 1,
    2)``, a matmul of a 4-D input that export spells with the weight expanded to the batch),
    the softmax, a Linear over the heads again, the values."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 4, 4)
        self.qkv, self.head = nn.Linear(8, 24), nn.Linear(8, 5)
        self.proj_l, self.proj_w = nn.Linear(2, 2), nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.stem(x).flatten(2).transpose(1, 2)  # (B, 16 tokens, 8)
        b, n, c = t.shape
        q, k, v = self.qkv(t).reshape(b, n, 3, 2, c // 2).permute(2, 0, 3, 1, 4)
        attn = q @ k.transpose(-2, -1) * (c // 2) ** -0.5
        attn = self.proj_l(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).softmax(dim=-1)
        attn = self.proj_w(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.head((attn @ v).transpose(1, 2).reshape(b, n, c).mean(1))


def talking_heads() -> nn.Module:
    """`_TalkingHeads` through PT2E with the x86 quantizer."""
    return _x86(_TalkingHeads())


class _Upsampler(nn.Module):
    """A UNet's decoder step in small: a strided conv down, a ConvTranspose2d up, a conv."""

    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Conv2d(3, 8, 3, 2, 1)
        self.up = nn.ConvTranspose2d(8, 8, 2, 2)
        self.out = nn.Conv2d(8, 4, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.up(torch.relu(self.down(x)))))


def upsampler() -> nn.Module:
    """`_Upsampler` through PT2E with an XNNPACK-style per-tensor config (which, unlike the
    x86 quantizer, quantizes the transposed convolution: int8 activations, zero point -128
    after a ReLU)."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    q = XNNPACKQuantizer()
    q.set_global(get_symmetric_quantization_config(is_per_channel=False))
    exported = torch.export.export(_Upsampler().eval(), (torch.randn(SHAPE),)).module()
    prepared = prepare_pt2e(exported, q)  # type: ignore[arg-type]
    with torch.no_grad():
        for _ in range(3):
            prepared(torch.randn(SHAPE))
    return convert_pt2e(prepared)


class FlattenHead(nn.Module):
    """VGG's classifier in small: conv, ReLU, max pool twice, then ``torch.flatten`` of the
    4×4 map (C-major features) into a Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.fc = nn.Linear(8 * 16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))


def _x86_quantized(model: nn.Module, shape: tuple[int, ...] = SHAPE) -> nn.Module:
    """`model` through PT2E with the x86 quantizer, seeded, calibrated on three batches."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    torch.manual_seed(0)
    exported = torch.export.export(model.eval(), (torch.randn(shape),)).module()
    prepared = prepare_pt2e(exported, _x86_quantizer())  # type: ignore[arg-type]
    with torch.no_grad():
        for _ in range(3):
            prepared(torch.randn(shape))
    return convert_pt2e(prepared)


def flatten_head() -> nn.Module:
    """`FlattenHead` quantized (the pools' indices, the QDQ pairs between the pool, the
    flatten and the Linear)."""
    return _x86_quantized(FlattenHead())


class NormHead(nn.Module):
    """DETR's decoder end in small: tokens sequence-first ``(N, B, C)``, a LayerNorm, then
    ``transpose(0, 1)`` to batch-first (with a batch of one, a view) into a Linear head."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 4, 4)
        self.norm = nn.LayerNorm(channels)
        self.head = nn.Linear(channels, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.stem(x).flatten(2).permute(2, 0, 1)  # (H/4 · W/4 tokens, B, channels)
        return self.head(self.norm(t).transpose(0, 1))


def norm_head(channels: int = 8, size: int = 16) -> nn.Module:
    """`NormHead` quantized (on `size` x `size` inputs): the LayerNorm's output quantized for
    the head after the view."""
    return _x86_quantized(NormHead(channels), (1, 3, size, size))


class WideConvs(nn.Module):
    """Two 3x3 convolutions of 64 channels (a ResNet stage in small): integer window sums long
    enough for `cl_validate.compile.integer_chunks` to cut in chunks."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 64, 3, 2, padding=1), nn.ReLU(),
                                  nn.Conv2d(64, 64, 3, padding=1), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def wide_convs() -> nn.Module:
    """`WideConvs` quantized (x86): the second convolution sums 3 x 3 x 64 int8 products."""
    return _x86_quantized(WideConvs())


class ShuffleUnit(nn.Module):
    """ShuffleNetV2's downsampling unit: two branches (each ending in a convolution and a
    ReLU) concatenated, then the channel shuffle (``view(B, 2, C/2, H, W).transpose(1, 2)
    .reshape``); PT2E quantizes the concat's output, so its quantize-dequantize pair stands
    between the concat and the shuffle."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.left = nn.Sequential(nn.Conv2d(8, 8, 3, 2, 1, groups=8), nn.Conv2d(8, 6, 1),
                                  nn.ReLU())
        self.right = nn.Sequential(nn.Conv2d(8, 6, 1), nn.ReLU(),
                                   nn.Conv2d(6, 6, 3, 2, 1, groups=6), nn.Conv2d(6, 6, 1),
                                   nn.ReLU())
        self.head = nn.Sequential(nn.Conv2d(12, 12, 1), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = torch.cat((self.left(x), self.right(x)), 1)
        n, c, h, w = x.shape
        x = x.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
        return self.head(x).mean((2, 3))


def shuffle_unit() -> nn.Module:
    """`ShuffleUnit` quantized (x86): the concat's pair stands inside the shuffle."""
    return _x86_quantized(ShuffleUnit())


def involution_block() -> nn.Module:
    """tiny_models' `InvolutionBlock` quantized (x86), its BatchNorm left out: a quantize
    follows the involution's view back to channels."""
    from tiny_models import InvolutionBlock

    block = InvolutionBlock()
    # Without its BatchNorm: a BatchNorm that follows no convolution makes convert_pt2e's
    # QAT conv-BN fold export 96 pattern graphs (30-90 s) for a graph that holds none.
    block.norm = nn.Identity()  # type: ignore[assignment]
    return _x86_quantized(block)


class FocusStem(nn.Module):
    """YOLOv5's Focus: the input's four pixel phases (strided slices) concatenated on the
    channels, then a convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(12, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.cat([x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2],
                                    x[..., 1::2, 1::2]], 1)).mean((2, 3))


def focus_stem() -> nn.Module:
    """`FocusStem` quantized: a quantize after the concat."""
    return _x86_quantized(FocusStem())


class QDQConv1d(nn.Module):
    """QDQ Conv1d as PT2E writes it (the x86 quantizer's uint8 activations with a zero
    point, int8 weights per channel), twice: a dilated causal one (``F.pad`` on the left)
    and one with its own padding, on the image's first rows as a sequence."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = nn.ParameterList()
        for shape in ((8, 12, 3), (8, 8, 3)):
            w = torch.randn(*shape) * 0.3
            scale = w.abs().amax(dim=(1, 2)) / 127.0
            self.register_buffer(f"q{len(self.w)}", torch.clamp(
                torch.round(w / scale[:, None, None]), -128, 127).to(torch.int8))
            self.register_buffer(f"s{len(self.w)}", scale)
            self.w.append(nn.Parameter(torch.randn(shape[0]) * 0.1))  # the bias
        self.register_buffer("zeros", torch.zeros(8, dtype=torch.int64))

    def _qdq(self, x: torch.Tensor, scale: float, zero: int) -> torch.Tensor:
        q = torch.ops.quantized_decomposed
        xq = q.quantize_per_tensor.default(x, scale, zero, 0, 255, torch.uint8)
        return q.dequantize_per_tensor.default(xq, scale, zero, 0, 255, torch.uint8)

    def _weight(self, k: int) -> torch.Tensor:
        return torch.ops.quantized_decomposed.dequantize_per_channel.default(
            getattr(self, f"q{k}"), getattr(self, f"s{k}"), self.zeros, 0, -128, 127,
            torch.int8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self._qdq(x[:, :, :4].reshape(x.shape[0], 12, x.shape[-1]), 0.02, 128)
        h = nn.functional.conv1d(nn.functional.pad(h, (4, 0)), self._weight(0), self.w[0],
                                 dilation=2)
        h = self._qdq(torch.relu(h), 0.01, 3)
        h = nn.functional.conv1d(h, self._weight(1), self.w[1], padding=1)
        return self._qdq(h, 0.02, 128)


def qdq_conv1d() -> nn.Module:
    import torch.ao.quantization.fx._decomposed  # noqa: F401  # lazy: registers the QDQ ops

    return QDQConv1d().eval()
