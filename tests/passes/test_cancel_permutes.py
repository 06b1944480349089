"""CancelPermutes: golden Before/Expected IR."""

from __future__ import annotations

import tvm
from tvm.script import ir as I
from tvm.script import relax as R

from cl_validate.compile.passes import CancelPermutes


def _check(before: tvm.IRModule, expected: tvm.IRModule) -> None:
    after = CancelPermutes()(before)
    tvm.ir.assert_structural_equal(after, expected)


def test_inverse_pair_cancels() -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 16, 16, 8), "float32")) -> R.Tensor((1, 16, 16, 8), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                b = R.permute_dims(a, axes=[0, 2, 3, 1])
                gv = R.nn.relu(b)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 16, 16, 8), "float32")) -> R.Tensor((1, 16, 16, 8), "float32"):
            with R.dataflow():
                gv = R.nn.relu(x)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_chain_folds_into_one_permute() -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((2, 3, 4, 5), "float32")) -> R.Tensor((5, 3, 2, 4), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 2, 3, 1])  # (2, 4, 5, 3)
                b = R.permute_dims(a, axes=[3, 1, 0, 2])  # (3, 4, 2, 5)
                c = R.permute_dims(b, axes=[3, 0, 2, 1])  # (5, 3, 2, 4)
                gv = R.nn.relu(c)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((2, 3, 4, 5), "float32")) -> R.Tensor((5, 3, 2, 4), "float32"):
            with R.dataflow():
                c = R.permute_dims(x, axes=[3, 1, 0, 2])
                gv = R.nn.relu(c)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_identity_permute_disappears() -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 8, 4, 4), "float32")) -> R.Tensor((1, 8, 4, 4), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 1, 2, 3])
                gv = R.nn.relu(a)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 8, 4, 4), "float32")) -> R.Tensor((1, 8, 4, 4), "float32"):
            with R.dataflow():
                gv = R.nn.relu(x)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_intermediate_with_another_user_is_kept() -> None:
    """Only the consumer side is rewritten: ``a`` stays for ``s``, ``b`` reads ``x``."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 16, 16, 8), "float32")
                 ) -> R.Tuple(R.Tensor((1, 8, 16, 16), "float32"),
                              R.Tensor((1, 16, 16, 8), "float32")):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                s = R.sigmoid(a)
                b = R.permute_dims(a, axes=[0, 2, 3, 1])
                r = R.nn.relu(b)
                gv = (s, r)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 16, 16, 8), "float32")
                 ) -> R.Tuple(R.Tensor((1, 8, 16, 16), "float32"),
                              R.Tensor((1, 16, 16, 8), "float32")):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                s = R.sigmoid(a)
                r = R.nn.relu(x)
                gv = (s, r)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_shared_intermediate_chain_does_no_extra_work() -> None:
    """``c`` reads the root directly (one permute, as before); ``a`` and ``b`` stay, each still
    read elsewhere: three permutes before, three after."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 2, 3, 4), "float32")):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 2, 3, 1])
                b = R.permute_dims(a, axes=[0, 2, 3, 1])
                c = R.permute_dims(b, axes=[0, 1, 3, 2])
                gv = (a, b, c)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 2, 3, 4), "float32")):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 2, 3, 1])
                b = R.permute_dims(x, axes=[0, 3, 1, 2])
                c = R.permute_dims(x, axes=[0, 3, 2, 1])
                gv = (a, b, c)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_output_var_becomes_an_alias() -> None:
    """A cancelled permute bound to the function's output var leaves ``gv = x``."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 8, 4, 4), "float32")) -> R.Tensor((1, 8, 4, 4), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 2, 3, 1])
                gv = R.permute_dims(a, axes=[0, 3, 1, 2])
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 8, 4, 4), "float32")) -> R.Tensor((1, 8, 4, 4), "float32"):
            with R.dataflow():
                gv = x
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_duplicate_permutes_of_one_value_merge() -> None:
    """ConvertLayout emits one input permute per consumer; one is enough."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 8, 4, 4), "float32")) -> R.Tensor((1, 4, 4, 8), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 2, 3, 1])
                b = R.permute_dims(x, axes=[0, 2, 3, 1])
                gv = R.add(R.nn.relu(a), R.sigmoid(b))
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 8, 4, 4), "float32")) -> R.Tensor((1, 4, 4, 8), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 2, 3, 1])
                lv = R.nn.relu(a)
                lv1 = R.sigmoid(a)
                gv = R.add(lv, lv1)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_untouched_module_is_returned_as_is() -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 8, 4, 4), "float32")) -> R.Tensor((1, 4, 4, 8), "float32"):
            with R.dataflow():
                gv = R.permute_dims(x, axes=[0, 2, 3, 1])
                R.output(gv)
            return gv

    tvm.ir.assert_structural_equal(CancelPermutes()(Before), Before)
