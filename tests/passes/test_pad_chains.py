"""A pad read by a movement chain that keeps its padded axes whole runs after the chain (VOLO's
values, padded for the unfold and read heads-first): the chain's transpose moves the map
before it is padded and folds with the movement before the pad; the same elements in the
same places, in every pad mode. A chain that splits a padded axis is left alone, and so is a
pad of anything but a movement (nothing to fold with)."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.relax import op as R

from cl_validate.compile.passes.movement_chains import fold_movement_chains
from cl_validate.compile.passes.pad_chains import sink_pads
from cl_validate.ir import bindings, count_permutes, op_name, same_ir
from tests.passes.conftest import compile_nhwc_case
from tests.test_half_precision import Outlook

pytestmark = pytest.mark.compile


def _padded_then_read(view: list[int], perm: list[int], mode: str = "constant",
                      moved: bool = True) -> relax.Function:
    """A (1, 5, 6, 8) channels-last map put channels-first (`moved`; else the input is
    channels-first already), padded by 1 on H and W, viewed as `view` and permuted by `perm`
    (VOLO's values: ``view = [2, 4, 56]``, heads × head channels × positions)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 5, 6, 8) if moved else (1, 8, 5, 6), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            first = bb.emit(R.permute_dims(x, [0, 3, 1, 2])) if moved else x
            padded = bb.emit(R.nn.pad(first, [0, 0, 0, 0, 1, 1, 1, 1], pad_mode=mode,
                                      pad_value=0.5 if mode == "constant" else 0.0))
            viewed = bb.emit(R.reshape(padded, view))
            out = bb.emit_output(R.negative(R.permute_dims(viewed, perm)))
        bb.emit_func_output(out)
    return bb.get()["main"]


def _ops(func: relax.Function) -> list[str | None]:
    return [op_name(b.value) for b in bindings(func)]


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
def test_the_pad_runs_after_the_chain_exactly(run_llvm_pair, mode) -> None:
    before = _padded_then_read([2, 4, 56], [0, 2, 1], mode)
    after = sink_pads(before)
    assert _ops(after)[-4:] == ["relax.permute_dims", "relax.nn.pad", "relax.reshape",
                                "relax.negative"], after
    # the chain's permute now meets the model's: one transpose where there were two
    folded = [tvm.IRModule({"main": fold_movement_chains(f)}) for f in (before, after)]
    assert [count_permutes(m) for m in folded] == [2, 1], folded[1]
    x = np.random.default_rng(0).uniform(-1, 1, size=(1, 5, 6, 8)).astype("float32")
    got, want = run_llvm_pair(tvm.IRModule({"main": before}), tvm.IRModule({"main": after}), x)
    np.testing.assert_array_equal(got[0], want[0])


def test_a_chain_that_splits_a_padded_axis_is_left_alone() -> None:
    """The padded H (7) is cut by no view here, but W (8) is split into 2 x 4 and the halves
    moved apart: the pad cannot follow."""
    func = _padded_then_read([8, 7, 2, 4], [0, 3, 1, 2])
    assert same_ir(sink_pads(func), func)


def test_a_pad_of_anything_but_a_movement_stays() -> None:
    """Nothing before the pad to fold with: moved, the transform would only read a view."""
    func = _padded_then_read([2, 4, 56], [0, 2, 1], moved=False)
    assert same_ir(sink_pads(func), func)


def test_an_unfold_read_by_heads_has_no_transform_of_its_own(tmp_path) -> None:
    """VOLO's values with NHWC input: the Linear writes them heads-first, the pad follows,
    the gather picks from that (no transform on the unfold's side). The one left is the
    fold's: index_put reads the attention's output in the image's order."""
    kernels = compile_nhwc_case(tmp_path, Outlook, (1, 3, 24, 24), rtol=1e-5, atol=1e-6)
    patches = 9 * 4 * 8 * 6 * 6  # bytes of the unfolded values
    reads = [t.bytes_read for t in kernels.runtime_transforms]
    assert len(reads) == 1 and reads[0] >= patches, kernels.render()
