"""Golden Before/Expected IR for the patterns of issue #15: views that split or merge only the
channel axis (or only spatial axes) keep NHWC, pad + pooling with ceil mode, matmul over a
transposed operand, explicit broadcasts, flatten → Linear, and negative axes.

Before is what ConvertLayout leaves (NHWC values, a transpose to NCHW around every op without
a layout rule); Expected is the same computation with no transpose left in the middle.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from cl_validate.compile.passes import (
    ElideBroadcasts,
    FoldFlattenIntoLinear,
    HoistPermutes,
    NormalizeAxes,
    PermuteToReshape,
    SinkPermutes,
)
from cl_validate.compile.passes._movement_ops import view_layout
from cl_validate.ir import count_permutes

T4 = R.Tensor((1, 4, 4, 8), "float32")
NHWC = {"relax.nn.conv2d": ["NHWC", "OHWI"]}


def _check(p: tvm.transform.Pass, before: tvm.IRModule, expected: tvm.IRModule) -> None:
    tvm.ir.assert_structural_equal(p(before), expected)


def test_channel_split_then_sum_over_the_radix() -> None:
    """Split attention: ``x.view(n, r, c // r, h, w).sum(1)`` is a view of the NHWC data."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4) -> R.Tensor((1, 4, 4, 4), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                s = R.reshape(a, R.shape([1, 2, 4, 4, 4]))
                t = R.sum(s, axis=[1], keepdims=False)
                gv = R.permute_dims(t, axes=[0, 2, 3, 1])
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4) -> R.Tensor((1, 4, 4, 4), "float32"):
            with R.dataflow():
                s = R.reshape(x, R.shape([1, 4, 4, 2, 4]))
                t = R.sum(s, axis=[3], keepdims=False)
                gv = t
                R.output(gv)
            return gv

    _check(SinkPermutes(), Before, Expected)


def test_spatial_merge_softmax_and_back() -> None:
    """Global context: ``x.view(n, c, h * w)``, softmax over H·W, and back to (n, c, h, w)."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4) -> T4:
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                m = R.reshape(a, R.shape([1, 8, 16]))
                s = R.nn.softmax(m, axis=2)
                b = R.reshape(s, R.shape([1, 8, 4, 4]))
                gv = R.permute_dims(b, axes=[0, 2, 3, 1])
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4) -> T4:
            with R.dataflow():
                m = R.reshape(x, R.shape([1, 16, 8]))
                s = R.nn.softmax(m, axis=1)
                b = R.reshape(s, R.shape([1, 4, 4, 8]))
                gv = b
                R.output(gv)
            return gv

    _check(SinkPermutes(), Before, Expected)


def test_matmul_over_the_transposed_feature_map() -> None:
    """``(c, h·w) @ (h·w, 1)`` on NHWC data is ``((1, h·w) @ (h·w, c))ᵀ``: the vector's and
    the result's transposes move only size-1 axes."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4, m: R.Tensor((1, 1, 16, 1), "float32")
                 ) -> R.Tensor((1, 1, 8, 1), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                v = R.reshape(a, R.shape([1, 1, 8, 16]))
                gv = R.matmul(v, m)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4, m: R.Tensor((1, 1, 16, 1), "float32")
                 ) -> R.Tensor((1, 1, 8, 1), "float32"):
            with R.dataflow():
                v = R.reshape(x, R.shape([1, 1, 16, 8]))
                lv = R.permute_dims(m, axes=[0, 1, 3, 2])
                gv = R.matmul(lv, v, out_dtype=None)
                gv_1 = R.permute_dims(gv, axes=[0, 1, 3, 2])
                R.output(gv_1)
            return gv_1

    _check(SinkPermutes(), Before, Expected)


def test_pad_then_max_pool_with_ceil_mode() -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(x: T4) -> R.Tensor((1, 2, 2, 8), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                p = R.nn.pad(a, pad_width=[0, 0, 0, 0, 0, 1, 0, 1])
                q = R.nn.max_pool2d(p, pool_size=[3, 3], strides=[2, 2], ceil_mode=True,
                                    layout="NCHW")
                gv = R.permute_dims(q, axes=[0, 2, 3, 1])
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4) -> R.Tensor((1, 2, 2, 8), "float32"):
            with R.dataflow():
                p = R.nn.pad(x, pad_width=[0, 0, 0, 1, 0, 1, 0, 0])
                q = R.nn.max_pool2d(p, pool_size=[3, 3], strides=[2, 2], ceil_mode=True,
                                    layout="NHWC", out_layout="NHWC")
                gv = q
                R.output(gv)
            return gv

    _check(SinkPermutes(), Before, Expected)


def test_permute_of_a_broadcast_moves_to_its_input_and_the_broadcast_goes() -> None:
    """ECA's ``x * y.expand_as(x)``: the gate is permuted, not the feature-map-sized copy."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4, g: R.Tensor((1, 8, 1, 1), "float32")) -> T4:
            with R.dataflow():
                b = R.broadcast_to(g, R.shape([1, 8, 4, 4]))
                t = R.permute_dims(b, axes=[0, 2, 3, 1])
                gv = R.multiply(x, t)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4, g: R.Tensor((1, 8, 1, 1), "float32")) -> T4:
            with R.dataflow():
                lv = R.permute_dims(g, axes=[0, 2, 3, 1])
                gv = R.multiply(x, lv)
                R.output(gv)
            return gv

    _check(ElideBroadcasts(), Before, Expected)


def test_a_broadcast_that_changes_the_result_shape_stays() -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(g: R.Tensor((1, 8, 1, 1), "float32"), y: R.Tensor((1, 8, 1, 4), "float32")):
            with R.dataflow():
                b = R.broadcast_to(g, R.shape([1, 8, 4, 4]))
                gv = R.add(b, y)
                R.output(gv)
            return gv

    _check(ElideBroadcasts(), Before, Before)


def test_flatten_into_linear_permutes_the_weight_rows() -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(x: T4, w: R.Tensor((10, 128), "float32")) -> R.Tensor((1, 10), "float32"):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                f = R.reshape(a, R.shape([1, 128]))
                wt = R.permute_dims(w, axes=[1, 0])
                gv = R.matmul(f, wt)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4, w: R.Tensor((10, 128), "float32")) -> R.Tensor((1, 10), "float32"):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                f = R.reshape(x, R.shape([1, 128]))  # the flatten, of the unpermuted data
                wt = R.permute_dims(w, axes=[1, 0])
                lv1 = R.reshape(wt, R.shape([8, 4, 4, 10]))
                lv2 = R.permute_dims(lv1, axes=[1, 2, 0, 3])
                lv3 = R.reshape(lv2, R.shape([128, 10]))
                gv = R.matmul(f, lv3, out_dtype=None)
                R.output(gv)
            return gv

    _check(FoldFlattenIntoLinear(), Before, Expected)
    assert count_permutes(FoldFlattenIntoLinear()(Before)) == 0  # only the weight's, folded


def test_flatten_of_a_run_time_operand_is_left_alone() -> None:
    """Both operands computed at run time: there is no weight to take the permutation."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4, w: R.Tensor((128, 10), "float32")) -> R.Tensor((1, 10), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                f = R.reshape(a, R.shape([1, 128]))
                gv = R.matmul(f, w)
                R.output(gv)
            return gv

    _check(FoldFlattenIntoLinear(), Before, Before)


def test_negative_axes_are_spelled_out_and_convert_layout_survives_them() -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 3, 8, 8), "float32"), w: R.Tensor((8, 3, 3, 3), "float32")
                 ) -> R.Tensor((1, 8, 8), "float32"):
            with R.dataflow():
                a = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
                b = R.mean(a, axis=[-1], keepdims=True)
                c = R.squeeze(b, axis=[-1])
                gv = R.permute_dims(c, axes=[0, -1, -2])
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 3, 8, 8), "float32"), w: R.Tensor((8, 3, 3, 3), "float32")
                 ) -> R.Tensor((1, 8, 8), "float32"):
            with R.dataflow():
                a = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
                b = R.mean(a, axis=[3], keepdims=True)
                c = R.squeeze(b, axis=[3])
                gv = R.permute_dims(c, axes=[0, 2, 1])
                R.output(gv)
            return gv

    _check(NormalizeAxes(), Before, Expected)
    relax.transform.ConvertLayout(NHWC)(NormalizeAxes()(Before))  # std::bad_alloc without


def test_view_layout_refuses_a_flatten_across_the_carried_order() -> None:
    """(n, c, h, w) → (n, c·h·w) is C-major; NHWC data holds it H-major: no free view."""
    assert view_layout((1, 4, 4, 8), (0, 3, 1, 2), (1, 128)) is None
    assert view_layout((1, 4, 4, 8), (0, 3, 1, 2), (1, 2, 4, 4, 4)) == (
        (1, 4, 4, 2, 4), (0, 3, 4, 1, 2))


def test_take_and_strided_slice_follow_the_data() -> None:
    """``x[:, 0]`` and ``x[:, :2]`` of NCHW data index the channel axis of the NHWC data; the
    single channel left goes back to NHWC by a permute of size-1 axes (a free reshape)."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4) -> R.Tensor((1, 4, 4, 2), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                t = R.take(a, R.const(0, "int64"), axis=1)
                s = R.strided_slice(a, axes=[1], begin=[0], end=[2])
                u = R.multiply(s, R.expand_dims(t, axis=[1]))
                gv = R.permute_dims(u, axes=[0, 2, 3, 1])
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4) -> R.Tensor((1, 4, 4, 2), "float32"):
            with R.dataflow():
                t = R.take(x, R.const(0, "int64"), axis=3)
                s = R.strided_slice(x, axes=[3], begin=[0], end=[2])
                lv3 = R.expand_dims(t, axis=[1])
                lv = R.permute_dims(lv3, axes=[0, 2, 3, 1])
                u = R.multiply(s, lv)
                gv = u
                R.output(gv)
            return gv

    _check(SinkPermutes(), Before, Expected)


def test_transpose_after_a_concat_of_single_channels_moves_onto_them() -> None:
    """Inception-v3's transform_input: channels sliced, rescaled, concatenated in NCHW."""

    @I.ir_module
    class Before:
        @R.function
        def main(a: R.Tensor((1, 1, 4, 4), "float32"), b: R.Tensor((1, 1, 4, 4), "float32")
                 ) -> R.Tensor((1, 4, 4, 2), "float32"):
            with R.dataflow():
                c = R.concat((a, b), axis=1)
                gv = R.permute_dims(c, axes=[0, 2, 3, 1])
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(a: R.Tensor((1, 1, 4, 4), "float32"), b: R.Tensor((1, 1, 4, 4), "float32")
                 ) -> R.Tensor((1, 4, 4, 2), "float32"):
            with R.dataflow():
                lv = R.permute_dims(a, axes=[0, 2, 3, 1])
                lv1 = R.permute_dims(b, axes=[0, 2, 3, 1])
                gv = R.concat((lv, lv1), axis=3)
                R.output(gv)
            return gv

    _check(HoistPermutes(), Before, Expected)
    assert count_permutes(PermuteToReshape()(HoistPermutes()(Before))) == 0


def test_flatten_of_token_rows_into_linear_permutes_the_weight_rows(run_llvm) -> None:
    """A Conformer's subsampled map into tokens: ``s.permute(0, 2, 1, 3).reshape(B, T, C·F)``
    then a Linear (imported as one more reshape to ``(T, C·F)``). In NHWC the permute is
    ``(B, T, F, C) -> (B, T, C, F)``: only the features move, and they move into the weight."""
    import numpy as np

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 7, 5, 4), "float32"), w: R.Tensor((6, 20), "float32")
                 ) -> R.Tensor((7, 6), "float32"):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 1, 3, 2])
                f = R.reshape(a, R.shape([1, 7, 20]))
                rows = R.reshape(f, R.shape([7, 20]))
                wt = R.permute_dims(w, axes=[1, 0])
                gv = R.matmul(rows, wt)
                R.output(gv)
            return gv

    after = FoldFlattenIntoLinear()(Before)
    assert count_permutes(FoldFlattenIntoLinear()(Before)) == 0  # only the weight's, folded
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 7, 5, 4), "float32"), rng.standard_normal((6, 20), "float32")
    np.testing.assert_allclose(run_llvm(after, x, w)[0], run_llvm(Before, x, w)[0], rtol=1e-5,
                               atol=1e-5)


def test_a_view_of_a_view_is_one_reshape() -> None:
    """ECA's pooled channels into its Conv1d: ``squeeze`` then ``reshape`` were fused into a
    copy kernel; one reshape of the pooled value is a free view."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 1, 1, 16), "float32")) -> R.Tensor((1, 16, 1), "float32"):
            with R.dataflow():
                s = R.squeeze(x, axis=[2])
                gv = R.reshape(s, R.shape([1, 16, 1]))
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 1, 1, 16), "float32")) -> R.Tensor((1, 16, 1), "float32"):
            with R.dataflow():
                gv = R.reshape(x, R.shape([1, 16, 1]))
                R.output(gv)
            return gv

    _check(PermuteToReshape(), Before, Expected)
