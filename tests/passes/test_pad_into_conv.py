"""pad_into_conv: a constant pad read by a convolution alone is done inside the convolution's
kernel — one kernel where there were two, the same outputs bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from cl_validate.compile.pad_into_conv import pad_into_conv
from tests.passes.conftest import kernels_and_output

LLVM = tvm.target.Target({"kind": "llvm"})


def _module(dtype: str, value: float, *, pad_channels: bool = False, shared: bool = False,
            groups: int = 1) -> tvm.IRModule:
    """NHWC ``conv2d(pad(x, value), w)`` (int8 codes into int32, or float32), 3x3, stride 1."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 6, 6, 4), dtype))
    cin = (5 if pad_channels else 4) // groups
    w = relax.Var("w", relax.TensorType((4, 3, 3, cin), "int8" if "int" in dtype else dtype))
    out_dtype = "int32" if "int" in dtype else dtype
    with bb.function("main", [x, w]):
        with bb.dataflow():
            width = [0, 0, 1, 1, 1, 1, 0, 1 if pad_channels else 0]
            p = bb.emit(relax.op.nn.pad(x, width, pad_value=value))
            y = bb.emit(relax.op.nn.conv2d(p, w, groups=groups, data_layout="NHWC",
                                           kernel_layout="OHWI", out_dtype=out_dtype))
            if shared:
                y = bb.emit(relax.op.add(y, relax.op.sum(relax.op.astype(p, out_dtype))))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def _args(dtype: str, groups: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    if "int" in dtype:
        lo = 0 if dtype == "uint8" else -128
        return [rng.integers(lo, lo + 256, (1, 6, 6, 4)).astype(dtype),
                rng.integers(-128, 128, (4, 3, 3, 4 // groups)).astype("int8")]
    return [rng.standard_normal((1, 6, 6, 4)).astype(dtype),
            rng.standard_normal((4, 3, 3, 4 // groups)).astype(dtype)]


@pytest.mark.parametrize(("dtype", "value", "groups"), [
    ("uint8", 128.0, 1),   # a quantized convolution: its zero is the zero point
    ("int8", -5.0, 4),     # depthwise, a negative zero point
    ("float32", 0.0, 1),   # a model's F.pad of zeros before its convolution
    ("float32", 1.5, 1),   # any constant
])
def test_one_kernel_and_the_same_outputs(dtype, value, groups):
    before = _module(dtype, value, groups=groups)
    after = pad_into_conv(before)
    args = _args(dtype, groups)
    k_before, y_before = kernels_and_output(before, args)
    k_after, y_after = kernels_and_output(after, args)
    assert (k_before, k_after) == (2, 1)
    np.testing.assert_array_equal(y_after, y_before)
    ops = [str(b.value.op.name) for b in after["main"].body.blocks[0].bindings
           if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)]
    assert "relax.nn.pad" not in ops


@pytest.mark.parametrize("case", ["shared", "channels"])
def test_left_alone(case):
    """A pad something else reads too, or one that pads the channels, stays a pad."""
    before = _module("uint8", 128.0, shared=case == "shared", pad_channels=case == "channels")
    tvm.ir.assert_structural_equal(pad_into_conv(before), before)
