"""cleanup_passes(): the order, and the whole list on IR shapes ConvertLayout does not make
but other callers might (several functions, several blocks, symbolic shapes)."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from cl_validate.compile.passes import (
    CancelPermutes,
    DropRoundTrips,
    ElideBroadcasts,
    FoldMovementChains,
    HoistChainSteps,
    HoistPermutes,
    InterleaveConcats,
    NarrowMovements,
    PermuteToReshape,
    ReadSlicesAtSource,
    ShareChainLayouts,
    SinkPads,
    SinkPermutes,
    SinkQuantizePairs,
    cleanup_passes,
)


def test_order() -> None:
    names = [p.info.name for p in cleanup_passes()]
    assert names == [SinkQuantizePairs().info.name,
                     ElideBroadcasts().info.name, CancelPermutes().info.name,
                     HoistChainSteps().info.name, SinkPermutes().info.name,
                     NarrowMovements().info.name, DropRoundTrips().info.name,
                     HoistPermutes().info.name,
                     ShareChainLayouts().info.name, SinkPads().info.name,
                     FoldMovementChains().info.name,
                     InterleaveConcats().info.name,
                     ReadSlicesAtSource().info.name,
                     PermuteToReshape().info.name,
                     "CanonicalizeBindings"]


def test_every_function_symbolic_shapes_and_a_second_block() -> None:
    @I.ir_module
    class Before:
        @R.function
        def helper(x: R.Tensor((1, 8, 4, 4), "float32")) -> R.Tensor((1, 8, 4, 4), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 2, 3, 1])
                b = R.permute_dims(a, axes=[0, 3, 1, 2])
                gv = R.clip(b, 0, 6)
                R.output(gv)
            return gv

        @R.function
        def main(x: R.Tensor(("n", 4, 4, 8), "float32"), y: R.Tensor((1, 8, 4, 4), "float32")):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                b = R.clip(a, 0, 6)
                c = R.permute_dims(b, axes=[0, 2, 3, 1])
                o = R.nn.relu(c)
                R.output(o)
            with R.dataflow():
                h = Before.helper(y)
                gv = (o, h)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def helper(x: R.Tensor((1, 8, 4, 4), "float32")) -> R.Tensor((1, 8, 4, 4), "float32"):
            with R.dataflow():
                gv = R.clip(x, 0, 6)
                R.output(gv)
            return gv

        @R.function
        def main(x: R.Tensor(("n", 4, 4, 8), "float32"), y: R.Tensor((1, 8, 4, 4), "float32")):
            with R.dataflow():  # CanonicalizeBindings merges the blocks
                b = R.clip(x, 0, 6)
                o = R.nn.relu(b)
                h = Expected.helper(y)
                gv = (o, h)
                R.output(gv)
            return gv

    after = tvm.transform.Sequential(cleanup_passes())(Before)
    relax.analysis.well_formed(after)
    tvm.ir.assert_structural_equal(after, Expected)
