"""contiguous_weights: on a CPU an integer matmul reads its constant weight transposed (both
operands contiguous along the reduction) — the same int32 sums, one kernel as before; float
matmuls, weights computed at run time and GPU targets are left as they were."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from cl_validate.compile.contiguous_weights import contiguous_weights
from cl_validate.ir import is_tensor_constant, same_ir
from tests.passes.conftest import kernels_and_output

LLVM = tvm.target.Target({"kind": "llvm"})
CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})


def _module(dtype: str, rank: int = 2, constant: bool = True) -> tvm.IRModule:
    """``x @ W + 1`` with x ``[.., 5, 8]`` of `dtype` and W an int8 ``[8, 6]`` constant."""
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 5, 8)[-rank:], dtype))
    w = rng.integers(-128, 128, (8, 6)).astype("int8" if dtype in ("int8", "uint8") else dtype)
    params = [x]
    weight: relax.Expr = relax.const(w)
    if not constant:
        weight = relax.Var("w", relax.TensorType((8, 6), str(w.dtype)))
        params.append(weight)
    out_dtype = "int32" if dtype in ("int8", "uint8") else dtype
    with bb.function("main", params):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, weight, out_dtype=out_dtype))
            out = bb.emit_output(relax.op.add(y, relax.const(1, out_dtype)))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize(("dtype", "rank"), [("uint8", 2), ("int8", 3)])
def test_the_same_sums_in_one_kernel(dtype, rank):
    before = _module(dtype, rank)
    after = contiguous_weights(before, LLVM)
    assert not same_ir(after, before)
    x = np.random.default_rng(1).integers(0 if dtype == "uint8" else -128, 128,
                                          (2, 5, 8)[-rank:]).astype(dtype)
    k_before, y_before = kernels_and_output(before, [x])
    k_after, y_after = kernels_and_output(after, [x])
    assert k_before == k_after == 1  # the add still fused into the product
    np.testing.assert_array_equal(y_after, y_before)
    # the weight it holds is the transposed copy, not the original as well
    calls = [b.value for b in after["main"].body.blocks[0].bindings
             if isinstance(b.value, relax.Call)]
    held = [tuple(a.value.numpy().shape) for c in calls for a in c.args
            if is_tensor_constant(a)] + [
        tuple(a.value.numpy().shape) for c in calls for t in c.args
        if isinstance(t, relax.Tuple) for a in t.fields if is_tensor_constant(a)]
    assert [h for h in held if h] == [(6, 8)]  # not the [8, 6] original as well


@pytest.mark.parametrize("case", ["float", "weight at run time", "cuda"])
def test_left_alone(case):
    before = _module("float32" if case == "float" else "uint8",
                     constant=case != "weight at run time")
    after = contiguous_weights(before, CUDA if case == "cuda" else LLVM)
    tvm.ir.assert_structural_equal(after, before)
