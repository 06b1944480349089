"""PermuteToReshape: golden Before/Expected IR."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from cl_validate.compile.passes import PermuteToReshape
from cl_validate.compile.passes._util import moves_only_unit_axes


def test_size1_permute_becomes_reshape() -> None:
    """(1, 8, 1, 1) -> (1, 1, 1, 8): a bias or pooled vector changing layout moves no data."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 8, 1, 1), "float32")) -> R.Tensor((1, 1, 1, 8), "float32"):
            with R.dataflow():
                gv = R.permute_dims(x, axes=[0, 2, 3, 1])
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 8, 1, 1), "float32")) -> R.Tensor((1, 1, 1, 8), "float32"):
            with R.dataflow():
                gv = R.reshape(x, R.shape([1, 1, 1, 8]))
                R.output(gv)
            return gv

    tvm.ir.assert_structural_equal(PermuteToReshape()(Before), Expected)


def test_permute_keeping_order_of_non1_axes_becomes_reshape() -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 1, 16, 8), "float32")) -> R.Tensor((16, 1, 8, 1), "float32"):
            with R.dataflow():
                gv = R.permute_dims(x, axes=[2, 0, 3, 1])
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 1, 16, 8), "float32")) -> R.Tensor((16, 1, 8, 1), "float32"):
            with R.dataflow():
                gv = R.reshape(x, R.shape([16, 1, 8, 1]))
                R.output(gv)
            return gv

    tvm.ir.assert_structural_equal(PermuteToReshape()(Before), Expected)


def test_symbolic_batch_counts_as_not_1() -> None:
    """``n`` could be anything; it still keeps its place before the channels."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor(("n", 8, 1, 1), "float32")) -> R.Tensor(("n", 1, 1, 8), "float32"):
            with R.dataflow():
                gv = R.permute_dims(x, axes=[0, 2, 3, 1])
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor(("n", 8, 1, 1), "float32")) -> R.Tensor(("n", 1, 1, 8), "float32"):
            n = T.int64()
            with R.dataflow():
                gv = R.reshape(x, R.shape([n, 1, 1, 8]))
                R.output(gv)
            return gv

    tvm.ir.assert_structural_equal(PermuteToReshape()(Before), Expected)


def test_real_transposes_are_left_alone() -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 8, 16, 16), "float32"), y: R.Tensor((1, 2, 1, 3), "float32"),
                 z: R.Tensor(("n", "m"), "float32")):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 2, 3, 1])
                b = R.permute_dims(y, axes=[0, 3, 2, 1])  # 2 and 3 swap: data moves
                c = R.permute_dims(z, axes=[1, 0])  # unknown extents: may move data
                gv = (a, b, c)
                R.output(gv)
            return gv

    tvm.ir.assert_structural_equal(PermuteToReshape()(Before), Before)


@pytest.mark.parametrize(("shape", "perm", "free"), [
    ((1, 8, 1, 1), (0, 2, 3, 1), True),
    ((1, 1, 1, 8), (0, 3, 1, 2), True),
    ((1, 8, 2, 1), (0, 2, 3, 1), False),
    ((4, 1, 5), (1, 0, 2), True),
    ((4, 1, 5), (2, 1, 0), False),
])
def test_size1_rule_matches_numpy(shape: tuple[int, ...], perm: tuple[int, ...],
                                  free: bool) -> None:
    """The rule is exactly "the transpose is a reshape": checked against numpy."""
    x = np.arange(int(np.prod(shape))).reshape(shape)
    t = np.transpose(x, perm)
    assert moves_only_unit_axes(shape, perm) == free
    assert np.array_equal(t.reshape(-1), x.reshape(-1)) == free
