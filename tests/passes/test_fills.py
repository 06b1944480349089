"""A fill shaped like a tensor reads nothing of it but its static shape: ``zeros_like(x)``
is ``full(shape, 0)``, a constant, so no transform of it is left for run time (quantized
ShiftViT, whose shifts assign slices into ``torch.zeros_like(x)`` of a dequantized ``x``,
kept one that should have folded)."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax import op as R

from cl_validate.compile.passes.fills import constant_fills
from cl_validate.ir import bindings, op_name


def _fills() -> relax.Function:
    x = relax.Var("x", relax.TensorType((1, 4, 3, 3), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(R.nn.relu(x))
            z = bb.emit(R.add(R.zeros_like(y), R.full_like(y, relax.const(0.5, "float32"))))
            out = bb.emit_output(R.add(bb.emit(R.ones_like(x)), R.multiply(z, y)))
        bb.emit_func_output(out)
    return bb.get()["main"].with_attr("num_input", 1)


def test_fills_like_a_tensor_become_constants_of_its_shape(run_llvm_pair) -> None:
    before = _fills()
    after = constant_fills(before)
    ops = [op_name(b.value) for b in bindings(after)]
    assert not {"relax.zeros_like", "relax.full_like", "relax.ones_like"} & set(ops), ops
    assert {"relax.zeros", "relax.full", "relax.ones"} <= set(ops), ops
    x = np.random.default_rng(0).standard_normal((1, 4, 3, 3)).astype("float32")
    got_before, got_after = run_llvm_pair(tvm.IRModule({"main": before}),
                                          tvm.IRModule({"main": after}), x)
    np.testing.assert_array_equal(got_before[0], got_after[0])


def test_a_fill_that_would_make_the_whole_output_constant_stays() -> None:
    """A program that reads its input only for a fill's shape keeps reading it: the pass
    does not turn a program into one whose output is a constant."""
    x = relax.Var("x", relax.TensorType((1, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(R.add(bb.emit(R.zeros_like(x)), relax.const(1.0, "float32")))
        bb.emit_func_output(out)
    func = bb.get()["main"].with_attr("num_input", 1)
    assert constant_fills(func).same_as(func)
