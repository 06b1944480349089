"""PermuteIntoGather: a permute of what a gather picked, when it only reorders the picked
positions, becomes the order the gather picks them in.

``nn.Unfold`` (``F.unfold``: RedNet's involution, T2T-ViT's soft split, VOLO's outlook
attention, hand-written im2col) imports as a gather of the padded map's flat positions
(``take(x, index, axis)`` with an index built from ``arange``), a reshape of the gathered axis
into (kernel row, output row, kernel column, output column), a permute to (kernel row, kernel
column, output row, output column) and a reshape. The permute moves the whole unfolded tensor
(k² times the map) at run time, in NCHW as in NHWC. But ``take`` picks any order for free:
with the index permuted the same way (a constant, computed when the program is compiled) the
gather writes the positions in the permuted order and the permute is gone.

Taken where the chain from the gather (reshapes, permutes) only reorders the atoms of the
gathered axis, the others keeping their order and place, and the index is known when the
program is compiled (derived from constants and weights alone). The same elements in the
same places: exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator

from cl_validate.compile.passes._util import FREE, rebind, relax_function_pass
from cl_validate.compile.passes.movement_chains import MovementChains, fold_chain, is_movement
from cl_validate.ir import (
    is_identity,
    is_weight_derived,
    ndim,
    op_name,
    static_shape,
)


@dataclass(frozen=True)
class _Plan:
    data: relax.Expr
    index: relax.Expr
    axis: int
    mode: str
    block: tuple[int, ...]  # the gathered axis viewed as these extents
    order: tuple[int, ...]  # ... and permuted so


def _split_at(group: tuple[int, ...], perm: tuple[int, ...], edge: int
              ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """`group` (extents in memory order) and `perm` with the group that spans the element
    offset `edge` (a product of the leading extents) cut in two there; None if it cannot be."""
    acc = 1
    for g, extent in enumerate(group):
        if acc < edge < acc * extent:
            if edge % acc or (acc * extent) % edge:
                return None
            cut = (*group[:g], edge // acc, acc * extent // edge, *group[g + 1:])
            renumber = [[i] if i < g else [i, i + 1] if i == g else [i + 1] for i in perm]
            return cut, tuple(i for r in renumber for i in r)
        acc *= extent
    return group, perm


def _block_order(shape: tuple[int, ...], axis: int, group: tuple[int, ...],
                 perm: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Where the chain's ``(group, perm)`` only reorders the parts of `axis` (the groups
    that make it up, cut at its edges): those parts' extents and their order; None
    otherwise."""
    outer = math.prod(shape[:axis])
    for edge in (outer, outer * shape[axis]):
        found = _split_at(group, perm, edge)
        if found is None:
            return None
        group, perm = found
    bounds, acc = [1], 1
    for g in group:
        acc *= g
        bounds.append(acc)
    if outer not in bounds or outer * shape[axis] not in bounds:
        return None
    s, e = bounds.index(outer), bounds.index(outer * shape[axis])
    if s >= e:
        return None
    pos = [p for p in perm if not s <= p < e]
    at = [i for i, p in enumerate(perm) if s <= p < e]
    if pos != sorted(pos) or at != list(range(at[0], at[0] + e - s)) or \
            (at[0] and perm[at[0] - 1] >= s) or (at[-1] + 1 < len(perm) and perm[at[-1] + 1] < e):
        return None  # the other groups move, or sit between the gathered ones
    order = tuple(perm[i] - s for i in at)
    return (tuple(group[s:e]), order) if not is_identity(order) else None


def _plans(func: relax.Function) -> dict[relax.Var, _Plan]:
    chains = MovementChains(func)
    plans: dict[relax.Var, _Plan] = {}
    for var, value in chains.values.items():
        if not is_movement(value) or not chains.is_chain_end(var):
            continue
        chain = chains.chain(var)
        root = chain.root if chain is not None else None
        take = chains.values.get(root) if isinstance(root, relax.Var) else None
        if chain is None or chain.cost == FREE or op_name(take) != "relax.take" or \
                len(chains.uses.get(root, [])) != 1 or take.attrs.axis is None:  # type: ignore[union-attr]
            continue
        data, index = take.args[0], take.args[1]  # type: ignore[union-attr]
        shape = static_shape(root)
        if ndim(index) != 1 or not is_weight_derived(index, chains.weights) or \
                shape is None or None in shape:
            continue
        axis = int(take.attrs.axis) % len(shape)  # type: ignore[union-attr]
        folded = fold_chain(shape, chain.steps)  # type: ignore[arg-type]
        found = _block_order(shape, axis, *folded) if folded else None  # type: ignore[arg-type]
        if found is not None:
            plans[var] = _Plan(data, index, axis, str(take.attrs.mode),  # type: ignore[union-attr]
                               *found)
    return plans


def _reordered(m: PyExprMutator, plan: _Plan, var: relax.Var) -> relax.Expr:
    """The gather with its index permuted, viewed as `var`."""
    emit = m.builder_.emit
    index = emit(relax.op.reshape(m.visit_expr(plan.index), list(plan.block)))
    index = emit(relax.op.permute_dims(index, list(plan.order)))
    index = emit(relax.op.reshape(index, [math.prod(plan.block)]))
    picked = emit(relax.op.take(m.visit_expr(plan.data), index, plan.axis, plan.mode))
    shape = static_shape(var)
    assert shape is not None  # the plan's chain has a static shape
    return relax.op.reshape(picked, list(shape))


def permute_into_gather(func: relax.Function) -> relax.Function:
    """Every permute that only reorders what one gather picked, folded into its index."""
    return rebind(func, _plans(func), _reordered)


PermuteIntoGather = relax_function_pass("PermuteIntoGather")(permute_into_gather)

__all__ = ["PermuteIntoGather", "permute_into_gather"]
