"""InterleaveConcats: a permute of a view of a concat that interleaves the concat's parts
becomes the concat of the viewed parts — exactly, and only then."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import relax

from cl_validate.compile.passes.hoist_permutes import interleave_concats
from cl_validate.ir import count_permutes

pytestmark = pytest.mark.fuzz


def _function(k: int, shape: tuple[int, ...], axis: int, groups_first: bool,
              axes: tuple[int, ...]) -> relax.Function:
    """``permute_dims(reshape(concat(parts, axis)), axes)``: the concat axis (of k·n) viewed
    as (k, n) or (n, k)."""
    bb = relax.BlockBuilder()
    parts = [relax.Var(f"p{i}", relax.TensorType(shape, "float32")) for i in range(k)]
    with bb.function("main", parts):
        with bb.dataflow():
            whole = bb.emit(relax.op.concat(parts, axis=axis))
            n = shape[axis]
            split = [k, n] if groups_first else [n, k]
            view = [*shape[:axis], *split, *shape[axis + 1:]]
            out = bb.emit_output(relax.op.permute_dims(bb.emit(relax.op.reshape(whole, view)),
                                                       list(axes)))
        bb.emit_func_output(out)
    return bb.get()["main"]


def _expected(args: list[np.ndarray], axis: int, groups_first: bool,
              axes: tuple[int, ...]) -> np.ndarray:
    """What `_function` computes, by numpy: the concat, its axis viewed, permuted."""
    shape, k = args[0].shape, len(args)
    n = shape[axis]
    view = [*shape[:axis], *([k, n] if groups_first else [n, k]), *shape[axis + 1:]]
    return np.concatenate(args, axis).reshape(view).transpose(axes)


@settings(max_examples=20, derandomize=True, deadline=None)
@given(k=st.integers(2, 3), shape=st.lists(st.integers(1, 3), min_size=3, max_size=3),
       axis=st.integers(0, 2), groups_first=st.booleans(), data=st.data())
def test_rewritten_exactly_and_without_a_permute(
        k: int, shape: list[int], axis: int, groups_first: bool, data: st.DataObject,
        run_llvm: Callable[..., list[np.ndarray]]) -> None:
    axes = data.draw(st.permutations(range(4)))
    func = _function(k, tuple(shape), axis, groups_first, tuple(axes))
    after = interleave_concats(func)
    rng = np.random.default_rng(0)
    args = [rng.uniform(-1, 1, size=shape).astype("float32") for _ in range(k)]
    (got,) = run_llvm(_mod(after), *args)
    np.testing.assert_array_equal(got, _expected(args, axis, groups_first, tuple(axes)))
    if after is not func:
        assert count_permutes(_mod(after)) == 0


def test_every_rewrite_of_a_small_concat_is_exact() -> None:
    """Every concat axis, both views and every permute of (2·3 or 3·3) parts: what is
    rewritten (the permutes that interleave the parts) computes the tensor numpy's concat,
    view and transpose compute (every rewrite built into one module, run one by one)."""
    rewritten: dict[str, tuple[relax.Function, list[np.ndarray], np.ndarray]] = {}
    for k, axis, groups_first in itertools.product((2, 3), range(3), (True, False)):
        for axes in itertools.permutations(range(4)):
            func = _function(k, (2, 1, 3), axis, groups_first, axes)
            after = interleave_concats(func)
            if after is func:
                continue
            name = f"f{len(rewritten)}"
            args = [np.full((2, 1, 3), i, "float32") + np.arange(6, dtype="float32").reshape(
                2, 1, 3) / 10 for i in range(k)]
            rewritten[name] = (after.with_attr("global_symbol", name), args,
                               _expected(args, axis, groups_first, axes))
    assert len(rewritten) >= 12
    mod = tvm.IRModule({name: f for name, (f, _, _) in rewritten.items()})
    vm = relax.VirtualMachine(tvm.compile(relax.transform.LegalizeOps()(mod),
                                          target=tvm.target.Target({"kind": "llvm"})),
                              tvm.cpu())
    for name, (_, args, want) in rewritten.items():
        got = vm[name](*map(tvm.runtime.tensor, args)).numpy()
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_channel_shuffles_after_a_concat_are_rewritten() -> None:
    """ShuffleNet's: groups first (``view(N, g, C/g)``), the group axis moved after the
    channels; in NHWC, the channels last."""
    for k, c in itertools.product((2, 3, 4), (1, 3)):
        func = _function(k, (1, 2, 2, c), 3, True, (0, 1, 2, 4, 3))
        assert count_permutes(_mod(interleave_concats(func))) == 0, (k, c)


def test_a_permute_that_does_not_interleave_stays() -> None:
    """Moving the parts' own axes is a real transpose: left as it is."""
    func = _function(2, (1, 2, 3, 4), 3, True, (0, 2, 1, 3, 4))
    assert interleave_concats(func) is func


def _mod(func: relax.Function) -> tvm.IRModule:
    return tvm.IRModule({"main": func})
