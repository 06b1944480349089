"""SinkViews: a view between a kernel and the elementwise steps after it (a LayerNorm's output
reshaped, then quantized for the Linear after it) kept those steps out of the kernel: FuseOps
fuses a view only forward. Moved below the steps, the steps fuse into the kernel and the view
is free: one kernel and one float round trip fewer, the same values."""

from __future__ import annotations

import numpy as np
import pytest
from tvm.script import ir as I
from tvm.script import relax as R

from cl_validate.checks.verdict import Status
from cl_validate.compile.passes import SinkViews
from cl_validate.ir import bindings, op_name, static_shape
from cl_validate.session.in_process import judge_in_process
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions

pytestmark = pytest.mark.compile


CASE = """
model = "quant_models:norm_head"
targets = ["llvm", "cuda"]
[[inputs]]
name = "x"
shape = [1, 3, 16, 16]
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
[budget]
float_qdq_products = 0
[tolerance]
reference = "float64"
steps = 1
"""


def test_a_quantized_norms_quantize_fuses_into_the_norm(write_case) -> None:
    """DETR's decoder end quantized (tests/data/quant_models.py's ``norm_head``): the
    LayerNorm's output viewed as the head's rows, then quantized for it. The quantize is in
    the norm's kernel (it was a kernel of its own with the view), on llvm and on cuda (dlight
    schedules the fused kernel); within one step on llvm."""
    pytest.importorskip("torchao")
    case = load_case(write_case(CASE))
    results = judge_in_process([case], RunOptions(isolate=False))
    assert {r.target for r in results} == {"llvm", "cuda"}
    for r in results:
        assert r.check("compile").status is Status.PASSED, r.check("compile").message
        norms = [k for k in r.kernels if "layer_norm" in k.ops]
        assert len(norms) == 1 and any(op.startswith("quantize") for op in norms[0].ops), \
            (r.target, [k.name for k in r.kernels])
    numerics = next(r for r in results if r.target == "llvm").check("numerics")
    assert numerics.status is Status.PASSED, numerics.message


T = R.Tensor((6, 1, 8), "float32")


def _after(before) -> list:
    return [(op_name(b.value), b.value) for b in bindings(SinkViews()(before)["main"])]


def test_a_quantize_after_a_view_runs_before_it_on_the_same_values(run_llvm_pair) -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(x: T, g: R.Tensor((8,), "float32"), b: R.Tensor((8,), "float32")):
            with R.dataflow():
                n = R.nn.layer_norm(x, g, b, axes=[2])
                v = R.reshape(n, R.shape([1, 6, 8]))
                s = R.multiply(v, R.const(2.0, "float32"))
                q = R.quantize(s, R.const(0.05, "float32"), R.const(3, "int8"), axis=1,
                               out_dtype="int8")
                gv = R.add(q, q)
                R.output(gv)
            return gv

    after = SinkViews()(Before)
    ops = [op for op, _ in _after(Before)]
    assert ops == ["relax.nn.layer_norm", "relax.multiply", "relax.quantize", "relax.reshape",
                   "relax.add"], ops
    _, _, quantize, view, _ = (v for _, v in _after(Before))
    assert static_shape(quantize.args[0]) == (6, 1, 8)  # on the norm's own shape
    assert int(quantize.attrs.axis) == -1
    assert static_shape(view) == (1, 6, 8)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype("float32") for s in ((6, 1, 8), (8,), (8,))]
    want, got = run_llvm_pair(Before, after, *args)
    np.testing.assert_array_equal(got[0], want[0])


def _moved(body) -> bool:
    """Whether SinkViews moved the view of `body`'s module (its first reshape's input is a
    layer_norm before, and something else after)."""
    ops = [op for op, _ in _after(body)]
    return ops.index("relax.reshape") > ops.index("relax.sigmoid")


def test_a_view_is_left_where_moving_it_would_change_a_value_or_gain_nothing() -> None:
    @I.ir_module
    class Bias:  # another operand of more than one element: it broadcasts by the shape
        @R.function
        def main(x: T, g: R.Tensor((8,), "float32"), b: R.Tensor((1, 8), "float32")):
            with R.dataflow():
                n = R.nn.layer_norm(x, g, g, axes=[2])
                v = R.reshape(n, R.shape([6, 8]))
                gv = R.sigmoid(R.add(v, b))
                R.output(gv)
            return gv

    @I.ir_module
    class TwoUses:  # the view is read twice: moved, a step would run twice
        @R.function
        def main(x: T, g: R.Tensor((8,), "float32")):
            with R.dataflow():
                n = R.nn.layer_norm(x, g, g, axes=[2])
                v = R.reshape(n, R.shape([6, 8]))
                gv = R.add(R.sigmoid(v), v)
                R.output(gv)
            return gv

    @I.ir_module
    class OfInput:  # a view of an input: no kernel before it for the steps to join
        @R.function
        def main(x: T):
            with R.dataflow():
                v = R.reshape(x, R.shape([6, 8]))
                gv = R.sigmoid(v)
                R.output(gv)
            return gv

    @I.ir_module
    class NormReadTwice:  # the norm's output is read besides: its kernel would take no step
        @R.function
        def main(x: T, g: R.Tensor((8,), "float32")):
            with R.dataflow():
                n = R.nn.layer_norm(x, g, g, axes=[2])
                v = R.reshape(n, R.shape([6, 8]))
                gv = R.add(R.sigmoid(v), R.sum(n))
                R.output(gv)
            return gv

    @I.ir_module
    class OfSum:  # a sum: FuseOps fuses no step after it, so the view stays free before them
        @R.function
        def main(x: T):
            with R.dataflow():
                n = R.sum(x, axis=[1])
                v = R.reshape(n, R.shape([48]))
                gv = R.sigmoid(v)
                R.output(gv)
            return gv

    @I.ir_module
    class Moved:  # the same as Bias with a one-element operand: moved
        @R.function
        def main(x: T, g: R.Tensor((8,), "float32"), b: R.Tensor((1, 1), "float32")):
            with R.dataflow():
                n = R.nn.layer_norm(x, g, g, axes=[2])
                v = R.reshape(n, R.shape([6, 8]))
                gv = R.sigmoid(R.add(v, b))
                R.output(gv)
            return gv

    assert _moved(Moved)
    for left in (Bias, TwoUses, NormReadTwice):
        assert not _moved(left), left.script()
    for left in (OfInput, OfSum):
        assert SinkViews()(left).script() == left.script()
