"""An unfold (``nn.Unfold``: a gather of the padded map's positions, a reshape, a permute of
the gathered positions, a reshape) gathers its positions in the permuted order instead: the
permute of the whole unfolded tensor is gone (RedNet's involution, T2T-ViT's soft split,
VOLO's outlook attention). Where the permute also moves the other axes (VOLO's heads), the data
is permuted before the gather instead, when it is no larger than what is picked. Where the
index is only known at run time, nothing changes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import tvm
from torch import nn
from tvm import relax
from tvm.relax import op as R

from cl_validate.compile.passes.gather_order import permute_before_gather, permute_into_gather
from cl_validate.ir import (
    bindings,
    count_permutes,
    permute_axes,
    same_ir,
    static_shape,
    tensor_type,
)
from tests.passes.conftest import compile_nhwc_case

pytestmark = pytest.mark.compile


class Involution(nn.Module):
    """RedNet's involution: per-pixel kernels from a 1x1 conv, applied to the unfolded map."""

    def __init__(self, channels: int = 8, k: int = 3, groups: int = 2) -> None:
        super().__init__()
        self.k, self.groups = k, groups
        self.inp = nn.Conv2d(3, channels, 1)
        self.kernels = nn.Conv2d(channels, k * k * groups, 1)
        self.unfold = nn.Unfold(k, padding=k // 2)
        self.out = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        b, c, h, w = x.shape
        kernel = self.kernels(x).view(b, self.groups, self.k * self.k, h, w).unsqueeze(2)
        patches = self.unfold(x).view(b, self.groups, c // self.groups, self.k * self.k, h, w)
        return self.out((kernel * patches).sum(dim=3).view(b, c, h, w))


class SoftSplit(nn.Module):
    """T2T-ViT's soft split: unfold, then tokens (the channels move past the positions)."""

    def __init__(self) -> None:
        super().__init__()
        self.unfold = nn.Unfold(3, stride=2, padding=1)
        self.proj = nn.Linear(3 * 9, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.unfold(x).transpose(1, 2))


def test_an_unfold_gathers_its_positions_in_the_order_it_is_read(tmp_path) -> None:
    kernels = compile_nhwc_case(tmp_path, Involution, (1, 3, 6, 6), rtol=1e-5, atol=1e-6)
    # the unfold's input into NCHW, the per-pixel kernels into NCHW, the NCHW output: no
    # transpose of the unfolded patches (nine times the map)
    assert len(kernels.runtime_transforms) == 3, kernels.render()
    assert max(t.bytes_read for t in kernels.runtime_transforms) < 9 * 4 * 8 * 6 * 6, \
        kernels.render()


def test_a_permute_that_moves_other_axes_stays(tmp_path) -> None:
    """The soft split's transpose moves the channels: not the gather's to absorb, and the
    program stays right (checked against PyTorch by the helper)."""
    compile_nhwc_case(tmp_path, SoftSplit, (1, 3, 8, 8), rtol=1e-5, atol=1e-6)


def _gather(index: relax.Expr | None) -> relax.Function:
    """take(x, index, 1) of a (2, 20, 3) tensor, viewed (2, 3, 4, 3, 3) and permuted within
    the gathered axis (3, 4, 3 -> 4, 3, 3); `index` None: a run-time index parameter."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 20, 3), "float32"))
    params = [x]
    if index is None:
        index = relax.Var("i", relax.TensorType((36,), "int64"))
        params.append(index)
    with bb.function("main", params):
        with bb.dataflow():
            picked = bb.emit(R.take(x, index, axis=1))
            view = bb.emit(R.reshape(picked, [2, 3, 4, 3, 3]))
            moved = bb.emit(R.permute_dims(view, [0, 2, 1, 3, 4]))
            out = bb.emit_output(R.negative(moved))
        bb.emit_func_output(out)
    return bb.get()["main"]


def test_the_permute_becomes_the_gathers_order_exactly(run_llvm) -> None:
    rng = np.random.default_rng(0)
    index = rng.integers(0, 20, size=36).astype("int64")
    before = tvm.IRModule({"main": _gather(relax.const(index))})
    after = tvm.IRModule({"main": permute_into_gather(before["main"])})
    assert count_permutes(before) == 1 and count_permutes(after) == 0, after
    x = rng.uniform(-1, 1, size=(2, 20, 3)).astype("float32")
    np.testing.assert_array_equal(run_llvm(after, x)[0], run_llvm(before, x)[0])


def test_an_index_known_only_at_run_time_is_left_alone() -> None:
    func = _gather(None)
    assert permute_into_gather(func) is func


def _heads_gather(length: int) -> relax.Function:
    """VOLO's values in small: take(x, index, 1) of (8, 20) channels × positions, the
    channels viewed as 2 heads × 4, the picked positions as 4 taps × `length // 4`, then
    (heads, positions, taps, head channels): the head channels move past the gathered axis."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((8, 20), "float32"))
    index = np.random.default_rng(1).integers(0, 20, size=length).astype("int64")
    with bb.function("main", [x]):
        with bb.dataflow():
            picked = bb.emit(R.take(x, relax.const(index), axis=1))
            view = bb.emit(R.reshape(picked, [2, 4, 4, length // 4]))
            moved = bb.emit(R.permute_dims(view, [0, 3, 2, 1]))
            out = bb.emit_output(R.negative(moved))
        bb.emit_func_output(out)
    return bb.get()["main"]


def _permuted_elements(mod: tvm.IRModule) -> int:
    """Elements the permutes of `mod`'s float tensors move (not the index's, on constants)."""
    return sum(math.prod(static_shape(b.var))  # type: ignore[arg-type]
               for b in bindings(mod["main"]) if permute_axes(b.value) is not None and
               tensor_type(b.var).dtype == "float32")  # type: ignore[union-attr]


def test_a_permute_that_moves_the_other_axes_moves_the_data_instead(run_llvm) -> None:
    """36 positions picked from 20: the permute moves the 160 data elements instead of the
    288 picked ones, the taps' order folded into the index; the same elements in the same
    places."""
    before = tvm.IRModule({"main": _heads_gather(36)})
    after = tvm.IRModule({"main": permute_before_gather(before["main"])})
    assert same_ir(permute_into_gather(before["main"]), before["main"])  # not a reorder alone
    assert _permuted_elements(before) == 288 and _permuted_elements(after) == 160, after
    x = np.random.default_rng(2).uniform(-1, 1, size=(8, 20)).astype("float32")
    np.testing.assert_array_equal(run_llvm(after, x)[0], run_llvm(before, x)[0])


def test_data_larger_than_what_is_picked_is_not_moved() -> None:
    """12 positions picked from 20: moving the data would move more than the permute does."""
    func = _heads_gather(12)
    assert same_ir(permute_before_gather(func), func)
