"""One transpose before a split serves its parts only where each part reaches that transpose
with its own axes: past a reduction (or any op that changes the rank) a transpose permutes
other axes, and lifting it to the split's source would permute the wrong number of axes
(NesT's 5-d heads read by a 4-d attention crashed the compile so)."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax import op as R

from cl_validate.compile.passes.split_permutes import hoist


def _split(reduce: bool) -> relax.Function:
    """t = relu(x) (3, 2, 4, 5) unbound along axis 0 into three (2, 4, 5) parts; each summed
    over its last axis (rank 2) or negated (rank 3), then transposed, and the three added."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3, 2, 4, 5), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            t = bb.emit(R.nn.relu(x))  # a projection's output, in a model
            outs = []
            for i in range(3):
                part = bb.emit(R.reshape(bb.emit(R.strided_slice(t, [0], [i], [i + 1])),
                                         [2, 4, 5]))
                step = bb.emit(R.sum(part, axis=[2]) if reduce else R.negative(part))
                outs.append(bb.emit(R.permute_dims(step, [1, 0] if reduce else [1, 0, 2])))
            out = bb.emit_output(R.add(R.add(outs[0], outs[1]), outs[2]))
        bb.emit_func_output(out)
    return bb.get()["main"].with_attr("num_input", 1)  # x is an input, not a weight


def test_a_transpose_past_a_reduction_is_not_the_parts() -> None:
    assert hoist(_split(reduce=True)) is None


def test_a_transpose_each_part_reaches_with_its_axes_is_shared(run_llvm_pair) -> None:
    before = _split(reduce=False)
    after = hoist(before)
    assert after is not None
    t = np.random.default_rng(0).standard_normal((3, 2, 4, 5)).astype("float32")
    got_before, got_after = run_llvm_pair(tvm.IRModule({"main": before}),
                                          tvm.IRModule({"main": after}), t)
    np.testing.assert_array_equal(got_before[0], got_after[0])
