"""SinkPads: a pad read by a chain of reshapes and permutes that keeps each padded axis whole
runs after the chain, so the chain's transpose moves the map before it is padded and can
fold with the movement before the pad.

VOLO's outlook attention pads its values for the unfold (``F.unfold(v, 3, padding=1)`` on
``v = self.v(x).permute(0, 3, 1, 2)``) and then reads the padded map heads-first: ``pad ->
reshape(heads, head_dim, H·W) -> permute``. The pad sits between the model's permute into
NCHW and the chain's permute, so neither FoldMovementChains (which walks through movement
ops only) nor the product before them can see the two as one transpose. A pad along whole
axes commutes with any view and permute that keeps those axes whole: ``chain(pad(x))`` is
``reshape(pad'(permute(reshape(x))))``, the pad widths moved to where the chain puts the
padded axes. Exact in every pad mode (each padded line is padded as before).

Taken where the chain really moves data (its permute is not a view), every padded axis is
one axis of the chain's grouped view (not split, not merged with another), the pad is read
by the chain alone, what it pads is itself a movement (a reshape or permute of a computed
value, read by the pad alone) and the shapes are static. The permute then moves the
unpadded map, and FoldMovementChains makes it and the movement before the pad one transpose
(or none). A pad after any other op is left where it is: moved, its transform would only
be smaller, and would read a view where it read that op.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator

from cl_validate.compile.passes._plan import remake, with_fields
from cl_validate.compile.passes._util import FREE, rebind, relax_function_pass
from cl_validate.compile.passes.movement_chains import MovementChains, cut_axis, fold_chain
from cl_validate.ir import is_weight_derived, mark_origin, op_name, static_shape

PAD_OP = "relax.nn.pad"


@dataclass(frozen=True)
class _Plan:
    pad: relax.Call
    group: tuple[int, ...]  # the unpadded map viewed so
    perm: tuple[int, ...]  # ... and permuted so
    widths: tuple[int, ...]  # the pad's widths there
    origin: str | None  # the chain's permutes' origin


def _whole_axes(shape: tuple[int, ...], group: tuple[int, ...], perm: tuple[int, ...],
                axes: list[int]) -> tuple[tuple[int, ...], tuple[int, ...], dict[int, int]] | None:
    """`group` and `perm` (`shape`'s elements viewed row-major as `group`, permuted so) cut at
    the edges of each of `axes`, and for each of them the one group that is exactly that
    axis; None where the chain splits one."""
    starts = {}
    for axis in axes:
        cut = cut_axis(shape, axis, group, perm)
        if cut is None or cut[3] - cut[2] != 1:
            return None  # split by the chain
        group, perm, starts[axis], _ = cut
    # a later cut renumbers the groups after it: each axis's group once all are cut
    return group, perm, {axis: cut_axis(shape, axis, group, perm)[2]  # type: ignore[index]
                         for axis in starts}


def _moved_for_it(chains: MovementChains, x: relax.Expr) -> bool:
    """`x` (a pad's input) is a movement of a computed value read by the pad alone: the
    chain after the pad can then fold with it."""
    return isinstance(x, relax.Var) and op_name(chains.values.get(x)) in chains.MOVES and \
        len(chains.uses.get(x, [])) == 1 and not is_weight_derived(x, chains.weights)


def _plans(func: relax.Function) -> dict[relax.Var, _Plan]:
    chains = MovementChains(func)
    plans: dict[relax.Var, _Plan] = {}
    for end in chains.values:
        if op_name(chains.values[end]) not in chains.MOVES or not chains.is_chain_end(end):
            continue
        chain = chains.chain(end)
        if chain is None or chain.cost == FREE or not isinstance(chain.root, relax.Var):
            continue
        pad = chains.values.get(chain.root)
        if op_name(pad) != PAD_OP or len(chains.uses.get(chain.root, [])) != 1 or \
                len(pad.args) != 1 or not _moved_for_it(chains, pad.args[0]):  # type: ignore[union-attr]
            continue
        shape, before = static_shape(chain.root), static_shape(pad.args[0])  # type: ignore[union-attr]
        if shape is None or before is None or None in shape or None in before:
            continue
        widths = [int(w) for w in pad.attrs.pad_width]  # type: ignore[union-attr]
        folded = fold_chain(shape, chain.steps)  # type: ignore[arg-type]
        if folded is None or len(widths) != 2 * len(shape):
            continue
        padded = [a for a in range(len(shape)) if widths[2 * a] or widths[2 * a + 1]]
        cut = _whole_axes(shape, *folded, padded)  # type: ignore[arg-type]
        if cut is None:
            continue
        group, perm = list(cut[0]), cut[1]
        new_widths = [0] * (2 * len(group))
        for axis, k in cut[2].items():
            group[k] = before[axis]  # type: ignore[assignment]
            at = perm.index(k)
            new_widths[2 * at:2 * at + 2] = widths[2 * axis:2 * axis + 2]
        plans[end] = _Plan(pad, tuple(group), tuple(perm), tuple(new_widths),  # type: ignore[arg-type]
                           chain.origin)
    return plans


def _after_chain(m: PyExprMutator, plan: _Plan, var: relax.Var) -> relax.Expr:
    emit = m.builder_.emit
    x = m.visit_expr(plan.pad.args[0])
    if static_shape(x) != plan.group:
        x = emit(relax.op.reshape(x, list(plan.group)))
    x = emit(mark_origin(relax.op.permute_dims(x, list(plan.perm)), plan.origin))
    padded = m.builder_.normalize(remake(plan.pad, [x], with_fields(
        plan.pad.attrs, pad_width=list(plan.widths))))
    shape = static_shape(var)
    if static_shape(padded) == shape:
        return padded
    return relax.op.reshape(emit(padded), list(shape))  # type: ignore[arg-type]


def sink_pads(func: relax.Function) -> relax.Function:
    """Every pad read by a data-moving chain that keeps its padded axes whole, moved after
    the chain's reshape and permute."""
    return rebind(func, _plans(func), _after_chain)


SinkPads = relax_function_pass("SinkPads")(sink_pads)

__all__ = ["SinkPads", "sink_pads"]
