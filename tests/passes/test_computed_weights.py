"""A convolution kernel computed per sample from a constant weight, elementwise (StyleGAN2's
modulated convolution: weight × style, demodulated, viewed ``(B·O, I, k, k)``), is computed in
the layout the NHWC convolution wants: no transpose of the kernel on every call."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import tvm
from torch import nn
from torch.nn import functional as F
from tvm import relax
from tvm.relax import op as R

from cl_validate.compile.passes.computed_weights import _through_view, compute_in_layout
from cl_validate.ir import count_permutes
from tests.passes.conftest import compile_nhwc_case

pytestmark = pytest.mark.compile


class ModulatedConv(nn.Module):
    """StyleGAN2's ModulatedConv2d (rosinality's), the style from the input's mean."""

    def __init__(self, cin: int = 8, cout: int = 8, k: int = 3) -> None:
        super().__init__()
        self.inp = nn.Conv2d(3, cin, 1)
        self.style = nn.Linear(cin, cin)
        self.weight = nn.Parameter(torch.randn(1, cout, cin, k, k))
        self.scale, self.k, self.cout = 1 / math.sqrt(cin * k * k), k, cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        b, cin, h, w = x.shape
        style = self.style(x.mean((2, 3))).view(b, 1, cin, 1, 1)
        weight = self.scale * self.weight * style
        demod = torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)
        weight = (weight * demod.view(b, self.cout, 1, 1, 1)).view(b * self.cout, cin, self.k,
                                                                   self.k)
        out = F.conv2d(x.view(1, b * cin, h, w), weight, padding=self.k // 2, groups=b)
        return out.view(b, self.cout, h, w)


@pytest.mark.parametrize("batch", [1, 2])
def test_a_modulated_kernel_is_computed_in_the_convolutions_layout(tmp_path, batch) -> None:
    kernels = compile_nhwc_case(tmp_path, ModulatedConv, (batch, 3, 6, 6), rtol=1e-5,
                                atol=1e-5)
    on_kernel = [t for t in kernels.runtime_transforms if len(t.in_shape) == 4
                 and t.in_shape[0] == batch * 8 and t.in_shape[1] == 8]
    assert on_kernel == [], kernels.render()


def test_through_a_view() -> None:
    # drop a leading one, then OIHW -> OHWI: the same move on (1, O, I, k, k)
    assert _through_view((1, 4, 8, 3, 3), (4, 8, 3, 3), (0, 2, 3, 1)) == (0, 1, 3, 4, 2)
    # (B, O) merged, kept together in front
    assert _through_view((2, 4, 8, 3, 3), (8, 8, 3, 3), (0, 2, 3, 1)) == (0, 1, 3, 4, 2)
    # a view that splits an axis the permutation then separates: not through it
    assert _through_view((4, 6), (4, 2, 3), (0, 2, 1)) is None


def _scaled(weight_like: bool) -> relax.Function:
    """permute(w * s): `w` a weight parameter (or a run-time input), `s` per-channel."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4), "float32"))
    w = relax.Var("w", relax.TensorType((4, 4, 3, 3), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            s = bb.emit(R.reshape(x, [1, 4, 1, 1]))
            k = bb.emit(R.multiply(w, s))
            out = bb.emit_output(R.permute_dims(k, [0, 2, 3, 1]))
        bb.emit_func_output(out)
    func = bb.get()["main"]
    return func.with_attr("num_input", 1 if weight_like else 2)


def test_the_transpose_moves_onto_the_weight_exactly(run_llvm) -> None:
    before = tvm.IRModule({"main": _scaled(True)})
    after = tvm.IRModule({"main": compute_in_layout(before["main"])})
    assert count_permutes(before) == 1 and count_permutes(after) == 0, after
    rng = np.random.default_rng(0)
    x, w = (rng.uniform(-1, 1, size=s).astype("float32") for s in ((1, 4), (4, 4, 3, 3)))
    np.testing.assert_array_equal(run_llvm(after, x, w)[0], run_llvm(before, x, w)[0])


def test_a_tensor_computed_at_run_time_keeps_its_transpose() -> None:
    func = _scaled(False)
    assert compute_in_layout(func) is func
