"""FoldMovementChains: golden IR, and the chain algebra checked against numpy."""

from __future__ import annotations

import random

import numpy as np
import pytest
import tvm
from tvm.script import ir as I
from tvm.script import relax as R

from cl_validate.compile.passes import FoldMovementChains
from cl_validate.compile.passes.movement_chains import Step, fold_chain


def test_shuffle_between_transposes_is_one_transpose() -> None:
    """A model's own NHWC round trip around a channel shuffle: three transposes -> one."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 8, 4, 4), "float32")) -> R.Tensor((1, 8, 4, 4), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 2, 3, 1])
                b = R.reshape(a, R.shape([1, 4, 4, 2, 4]))
                c = R.permute_dims(b, axes=[0, 1, 2, 4, 3])
                d = R.reshape(c, R.shape([1, 4, 4, 8]))
                e = R.permute_dims(d, axes=[0, 3, 1, 2])
                gv = R.nn.relu(e)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 8, 4, 4), "float32")) -> R.Tensor((1, 8, 4, 4), "float32"):
            with R.dataflow():
                lv = R.reshape(x, R.shape([2, 4, 16]))
                lv1 = R.permute_dims(lv, axes=[1, 0, 2])
                e = R.reshape(lv1, R.shape([1, 8, 4, 4]))
                gv = R.nn.relu(e)
                R.output(gv)
            return gv

    tvm.ir.assert_structural_equal(FoldMovementChains()(Before), Expected)


def test_chain_that_moves_nothing_is_one_reshape() -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 8, 1, 1), "float32")) -> R.Tensor((1, 8), "float32"):
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 2, 3, 1])
                b = R.reshape(a, R.shape([1, 1, 8]))
                c = R.permute_dims(b, axes=[2, 0, 1])
                d = R.permute_dims(c, axes=[1, 2, 0])
                gv = R.reshape(d, R.shape([1, 8]))
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 8, 1, 1), "float32")) -> R.Tensor((1, 8), "float32"):
            with R.dataflow():
                gv = R.reshape(x, R.shape([1, 8]))
                R.output(gv)
            return gv

    tvm.ir.assert_structural_equal(FoldMovementChains()(Before), Expected)


def test_needed_transpose_and_shared_chains_are_left_alone() -> None:
    """One real transpose is what the chain needs; and ``b`` is read twice, so folding the
    chain through it would not remove it."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 8, 4, 4), "float32")):
            with R.dataflow():
                a = R.reshape(x, R.shape([1, 2, 4, 16]))
                b = R.permute_dims(a, axes=[0, 2, 1, 3])
                c = R.permute_dims(b, axes=[0, 3, 2, 1])
                gv = (b, c)
                R.output(gv)
            return gv

    tvm.ir.assert_structural_equal(FoldMovementChains()(Before), Before)


def _apply(x: np.ndarray, steps: list[Step]) -> np.ndarray:
    for kind, arg in steps:
        x = np.transpose(x, arg) if kind == "permute" else x.reshape(arg)
    return x


def _random_chain(rng: random.Random) -> tuple[tuple[int, ...], list[Step]]:
    shape = tuple(rng.choice([1, 2, 3, 4, 6]) for _ in range(rng.randint(1, 4)))
    steps: list[Step] = []
    cur = shape
    for _ in range(rng.randint(1, 4)):
        if rng.random() < 0.5:
            perm = list(range(len(cur)))
            rng.shuffle(perm)
            steps.append(("permute", tuple(perm)))
            cur = tuple(cur[p] for p in perm)
        else:  # a random factorization of the element count, unit axes sprinkled in
            total, factors = int(np.prod(cur)), []
            while total > 1:
                f = rng.choice([d for d in range(2, total + 1) if total % d == 0])
                factors.append(f)
                total //= f
            rng.shuffle(factors)
            if len(factors) > 2 and rng.random() < 0.5:
                factors = [factors[0] * factors[1], *factors[2:]]
            cur = tuple(factors) + (1,) * rng.randint(0, 1) or (1,)
            steps.append(("reshape", cur))
    return shape, steps


@pytest.mark.parametrize("seed", range(4))
def test_fold_chain_matches_numpy(seed: int) -> None:
    rng = random.Random(seed)
    folded_any = 0
    for _ in range(300):
        shape, steps = _random_chain(rng)
        x = np.arange(int(np.prod(shape))).reshape(shape)
        want = _apply(x, steps)
        got = fold_chain(shape, steps)
        if got is None:  # some reshapes regroup factors no single transpose can express
            continue
        group_shape, perm = got
        folded_any += 1
        assert np.array_equal(np.transpose(x.reshape(group_shape), perm).reshape(want.shape),
                              want), (shape, steps, got)
    assert folded_any > 200
