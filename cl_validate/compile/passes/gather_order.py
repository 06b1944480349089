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

``PermuteBeforeGather`` takes the chains that also move the other axes (VOLO's values: the
channels split into heads and head channels, the positions moved between them), where the
gathered atoms stay adjacent: the gather then picks from its data permuted so (the other
axes in the chain's order, the gathered axis where its atoms end up), in the permuted
index's order. The permute then moves the data instead of what was picked: k² times fewer
elements for a k×k unfold. Taken only where the index is at least as long as the gathered axis
(the data no larger than what is picked from it), so it never moves more than before; where
the data is a constant (a relative-position table), the permute folds away. Exact too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator

from cl_validate.compile.passes._util import FREE, rebind, relax_function_pass
from cl_validate.compile.passes.movement_chains import (
    MovementChains,
    cut_axis,
    fold_chain,
    is_movement,
)
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
    #: the data viewed as these extents, permuted so before the gather, and the group that
    #: is the gathered axis (None: the data as it is)
    data_order: tuple[tuple[int, ...], tuple[int, ...], int] | None = None


def _block_order(shape: tuple[int, ...], axis: int, group: tuple[int, ...],
                 perm: tuple[int, ...], data_extent: int | None = None) -> tuple[
                     tuple[int, ...], tuple[int, ...],
                     tuple[tuple[int, ...], tuple[int, ...], int] | None] | None:
    """The parts of `axis` (the groups that make it up, cut at its edges), the order the
    chain puts them in, and how the data must be viewed and permuted first (None: as it is).
    Without `data_extent`, only chains that leave the other groups in order and place; with
    it (the data's extent of the gathered axis), only those that move them (the gathered
    parts adjacent in the chain's result), where the data is no larger than what is picked.
    None where the chain is not of that kind."""
    found = cut_axis(shape, axis, group, perm)
    if found is None:
        return None
    group, perm, s, e = found
    at = [i for i, p in enumerate(perm) if s <= p < e]
    if at != list(range(at[0], at[0] + e - s)):
        return None  # other groups sit between the gathered ones
    block, order = tuple(group[s:e]), tuple(perm[i] - s for i in at)

    def renumber(ps: tuple[int, ...]) -> tuple[int, ...]:  # the gathered groups as one
        return tuple(p if p < s else p - (e - s) + 1 for p in ps)

    data_perm = (*renumber(perm[:at[0]]), s, *renumber(perm[at[-1] + 1:]))
    if is_identity(data_perm):
        if data_extent is not None or is_identity(order):
            return None
        return block, order, None
    if data_extent is None or math.prod(block) < data_extent:
        return None  # not a reorder alone, or the data larger than what is picked from it
    return block, order, ((*group[:s], data_extent, *group[e:]), data_perm, s)


def _plans(func: relax.Function, move_data: bool) -> dict[relax.Var, _Plan]:
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
        extent = None
        if move_data:  # the data's extent of the gathered axis
            data_shape = static_shape(data)
            extent = data_shape[axis] if data_shape else None
            if extent is None:
                continue
        found = _block_order(shape, axis, *folded, extent) if folded else None  # type: ignore[arg-type,misc]
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
    data, axis = m.visit_expr(plan.data), plan.axis
    if plan.data_order is not None:  # the other axes put in the chain's order first
        atoms, data_perm, gathered = plan.data_order
        data = emit(relax.op.reshape(data, list(atoms)))
        data = emit(relax.op.permute_dims(data, list(data_perm)))
        axis = data_perm.index(gathered)
    picked = emit(relax.op.take(data, index, axis, plan.mode))
    shape = static_shape(var)
    assert shape is not None  # the plan's chain has a static shape
    return relax.op.reshape(picked, list(shape))


def permute_into_gather(func: relax.Function) -> relax.Function:
    """Every permute that only reorders what one gather picked, folded into its index."""
    return rebind(func, _plans(func, move_data=False), _reordered)


def permute_before_gather(func: relax.Function) -> relax.Function:
    """Every permute of what one gather picked that also moves its other axes, moved onto the
    gather's data (the picked positions' order folded into its index)."""
    return rebind(func, _plans(func, move_data=True), _reordered)


PermuteIntoGather = relax_function_pass("PermuteIntoGather")(permute_into_gather)
PermuteBeforeGather = relax_function_pass("PermuteBeforeGather")(permute_before_gather)

__all__ = ["PermuteBeforeGather", "PermuteIntoGather", "permute_before_gather",
           "permute_into_gather"]
