"""An elementwise step with a weight operand between two movement chains runs before the
first (TNT's pixel position, added to patches in the middle of their movement): the constant
moves back through the chain, the two chains fold into one transpose, every element meets the
same element of the constant. A step on a run-time operand, or one read by anything but a
movement, stays where it is."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from torch import nn
from tvm import relax
from tvm.relax import op as R

from cl_validate.compile.passes import chain_steps
from cl_validate.compile.passes.chain_steps import constant_at_root, hoist_chain_steps
from cl_validate.compile.passes.movement_chains import fold_movement_chains
from cl_validate.ir import count_permutes, same_ir
from tests.passes.conftest import compile_nhwc_case

pytestmark = pytest.mark.compile

#: TNT's pixels from an NHWC map (1, 8, 8, 4): patches of 4x4 (2x2 of them) put
#: channels-first per patch, the position added there, then tokens (pixels, channels).
PATCHES = [("reshape", (2, 4, 2, 4, 4)), ("permute", (0, 2, 4, 1, 3)),
           ("reshape", (4, 4, 4, 4))]


def _pixels(weight: bool = True, read_by: str = "movement") -> relax.Function:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 8, 4), "float32"))
    pos = relax.Var("pos", relax.TensorType((1, 4, 4, 4), "float32"))
    params = [x, pos]
    with bb.function("main", params):
        with bb.dataflow():
            cur = bb.emit(R.nn.relu(x))
            for kind, arg in PATCHES:
                cur = bb.emit(R.reshape(cur, arg) if kind == "reshape" else
                              R.permute_dims(cur, arg))
            cur = bb.emit(R.add(cur, pos))
            if read_by == "movement":
                cur = bb.emit(R.permute_dims(R.reshape(cur, [4, 4, 16]), [0, 2, 1]))
            else:
                cur = bb.emit(R.nn.softmax(cur, axis=-1))
            out = bb.emit_output(R.negative(cur))
        bb.emit_func_output(out)
    func = bb.get()["main"]
    return func.with_attr("num_input", 2 if not weight else 1)


def test_the_step_runs_before_the_chain_and_the_chains_fold(run_llvm_pair) -> None:
    before = _pixels()
    after = hoist_chain_steps(before)
    folded = [tvm.IRModule({"main": fold_movement_chains(f)}) for f in (before, after)]
    # one run-time transpose where there were two (the constant's own permute folds when
    # the program is compiled: a weight's)
    assert [count_permutes(m) for m in folded] == [2, 1], folded[1]
    assert count_permutes(folded[1], runtime_only=False) == 2, folded[1]
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(1, 8, 8, 4)).astype("float32")
    pos = rng.uniform(-1, 1, size=(1, 4, 4, 4)).astype("float32")
    got, want = run_llvm_pair(tvm.IRModule({"main": before}), tvm.IRModule({"main": after}),
                              x, pos)
    np.testing.assert_array_equal(got[0], want[0])


def test_a_run_time_operand_or_a_step_read_by_no_movement_stays() -> None:
    """A run-time operand would need a run-time transpose of its own; a step read by a
    softmax has no movement after it to fold with."""
    for func in (_pixels(weight=False), _pixels(read_by="softmax")):
        assert same_ir(hoist_chain_steps(func), func)


def test_the_constant_is_viewed_on_the_roots_atoms_where_an_axis_mixes() -> None:
    """The root's rows are (patch row, pixel row): the position is broadcast along the first
    and present along the second, so the step runs on the root's atoms; where each root axis
    is one or the other, on the root's own shape."""
    moved = constant_at_root((1, 8, 8, 4), PATCHES, (1, 4, 4, 4))
    assert moved is not None
    assert moved.view == (2, 4, 2, 4, 4) and moved.shape == (1, 4, 1, 4, 4)
    # a per-channel scale after a plain NHWC -> NCHW permute: the root's own shape
    simple = constant_at_root((1, 5, 6, 8), [("permute", (0, 3, 1, 2))], (8, 1, 1))
    assert simple is not None and simple.view == (1, 5, 6, 8) and simple.shape == (1, 1, 1, 8)
    # not a broadcast of the chain's end at all
    assert constant_at_root((1, 5, 6, 8), [("permute", (0, 3, 1, 2))], (3, 1, 1)) is None


class Pixels(nn.Module):
    """TNT's pixel embedding: a strided conv, ``nn.Unfold`` into non-overlapping 4x4 patches,
    ``transpose(1, 2).reshape`` to (B·patches, C, 4, 4), a pixel position added, back to
    (B·patches, pixels, C), into a Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, 8, 3, padding=1, stride=2)
        self.unfold = nn.Unfold(kernel_size=4, stride=4)
        self.pos = nn.Parameter(torch.randn(1, 8, 4, 4))
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        p = self.unfold(self.proj(x)).transpose(1, 2).reshape(-1, 8, 4, 4) + self.pos
        p = p.reshape(-1, 8, 16).transpose(1, 2)
        return self.fc(p).reshape(b, -1, 16, 8)


def test_tnts_pixels_have_no_transform_of_their_own(tmp_path, monkeypatch) -> None:
    """With NHWC input: the one transpose the patches need is the Linear's read (its
    operand strided, StridedProducts); left after the position, it stood apart from the
    chain before it and was a transform of its own."""
    kernels = compile_nhwc_case(tmp_path, Pixels, (1, 3, 16, 16), rtol=1e-5, atol=1e-5)
    assert not kernels.runtime_transforms, kernels.render()
    monkeypatch.setattr(chain_steps, "_plans", lambda func: {})
    without = compile_nhwc_case(tmp_path, Pixels, (1, 3, 16, 16), rtol=1e-5, atol=1e-5)
    assert len(without.runtime_transforms) >= 1, without.render()
