"""MergeFilterChannels: a depthwise filter along one axis, run on a permuted tensor (transformers'
Nyströmformer convolves its attention values, ``(B, S, heads, head_dim)`` read as
``(B, heads, S, head_dim)``, with a ``(k, 1)`` kernel per head), is the depthwise convolution
of the tensor's merged ``(heads, head_dim)`` channels where it lies: the program has the
transforms of the model written that way by hand, and the same values."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from tvm.script import ir as I
from tvm.script import relax as R

from cl_validate.compile.passes import MergeFilterChannels
from cl_validate.ir import bindings, known_shape, op_name
from tests.passes.conftest import compile_nhwc

pytestmark = pytest.mark.compile


class ConvOverHeads(nn.Module):
    """Patch tokens, a value projection viewed as heads, a depthwise conv over the heads with a
    kernel along the sequence (`along_last`: (1, k) over ``permute(0, 2, 3, 1)``, else (k, 1)
    over ``permute(0, 2, 1, 3)``), added to the queries' heads, back to tokens. `by_hand`:
    the same convolution written on the merged channels."""

    def __init__(self, along_last: bool = False, by_hand: bool = False, stride: int = 1,
                 dilation: int = 1, heads: int = 2, dim: int = 8, k: int = 3) -> None:
        super().__init__()
        self.heads, self.along_last, self.by_hand = heads, along_last, by_hand
        self.patch = nn.Conv2d(3, dim, 2, 2)
        self.q, self.v, self.out = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        size, pad = (1, k) if along_last else (k, 1), dilation * (k // 2)
        self.stride = (1, stride) if along_last else (stride, 1)
        self.dilation = (1, dilation) if along_last else (dilation, 1)
        self.padding = (0, pad) if along_last else (pad, 0)
        self.conv = nn.Conv2d(heads, heads, size, self.stride, self.padding, self.dilation,
                              groups=heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)  # (B, S, C)
        b, s, c = t.shape
        h, d = self.heads, c // self.heads
        v = self.v(t).view(b, s, h, d)
        q = self.q(t).view(b, s, h, d).permute(0, 2, 1, 3)  # (B, H, S, D)
        if self.by_hand:  # (B, S, 1, H·D) channels-first: the merged channels
            w = self.conv.weight.reshape(h, 1, -1, 1).repeat_interleave(d, 0)
            f = F.conv2d(v.reshape(b, s, 1, h * d).permute(0, 3, 1, 2), w,
                         self.conv.bias.repeat_interleave(d), self.stride[::-1] if
                         self.along_last else self.stride, self.padding[::-1] if
                         self.along_last else self.padding, self.dilation[::-1] if
                         self.along_last else self.dilation, groups=h * d)
            f = f.permute(0, 2, 3, 1).reshape(b, -1, h, d).permute(0, 2, 1, 3)
        elif self.along_last:
            f = self.conv(v.permute(0, 2, 3, 1)).transpose(2, 3)  # (B, H, D, S) → (B, H, S, D)
        else:
            f = self.conv(v.permute(0, 2, 1, 3))
        y = q[:, :, : f.shape[2]] + f
        return self.out(y.permute(0, 2, 1, 3).reshape(b, -1, c))


def _convs(compiled) -> list[tuple[int, tuple[int, ...] | None]]:
    return [(int(b.value.attrs.groups), known_shape(b.value.args[0]))
            for b in bindings(compiled.stage("cleanup").mod["main"])
            if op_name(b.value) == "relax.nn.conv2d"]


@pytest.mark.parametrize("along_last, stride, dilation", [
    (False, 1, 1), (True, 1, 1), (False, 2, 1), (True, 1, 2)],
    ids=["k-by-1", "1-by-k", "strided", "dilated"])
def test_a_filter_over_heads_costs_what_the_merged_channels_cost(tmp_path, along_last, stride,
                                                                 dilation) -> None:
    """The same values as PyTorch's (`compile_nhwc` checks them), the transforms of the model
    written on the merged channels by hand, and the convolution a depthwise NHWC one over
    the (B, S, 1, H·D) view of the values."""
    shape = (1, 3, 16, 16)
    compiled, kernels = compile_nhwc(
        tmp_path, lambda: ConvOverHeads(along_last, False, stride, dilation), shape,
        rtol=1e-5, atol=1e-5)
    _, by_hand = compile_nhwc(
        tmp_path, lambda: ConvOverHeads(along_last, True, stride, dilation), shape,
        rtol=1e-5, atol=1e-5)
    assert len(kernels.runtime_transforms) == len(by_hand.runtime_transforms), \
        kernels.render() + "\n" + by_hand.render()
    assert (8, (1, 64, 1, 8)) in _convs(compiled), _convs(compiled)


X = R.Tensor((1, 6, 2, 4), "float32")  # (B, S, C, U)


def _merged(before) -> list:
    after = MergeFilterChannels()(before)["main"]
    return [b.value for b in bindings(after) if op_name(b.value) == "relax.nn.conv2d"]


def test_the_convolution_reads_the_merged_channels() -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(v: X, w: R.Tensor((2, 1, 3, 1), "float32")) -> R.Tensor((1, 2, 6, 4),
                                                                         "float32"):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                x = R.permute_dims(v, [0, 2, 1, 3])
                gv = R.nn.conv2d(x, w, padding=[1, 0, 1, 0], groups=2)
                R.output(gv)
            return gv

    (conv,) = _merged(Before)
    assert int(conv.attrs.groups) == 8
    assert known_shape(conv.args[0]) == (1, 8, 6, 1)
    assert known_shape(conv.args[1]) == (8, 1, 3, 1)


@pytest.mark.parametrize("axes, kernel, padding, strides", [
    ([0, 2, 1, 3], (2, 1, 3, 3), [1, 1, 1, 1], [1, 1]),  # no unit axis in the kernel
    ([0, 2, 1, 3], (2, 1, 3, 1), [1, 1, 1, 1], [1, 1]),  # padded along the unit axis
    ([0, 2, 1, 3], (2, 1, 3, 1), [1, 0, 1, 0], [1, 2]),  # strided along the unit axis
    ([0, 2, 3, 1], (2, 1, 3, 1), [1, 0, 1, 0], [1, 1]),  # the unit axis is not stored last
], ids=["full-kernel", "padded", "strided", "not-merged-in-memory"])
def test_what_is_not_a_filter_over_merged_channels_is_left(axes, kernel, padding,
                                                           strides) -> None:
    shape = [1, 2, 6, 4] if axes == [0, 2, 1, 3] else [1, 2, 4, 6]

    @I.ir_module
    class Before:
        @R.function
        def main(v: X, w: R.Tensor(kernel, "float32")):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                x = R.permute_dims(v, axes)
                gv = R.nn.conv2d(x, w, strides=strides, padding=padding, groups=2)
                R.output(gv)
            return gv

    assert known_shape(Before["main"].body.blocks[0].bindings[0].var) == tuple(shape)
    (conv,) = _merged(Before)
    assert int(conv.attrs.groups) == 2
