"""One transpose before a split serves its parts only where each part reaches that transpose
with its own axes: past a reduction (or any op that changes the rank) a transpose permutes
other axes, and lifting it to the split's source would permute the wrong number of axes
(NesT's 5-d heads read by a 4-d attention crashed the compile so)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import tvm
from tvm import relax
from tvm.relax import op as R

from cl_validate.compile.passes.split_permutes import hoist
from tests.passes.conftest import compile_nhwc_case


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


def _split_op() -> relax.Function:
    """t = relu(x) (2, 6, 3, 5) split along axis 1 into (2, 2, 3, 5) and (2, 4, 3, 5) parts
    (``relax.split``: parts of several indices, each keeping t's rank), each negated, then
    transposed by the same (0, 3, 2, 1)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 6, 3, 5), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            parts = bb.emit(R.split(bb.emit(R.nn.relu(x)), [2], axis=1))
            outs = [bb.emit(R.permute_dims(bb.emit(R.negative(bb.emit(
                relax.TupleGetItem(parts, i)))), [0, 3, 2, 1])) for i in range(2)]
            out = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(out)
    return bb.get()["main"].with_attr("num_input", 1)


def test_a_split_of_several_indices_shares_one_transpose_too(run_llvm_pair) -> None:
    """HaloNet's keys and values: one transpose of the split's source, the split then along
    the axis the transpose moved the split axis to; each part the same values."""
    before = _split_op()
    after = hoist(before)
    assert after is not None
    shared = [b.value for b in after.body.blocks[0].bindings
              if getattr(b.value, "op", None) is not None and
              b.value.op.name == "relax.split"]
    assert len(shared) == 1 and int(shared[0].attrs.axis) == 3, after  # axis 1 moved to 3
    t = np.random.default_rng(0).standard_normal((2, 6, 3, 5)).astype("float32")
    got_before, got_after = run_llvm_pair(tvm.IRModule({"main": before}),
                                          tvm.IRModule({"main": after}), t)
    for b, a in zip(got_before[0], got_after[0], strict=True):
        np.testing.assert_array_equal(b, a)


class HaloAttention(torch.nn.Module):
    """HaloNet's attention without its relative positions: q cut into 4x4 blocks, keys and
    values from overlapping 6x6 windows of the padded kv projection (two unfolds, one
    ``torch.split`` into k and v), two heads."""

    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Conv2d(16, 16, 1, bias=False)
        self.kv = torch.nn.Conv2d(16, 32, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        heads, dh, bs, win = 2, 8, 4, 6
        nh, nw = h // bs, w // bs
        q = self.q(x).reshape(-1, dh, nh, bs, nw, bs).permute(0, 1, 3, 5, 2, 4)
        q = q.reshape(b * heads, dh, -1, nh * nw).transpose(1, 3)
        kv = F.pad(self.kv(x), [1, 1, 1, 1]).unfold(2, win, bs).unfold(3, win, bs)
        kv = kv.reshape(b * heads, dh * 2, nh * nw, -1).permute(0, 2, 3, 1)
        k, v = torch.split(kv, [dh, dh], dim=-1)
        attn = (q @ k.transpose(-1, -2) * dh ** -0.5).softmax(dim=-1)
        out = (attn @ v).transpose(1, 3).reshape(-1, bs, bs, nh, nw)
        return out.permute(0, 3, 1, 4, 2).contiguous().view(b, c, h, w)


@pytest.mark.compile
def test_haloattention_keys_and_values_cost_one_transpose(tmp_path) -> None:
    """Before: the windows' transpose, then one for k and one for v into the attention (4
    with the output's). SinkPermutes' rounds moved the split before its parts' transposes
    met one shared one; the rounds from the split hoisted first reach fewer, and are kept:
    one transpose of the windows serves k and v, which the attention reads as they are."""
    kernels = compile_nhwc_case(tmp_path, HaloAttention, (1, 16, 8, 8), rtol=1e-5, atol=1e-5)
    said = [t.describe() for t in kernels.runtime_transforms]
    assert len(said) == 2 and "output boundary" in said[-1], kernels.render()
