"""A QDQ int8 convolution, as PT2E quantization exports it (the forum's quantized case).

Layout feature: the convolution sits between quantize/dequantize pairs on real int8 tensors
(activations quantized per tensor, weights stored as int8 and dequantized per output
channel), so ConvertLayout must carry NHWC through the QDQ ops and the int8 weight's
layout change must fold.
"""

from __future__ import annotations

import torch
import torch.ao.quantization.fx._decomposed  # registers torch.ops.quantized_decomposed
from torch import nn

_Q = torch.ops.quantized_decomposed


class QDQConv(nn.Module):
    """quantize → dequantize → Conv2d(int8 weights, per-channel) → quantize → dequantize."""

    def __init__(self, in_channels: int = 3, out_channels: int = 32, stride: int = 2,
                 in_scale: float = 1.0 / 64, out_scale: float = 1.0 / 16) -> None:
        super().__init__()
        w = torch.randn(out_channels, in_channels, 3, 3) * 0.2
        scales = w.abs().amax(dim=(1, 2, 3)) / 127.0
        self.register_buffer("w_int8", torch.clamp(
            torch.round(w / scales[:, None, None, None]), -128, 127).to(torch.int8))
        self.register_buffer("w_scale", scales)
        self.register_buffer("w_zero", torch.zeros(out_channels, dtype=torch.int64))
        self.bias = nn.Parameter(torch.randn(out_channels) * 0.1)
        self.stride, self.in_scale, self.out_scale = stride, in_scale, out_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xq = _Q.quantize_per_tensor.default(x, self.in_scale, 0, -128, 127, torch.int8)
        xd = _Q.dequantize_per_tensor.default(xq, self.in_scale, 0, -128, 127, torch.int8)
        wd = _Q.dequantize_per_channel.default(self.w_int8, self.w_scale, self.w_zero, 0, -128,
                                               127, torch.int8)
        y = nn.functional.conv2d(xd, wd, self.bias, stride=self.stride, padding=1)
        yq = _Q.quantize_per_tensor.default(y, self.out_scale, 0, -128, 127, torch.int8)
        return _Q.dequantize_per_tensor.default(yq, self.out_scale, 0, -128, 127, torch.int8)


def qdq_conv(in_channels: int = 3, out_channels: int = 32) -> nn.Module:
    return QDQConv(in_channels, out_channels).eval()
