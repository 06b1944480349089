"""Shared helpers of the layout cleanup passes: permutation algebra and IR queries.

A permutation ``p`` is read the way ``R.permute_dims(x, axes=p)`` reads it: axis ``i`` of the
result is axis ``p[i]`` of ``x``. Everything here is pure data movement reasoning, so a pass
built on it only ever changes where values sit in memory, never what they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import tvm
from tvm import relax

Perm = tuple[int, ...]
#: A static shape: an int per axis, None for a symbolic extent.
Shape = tuple[int | None, ...]
#: What run-time permutes cost: (transposes that move data, permutes that only move size-1
#: axes). Compared as a tuple: fewer real transposes first, then fewer would-be reshapes.
Cost = tuple[int, int]
FREE: Cost = (0, 0)

PERMUTE_OP = "relax.permute_dims"


# --------------------------------------------------------------------------------------------
# Permutation algebra
# --------------------------------------------------------------------------------------------
def compose(first: Sequence[int], second: Sequence[int]) -> Perm:
    """The one permutation equal to ``permute_dims(permute_dims(x, first), second)``."""
    return tuple(first[i] for i in second)


def inverse(perm: Sequence[int]) -> Perm:
    """The permutation that undoes ``perm``."""
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def is_identity(perm: Sequence[int]) -> bool:
    return all(i == p for i, p in enumerate(perm))


def moves_only_unit_axes(in_shape: Shape, perm: Sequence[int]) -> bool:
    """True if ``perm`` keeps the relative order of every axis whose extent is not 1.

    Such a permute copies every element to the same linear offset: it is a reshape. A symbolic
    extent counts as "not 1", so the answer is never wrong, only sometimes conservative.
    """
    kept = [p for p in perm if in_shape[p] != 1]
    return kept == sorted(kept)


def permute_cost(in_shape: Shape | None, perm: Sequence[int]) -> Cost:
    """What one run-time ``permute_dims(x, perm)`` costs, ``x`` having shape ``in_shape``."""
    if is_identity(perm):
        return FREE
    if in_shape is not None and moves_only_unit_axes(in_shape, perm):
        return (0, 1)
    return (1, 1)


def add_costs(costs: Iterable[Cost]) -> Cost:
    total = FREE
    for c in costs:
        total = (total[0] + c[0], total[1] + c[1])
    return total


# --------------------------------------------------------------------------------------------
# IR queries
# --------------------------------------------------------------------------------------------
def op_name(expr: object) -> str | None:
    """The operator name of a call to a Relax op, else None."""
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        return str(expr.op.name)
    return None


def tensor_type(expr: object) -> relax.TensorType | None:
    ty = getattr(expr, "ty", None)
    return ty if isinstance(ty, relax.TensorType) else None


def ndim(expr: object) -> int | None:
    """Rank of a tensor-typed expression, None if unknown or not a tensor."""
    ty = tensor_type(expr)
    if ty is None or ty.ndim < 0:
        return None
    return int(ty.ndim)


def shape_exprs(expr: object) -> list[object] | None:
    """The shape of a tensor as PrimExprs (symbolic extents kept), None if unknown."""
    ty = tensor_type(expr)
    if ty is None or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    return list(ty.shape.values)


def static_shape(expr: object) -> Shape | None:
    """The shape of a tensor as ints (None per symbolic extent), None if the rank is unknown."""
    dims = shape_exprs(expr)
    if dims is None:
        return None
    return tuple(int(d.value) if isinstance(d, tvm.tirx.IntImm) else None for d in dims)


def permute_axes(call: object) -> Perm | None:
    """The full axes of a ``permute_dims`` call (``axes=None`` reverses), None if not one."""
    if op_name(call) != PERMUTE_OP:
        return None
    assert isinstance(call, relax.Call)
    axes = call.attrs.axes
    if axes is None:
        rank = ndim(call.args[0])
        return None if rank is None else tuple(reversed(range(rank)))
    return tuple(int(a) for a in axes)


def is_tensor_constant(expr: object) -> bool:
    """A tensor literal (IntImm and friends are constants too in 0.27, but not tensors)."""
    return isinstance(expr, tvm.ir.expr.Constant) and tensor_type(expr) is not None


def compile_time_vars(func: relax.Function) -> set[relax.Var]:
    """Vars that depend only on weights (params beyond ``num_input``) and constants.

    A transform of such a value is a weight transform, folded before run time, so moving a
    permute onto it costs nothing at run time. Without ``num_input`` every param is an input.
    """
    attrs = func.attrs
    if attrs is None or "num_input" not in attrs:
        return set()
    known = set(relax.analysis.computable_at_compile_time(func))
    known.update(func.params[int(attrs["num_input"]):])
    return known


def is_compile_time(expr: object, weights: set[relax.Var]) -> bool:
    if isinstance(expr, relax.Var):
        return expr in weights
    return is_tensor_constant(expr)


def bindings(func: relax.Function) -> Iterator[relax.Binding]:
    body = func.body
    if isinstance(body, relax.SeqExpr):
        for block in body.blocks:
            yield from block.bindings


def use_sites(func: relax.Function) -> dict[relax.Var, list[relax.Var | None]]:
    """For each var, the vars whose bindings read it; ``None`` marks a use by the function's
    result (or any use we do not look into, which callers must treat as "needs the value")."""
    uses: dict[relax.Var, list[relax.Var | None]] = {}
    for b in bindings(func):
        for v in relax.analysis.free_vars(b.value):
            uses.setdefault(v, []).append(b.var)
    if isinstance(func.body, relax.SeqExpr):
        for v in relax.analysis.free_vars(func.body.body):
            uses.setdefault(v, []).append(None)
    return uses


def count_permutes(mod: tvm.IRModule, func_name: str = "main", *,
                   runtime_only: bool = True) -> int:
    """Number of non-identity ``permute_dims`` in a function (run-time ones by default)."""
    func = mod[func_name]
    weights = compile_time_vars(func) if runtime_only else set()
    count = 0
    for b in bindings(func):
        axes = permute_axes(b.value)
        if axes is None or is_identity(axes):
            continue
        if runtime_only and is_compile_time(b.value.args[0], weights):
            continue
        count += 1
    return count


def relax_function_pass(
    name: str,
) -> Callable[[Callable[[relax.Function], relax.Function]], Callable[[], tvm.transform.Pass]]:
    """Turn ``rewrite(func) -> func`` into a factory of a Relax function pass.

    A factory rather than a pass object, so every pipeline gets a fresh pass and the pass name
    shows in ``tvm.transform`` instrumentation.
    """

    def deco(rewrite: Callable[[relax.Function], relax.Function]
             ) -> Callable[[], tvm.transform.Pass]:
        def factory() -> tvm.transform.Pass:
            def transform(func: relax.Function, _mod: tvm.IRModule,
                          _ctx: tvm.transform.PassContext) -> relax.Function:
                return rewrite(func)

            return relax.transform.function_pass(transform, opt_level=0, name=name)

        factory.__name__ = name
        factory.__qualname__ = name
        factory.__doc__ = rewrite.__doc__
        return factory

    return deco
