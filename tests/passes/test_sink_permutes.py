"""SinkPermutes: golden Before/Expected IR, one test per kind of layout-agnostic op.

The Before modules are what ConvertLayout leaves (NHWC values ``x``/``y``, a transpose to NCHW
around every op it has no rule for); Expected is the same computation with no transpose left
in the middle. ``P``/``PINV`` below are the NHWC->NCHW and NCHW->NHWC axes.
"""

from __future__ import annotations

import tvm
from tvm.script import ir as I
from tvm.script import relax as R

from cl_validate.compile.passes import SinkPermutes

T4 = R.Tensor((1, 4, 4, 8), "float32")


def _check(before: tvm.IRModule, expected: tvm.IRModule) -> None:
    tvm.ir.assert_structural_equal(SinkPermutes()(before), expected)


def test_clip_between_permutes() -> None:
    """ReLU6 / Hardtanh: R.clip has no layout rule in TVM 0.27."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4) -> T4:
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                b = R.clip(a, 0, 6)
                c = R.permute_dims(b, axes=[0, 2, 3, 1])
                gv = R.nn.relu(c)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4) -> T4:
            with R.dataflow():
                b = R.clip(x, 0, 6)
                gv = R.nn.relu(b)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_hardswish_decomposed() -> None:
    """x * clip(x + 3, 0, 6) / 6 as imported: the clips and the ops after them move."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4) -> T4:
            with R.dataflow():
                lv = R.add(x, R.const(3.0, "float32"))
                lv1 = R.permute_dims(lv, axes=[0, 3, 1, 2])
                lv2 = R.clip(lv1, 0, 100)
                lv3 = R.clip(lv2, -100, 6)
                lv4 = R.divide(lv3, R.const(6.0, "float32"))
                lv5 = R.permute_dims(lv4, axes=[0, 2, 3, 1])
                gv = R.multiply(x, lv5)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4) -> T4:
            with R.dataflow():
                lv = R.add(x, R.const(3.0, "float32"))
                lv2 = R.clip(lv, 0, 100)
                lv3 = R.clip(lv2, -100, 6)
                lv4 = R.divide(lv3, R.const(6.0, "float32"))
                gv = R.multiply(x, lv4)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_where_with_all_inputs_permuted() -> None:
    """Softplus / Mish import with R.where (no rule): three transposes in, one out."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4, y: T4) -> T4:
            with R.dataflow():
                c = R.greater(x, R.const(20.0, "float32"))
                ct = R.permute_dims(c, axes=[0, 3, 1, 2])
                xt = R.permute_dims(x, axes=[0, 3, 1, 2])
                yt = R.permute_dims(y, axes=[0, 3, 1, 2])
                w = R.where(ct, xt, yt)
                t = R.tanh(w)
                back = R.permute_dims(t, axes=[0, 2, 3, 1])
                gv = R.multiply(x, back)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4, y: T4) -> T4:
            with R.dataflow():
                c = R.greater(x, R.const(20.0, "float32"))
                w = R.where(c, x, y)
                t = R.tanh(w)
                gv = R.multiply(x, t)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_global_mean_over_hw() -> None:
    """x.mean((2, 3)) after a clip: the axes follow the layout and the (1, 8) result needs no
    permute at all."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4) -> R.Tensor((1, 8), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                b = R.clip(a, 0, 6)
                m = R.mean(b, axis=[2, 3], keepdims=False)
                gv = R.nn.relu(m)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4) -> R.Tensor((1, 8), "float32"):
            with R.dataflow():
                b = R.clip(x, 0, 6)
                m = R.mean(b, axis=[1, 2], keepdims=False)
                gv = R.nn.relu(m)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_squeeze_excite_gate() -> None:
    """mean(keepdims) -> hardsigmoid-like clip -> multiply broadcast over the feature map."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4) -> T4:
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                m = R.mean(a, axis=[2, 3], keepdims=True)
                g = R.clip(m, 0, 1)
                gt = R.permute_dims(g, axes=[0, 2, 3, 1])
                gv = R.multiply(x, gt)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4) -> T4:
            with R.dataflow():
                m = R.mean(x, axis=[1, 2], keepdims=True)
                g = R.clip(m, 0, 1)
                gv = R.multiply(x, g)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_concat_axis_follows() -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(x: T4, y: T4) -> R.Tensor((1, 4, 4, 16), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                b = R.clip(a, 0, 6)
                c = R.permute_dims(y, axes=[0, 3, 1, 2])
                d = R.concat((b, c), axis=1)
                e = R.permute_dims(d, axes=[0, 2, 3, 1])
                gv = R.nn.relu(e)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4, y: T4) -> R.Tensor((1, 4, 4, 16), "float32"):
            with R.dataflow():
                b = R.clip(x, 0, 6)
                d = R.concat((b, y), axis=3)
                gv = R.nn.relu(d)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_split_parts_follow() -> None:
    """ShuffleNet's chunk(2, dim=1): a split returns a tuple; its parts keep the layout."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4) -> T4:
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                s = R.split(a, indices_or_sections=2, axis=1)
                s0 = s[0]
                s1 = s[1]
                r = R.clip(s1, 0, 6)
                d = R.concat((s0, r), axis=1)
                e = R.permute_dims(d, axes=[0, 2, 3, 1])
                gv = R.nn.relu(e)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4) -> T4:
            with R.dataflow():
                s = R.split(x, indices_or_sections=2, axis=3)
                s0 = s[0]
                s1 = s[1]
                r = R.clip(s1, 0, 6)
                d = R.concat((s0, r), axis=3)
                gv = R.nn.relu(d)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_softmax_and_max_pool_attrs_follow() -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(x: T4) -> R.Tensor((1, 2, 2, 8), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                b = R.clip(a, 0, 6)
                c = R.nn.softmax(b, axis=1)
                d = R.nn.max_pool2d(c, pool_size=[2, 2], strides=[2, 2], layout="NCHW")
                e = R.permute_dims(d, axes=[0, 2, 3, 1])
                gv = R.nn.relu(e)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4) -> R.Tensor((1, 2, 2, 8), "float32"):
            with R.dataflow():
                b = R.clip(x, 0, 6)
                c = R.nn.softmax(b, axis=3)
                d = R.nn.max_pool2d(c, pool_size=[2, 2], strides=[2, 2], layout="NHWC",
                                    out_layout="NHWC")
                gv = R.nn.relu(d)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_weight_operand_is_permuted_instead() -> None:
    """A channels-first LayerNorm's affine weight (8, 1, 1) broadcasts against NCHW; in NHWC
    it needs a (1, 1, 1, 8) layout: a transform of a weight, folded at compile time."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4, w: R.Tensor((8, 1, 1), "float32")) -> T4:
            R.func_attr({"num_input": 1})
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                m = R.multiply(w, a)
                e = R.permute_dims(m, axes=[0, 2, 3, 1])
                gv = R.nn.relu(e)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4, w: R.Tensor((8, 1, 1), "float32")) -> T4:
            R.func_attr({"num_input": 1})
            with R.dataflow():
                w4 = R.reshape(w, R.shape([1, 8, 1, 1]))
                wt = R.permute_dims(w4, axes=[0, 2, 3, 1])
                m = R.multiply(wt, x)
                gv = R.nn.relu(m)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_channel_shuffle_becomes_one_transpose() -> None:
    """reshape -> transpose -> reshape written for NCHW, between two boundary transposes: the
    whole thing is one transpose in NHWC (the shuffle itself), not three."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4) -> T4:
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                r1 = R.reshape(a, R.shape([1, 2, 4, 4, 4]))
                t = R.permute_dims(r1, axes=[0, 2, 1, 3, 4])
                r2 = R.reshape(t, R.shape([1, 8, 4, 4]))
                e = R.permute_dims(r2, axes=[0, 2, 3, 1])
                gv = R.nn.relu(e)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4) -> T4:
            with R.dataflow():
                lv = R.reshape(x, R.shape([16, 2, 4]))
                lv1 = R.permute_dims(lv, axes=[0, 2, 1])
                r2 = R.reshape(lv1, R.shape([1, 4, 4, 8]))
                gv = R.nn.relu(r2)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_no_gain_no_change() -> None:
    """The transposed value is also read by a reshape (no layout-agnostic op) and the clip's
    result leaves the function in NCHW: converting would add a transpose, so nothing moves."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                b = R.clip(a, 0, 6)
                f = R.reshape(a, R.shape([1, 128]))
                gv = (b, f)
                R.output(gv)
            return gv

    _check(Before, Before)
