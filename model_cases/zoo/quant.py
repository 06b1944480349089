"""Whole networks quantized as teams quantize them: PyTorch 2's export-based flow (PT2E).

The factory is the whole recipe, as the README shows it: build the float model (seeded by the
case), ``torch.export`` it, ``prepare_pt2e`` with a quantizer, calibrate on a few seeded
batches, ``convert_pt2e``. What comes back is the converted ``GraphModule`` as it is (it
refuses ``eval()``; cl_validate takes it unchanged).

Layout feature: quantize/dequantize pairs on every activation edge, per-channel (x86) or
per-tensor (Arm) int8 weights, around convolutions, residual adds, max/avg pooling, depthwise
convolutions and ReLU6/Hardswish: ConvertLayout must carry NHWC through every QDQ chain and the
int8 weights' layout changes must fold.

The networks end in global average pooling (a backbone's embedding). x86's quantizer
quantizes the pooled output (it has a quantization step); Arm's leaves it in float.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
from torchao.quantization.pt2e.quantizer.arm_inductor_quantizer import (
    ArmInductorQuantizer,
    get_default_arm_inductor_quantization_config,
)
from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
    X86InductorQuantizer,
    get_default_x86_inductor_quantization_config,
)

from zoo._common import finalize
from zoo.deploy import SPPF, C2f, ConvSiLU
from zoo.mobilenet import MobileNetV2
from zoo.resnet import BasicBlock, ResNet

#: calibration batches: enough for the histogram observers to settle on this input range
CALIBRATION_BATCHES = 4


def pt2e_quantize(model: nn.Module, example: torch.Tensor, quantizer: object,
                  batches: int = CALIBRATION_BATCHES) -> nn.Module:
    """`model` (in eval mode) quantized by PT2E with `quantizer`, calibrated on `batches`
    random batches shaped like `example` (drawn from the case's seed).

    Exported strict (TorchDynamo): the quantizers find convolutions and Linears by the
    ``source_fn_stack`` each node carries, which only a strict export records. torch 2.13's
    ``get_source_partitions`` falls back to ``nn_module_stack`` for a non-strict export;
    torch 2.11's does not, finds nothing to annotate, and ``convert_pt2e`` returns the float
    model without a quantize in it. Strict, both versions quantize alike."""
    exported = torch.export.export(model, (example,), strict=True).module()
    prepared = prepare_pt2e(exported, quantizer)  # type: ignore[arg-type]
    with torch.no_grad():
        for _ in range(batches):
            prepared(torch.randn_like(example))
    return convert_pt2e(prepared)


def _x86() -> X86InductorQuantizer:
    """uint8 activations, int8 weights per output channel."""
    q = X86InductorQuantizer()
    q.set_global(get_default_x86_inductor_quantization_config())
    return q


def _arm() -> ArmInductorQuantizer:
    """int8 activations, int8 weights per tensor."""
    q = ArmInductorQuantizer()
    q.set_global(get_default_arm_inductor_quantization_config())
    return q


class _Backbone(nn.Module):
    """A classifier's feature extractor and its global average pool: the embedding."""

    def __init__(self, features: Callable[[torch.Tensor], torch.Tensor],
                 owner: nn.Module) -> None:
        super().__init__()
        self.net = owner
        self._features = features
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.pool(self._features(x)), 1)


def _resnet_features(net: ResNet) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda x: net.layer4(net.layer3(net.layer2(net.layer1(net.stem(x)))))


def quant_resnet(size: int = 64, width: int = 16) -> nn.Module:
    """ResNet-18 layout (residual adds, max pool) quantized by PT2E for Arm: int8 activations,
    int8 weights per tensor. (x86's quantizer refuses this block: its ReLU module is called
    twice, "Input partition has more than one output node".)"""
    net = finalize(ResNet(BasicBlock, (2, 2, 2, 2), 10, width), (4, 3, size, size))
    assert isinstance(net, ResNet)
    model = _Backbone(_resnet_features(net), net).eval()
    return pt2e_quantize(model, torch.randn(1, 3, size, size), _arm())


def quant_mobilenet_v2(size: int = 64, width_mult: float = 0.5) -> nn.Module:
    """MobileNetV2 (inverted residuals, depthwise, ReLU6) quantized by PT2E for x86: uint8
    activations, int8 weights per output channel (the issue's report)."""
    net = finalize(MobileNetV2(width_mult, 10), (4, 3, size, size))
    assert isinstance(net, MobileNetV2)
    model = _Backbone(net.features, net).eval()
    return pt2e_quantize(model, torch.randn(1, 3, size, size), _x86())


class _YoloBackbone(nn.Sequential):
    """YOLOv8's backbone in small: strided ConvSiLU stems, C2f stages (chunk, bottlenecks
    with shortcuts, concat) and SPPF (chained max pools, concat); a P4-stride feature map
    out."""

    def __init__(self, width: int = 16) -> None:
        w = width
        super().__init__(ConvSiLU(3, w, 3, 2), ConvSiLU(w, 2 * w, 3, 2), C2f(2 * w, 2 * w),
                         ConvSiLU(2 * w, 4 * w, 3, 2), C2f(4 * w, 4 * w),
                         SPPF(4 * w, 4 * w))


def quant_yolo(size: int = 64, width: int = 16) -> nn.Module:
    """A YOLOv8-style backbone (SiLU, C2f, SPPF) quantized by PT2E for x86: uint8
    activations, int8 weights per output channel; BatchNorms folded into the convolutions by
    convert_pt2e. SiLU is not one of the x86 quantizer's ops: it runs in float between a
    dequantize and a quantize, the convolutions around it in integers."""
    net = finalize(_YoloBackbone(width), (4, 3, size, size)).eval()
    return pt2e_quantize(net, torch.randn(1, 3, size, size), _x86())


class _ViTBlock(nn.Module):
    """A pre-norm ViT encoder block: LayerNorm, multi-head attention (a qkv Linear, SDPA, an
    output projection), LayerNorm, a GELU MLP; tokens (B, N, C) in and out."""

    def __init__(self, dim: int = 192, heads: int = 3, mlp: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, mlp * dim), nn.Linear(mlp * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(self.n1(x)).reshape(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, c))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.n2(x))))


def quant_vit_block(tokens: int = 65, dim: int = 192) -> nn.Module:
    """A ViT-Ti encoder block (65 tokens of 192, 3 heads) quantized by PT2E for x86: the
    four Linears (qkv, projection, MLP) read uint8 activations and int8 weights per output
    channel; LayerNorm, the attention and GELU run in float between them."""
    block = _ViTBlock(dim).eval()
    return pt2e_quantize(block, torch.randn(1, tokens, dim), _x86())
