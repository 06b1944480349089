"""A gather that picks its whole axis in order is its data, and so the reshape to its own
shape the import writes after it (SwinIR's reflect pad to a window multiple at a size that
is one): dropped before the layout stages, so the input reaches its convolution directly and
its conversion is the graph input's. An index that picks anything else (a real pad, a
reversal) keeps its gather; a reshape to its own shape of anything else stays."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from tvm import relax
from tvm.relax import op as R

from cl_validate.compile.passes.identities import drop_identities
from cl_validate.ir import bindings, known_shape, op_name
from cl_validate.measurements.attribution import Reason
from tests.passes.conftest import compile_nhwc


def _gathers(index: relax.Expr) -> relax.Function:
    """x (1, 3, 4, 5): a take along axis 2 with `index` (computed from an arange by the
    reflection PyTorch's pad decomposes into), a reshape to the same shape, a relu."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, 4, 5), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            idx = bb.emit(index)
            if isinstance(index, relax.Call) and op_name(index) == "relax.arange":
                idx = bb.emit(R.subtract(relax.const(3, "int64"), R.abs(  # 3 - |3 - i|
                    bb.emit(R.subtract(relax.const(3, "int64"), idx)))))
            took = bb.emit(R.take(x, idx, axis=2))
            same = bb.emit(R.reshape(took, list(known_shape(took) or ())))
            out = bb.emit_output(R.nn.relu(same))
        bb.emit_func_output(out)
    return bb.get()["main"]


def _ops(func: relax.Function) -> list[str]:
    return [op_name(b.value) or "" for b in bindings(func)]


def test_a_gather_of_everything_in_order_and_a_reshape_to_its_shape_are_dropped(
        run_llvm_pair) -> None:
    before = _gathers(R.arange(0, 4, 1, "int64"))
    after = drop_identities(before)
    assert "relax.take" not in _ops(after) and "relax.reshape" not in _ops(after), after
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 5)).astype("float32")
    got_before, got_after = run_llvm_pair(tvm_module(before), tvm_module(after), x)
    np.testing.assert_array_equal(got_before[0], got_after[0])


def test_a_reshape_to_its_own_shape_of_anything_else_stays() -> None:
    """Other passes read such a reshape as the model's view (StyleGAN2's ``upfirdn2d`` folds
    its channels into a batch of one-channel planes with ``reshape(-1, 1, H, W)`` of an
    ``(N·C, 1, H, W)``): dropped, the fold was not found and 6 transforms came back."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3, 1, 4, 5), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            same = bb.emit(R.reshape(R.nn.relu(x), [3, 1, 4, 5]))
            out = bb.emit_output(R.negative(same))
        bb.emit_func_output(out)
    func = bb.get()["main"]
    assert drop_identities(func).same_as(func)


@pytest.mark.parametrize("index", [np.array([3, 2, 1, 0]), np.array([0, 1, 2]),
                                   np.array([0, 1, 2, 3, 2])], ids=["reversed", "shorter",
                                                                    "reflect-padded"])
def test_a_gather_that_moves_or_picks_less_or_more_stays(index) -> None:
    func = _gathers(relax.const(index.astype("int64")))
    after = drop_identities(func)
    assert "relax.take" in _ops(after), after


def tvm_module(func: relax.Function):  # type: ignore[no-untyped-def]
    import tvm

    return tvm.IRModule({"main": func})


class _PadToWindow(nn.Module):
    """SwinIR's ``check_image_size``: a reflect pad to a multiple of the window, nothing at
    a size that is one, then ``(x - mean) * range`` and a convolution."""

    def __init__(self, window: int) -> None:
        super().__init__()
        self.window = window
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[2:]
        x = F.pad(x, (0, (self.window - w % self.window) % self.window,
                      0, (self.window - h % self.window) % self.window), "reflect")
        return self.conv((x - 0.45) * 255.0)


@pytest.mark.compile
@pytest.mark.parametrize("window, gathers", [(8, 0), (6, 2)], ids=["nothing-to-pad", "padded"])
def test_a_pad_of_nothing_costs_no_copy_and_the_inputs_transform_is_the_boundary(
        tmp_path, window, gathers) -> None:
    _, kernels = compile_nhwc(tmp_path, lambda: _PadToWindow(window), (1, 3, 16, 16),
                              1e-4, 1e-3, input_layout="NCHW")
    assert sum(k.name.startswith("take") or "_take" in k.name for k in kernels.kernels) == \
        gathers, kernels.render()
    if not gathers:
        reasons = [t.attribution.reason for t in kernels.runtime_transforms]
        assert reasons == [Reason.INPUT_BOUNDARY, Reason.OUTPUT_BOUNDARY], kernels.render()
