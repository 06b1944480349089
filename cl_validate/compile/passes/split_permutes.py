"""One transpose before a split instead of one after each part (XCiT's q, k and v).

A projection's output ``T`` split into parts along one axis (``strided_slice`` of one index,
the axis then reshaped away: ``qkv.unbind``) whose parts each end, through layout-agnostic
ops, in the same transpose ``Q`` (the attention's BSHD) costs one transpose per part. ``T``
transposed once, by ``Q`` lifted to ``T``'s rank with the split axis outermost, gives every
part already transposed: each part is then ``permute_dims(part', inverse(Q))``, a permute
SinkPermutes carries down the part's ops until it meets ``Q`` and both vanish.

A ``relax.split`` into parts of several indices (HaloNet's keys and values, split from one
unfolded projection) is the same with nothing to lift: each part keeps ``T``'s rank, so ``T``
is transposed by ``Q`` itself and split along the axis ``Q`` moves the split axis to.

`hoist` only rewrites; SinkPermutes (`cl_validate.compile.passes.sink_rounds`) runs it as a
kind of round and keeps it only when the run-time transform cost goes down (a part whose ``Q``
is not reached keeps its permute, and the round is discarded), and for a ``relax.split`` also
before its first round (`sink_rounds.splits_first`). Pure data movement: exact.
"""

from __future__ import annotations

from collections.abc import Sequence

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._layout_ops import LAYOUT_AGNOSTIC_OPS
from cl_validate.compile.passes._util import inverse
from cl_validate.ir import (
    PASS,
    Part,
    is_identity,
    known_shape,
    mark_origin,
    op_name,
    origin_mark,
    origin_parts,
    permute_axes,
    strided_slice_args,
    use_sites,
    weight_derived,
)

_SLICE, _RESHAPE, _SPLIT = "relax.strided_slice", "relax.reshape", "relax.split"
#: How many ops down a part may end in its transpose
_NEAR = 12
_PART = Part(PASS, None, "one transpose shared by the parts of a split")
#: The mark of a shared transpose: SinkPermutes does not carry it back down into the parts
SHARED = origin_mark([_PART])
#: The parts of that mark (attribution traces a shared transpose as the parts' own)
SHARED_PARTS = frozenset({_PART})


def is_shared(call: object) -> bool:
    """A transpose `hoist` put before a split."""
    return _PART in origin_parts(call)


def _part(value: relax.Expr | None, rank: int) -> int | None:
    """The axis a one-index, unit-stride slice of a rank-`rank` tensor takes."""
    if op_name(value) != _SLICE:
        return None
    args = strided_slice_args(value)  # type: ignore[arg-type]
    if args is None or len(args[0]) != 1 or (len(args) > 3 and any(
            int(s) != 1 for s in args[3])):
        return None
    begin, end = int(args[1][0]), int(args[2][0])
    return int(args[0][0]) % rank if end - begin == 1 else None


def _ending(start: relax.Var, values: dict[relax.Var, relax.Expr],
            uses: dict[relax.Var, list[relax.Var | None]]) -> tuple[int, ...] | None:
    """The one transpose the ops reading `start` (layout-agnostic ones, any fan-out) end in.
    Only ops that keep `start`'s rank are followed: past a reduction, a broadcast to more
    axes or a reshape, a transpose permutes other axes than the part's (NesT's 5-d heads,
    read by a 4-d attention), and is not the part's."""
    shape = known_shape(start)
    if shape is None:
        return None
    rank = len(shape)
    found: set[tuple[int, ...]] = set()
    frontier, seen = [start], {start}
    for _ in range(_NEAR):
        nxt = []
        for v in frontier:
            for u in uses.get(v, []):
                if u is None or u in seen:
                    continue
                seen.add(u)
                value = values.get(u)
                axes = permute_axes(value)
                out = known_shape(u)
                if out is None or len(out) != rank:
                    return None  # read where the part's axes are not the ones permuted
                if axes is not None:
                    found.add(axes)
                elif op_name(value) in LAYOUT_AGNOSTIC_OPS:
                    nxt.append(u)
                else:
                    return None  # read by an op with a layout of its own
        frontier = nxt
        if not frontier:
            break
    return found.pop() if len(found) == 1 else None


def _plans(func: relax.Function) -> dict[relax.Var, tuple[tuple[int, ...], int]]:
    """Per split source ``T``: the lifted permutation and the split axis."""
    values = {b.var: b.value for blk in func.body.blocks for b in blk.bindings
              if isinstance(b, relax.VarBinding)}
    uses = use_sites(func)
    derived = weight_derived(func)
    plans: dict[relax.Var, tuple[tuple[int, ...], int]] = {}
    for t in values:
        shape = known_shape(t)
        readers = uses.get(t, [])
        if shape is None or len(readers) < 2 or t in derived or None in readers:
            continue
        rank = len(shape)
        axes = {_part(values.get(r), rank) for r in readers}  # type: ignore[arg-type]
        if len(axes) != 1 or None in axes:
            continue
        (axis,) = axes
        assert axis is not None
        kept = [d for i, d in enumerate(shape) if i != axis]
        ends = set()
        for r in readers:
            views = uses.get(r, [])  # type: ignore[arg-type]
            if len(views) != 1 or views[0] is None or op_name(values.get(views[0])) != \
                    _RESHAPE or known_shape(views[0]) != tuple(kept):
                break
            ends.add(_ending(views[0], values, uses))
        else:
            if len(ends) == 1 and None not in ends:
                (q,) = ends
                assert q is not None and not is_identity(q)
                outer = [i for i in range(rank) if i != axis]  # R's axis j is T's outer[j]
                plans[t] = ((axis, *(outer[j] for j in q)), axis)
    return plans


def split_plans(func: relax.Function) -> dict[relax.Var, tuple[int, ...]]:
    """Per ``relax.split`` binding whose every part ends in the same transpose ``Q`` (and is
    read only through its getitem): ``Q``."""
    values = {b.var: b.value for blk in func.body.blocks for b in blk.bindings
              if isinstance(b, relax.VarBinding)}
    uses = use_sites(func)
    derived = weight_derived(func)
    plans: dict[relax.Var, tuple[int, ...]] = {}
    for t, value in values.items():
        if op_name(value) != _SPLIT or t in derived or known_shape(value.args[0]) is None:
            continue
        parts = uses.get(t, [])
        if not parts or None in parts or any(
                not isinstance(values.get(u), relax.TupleGetItem) for u in parts):  # type: ignore[arg-type]
            continue
        ends = {_ending(u, values, uses) for u in parts}  # type: ignore[arg-type]
        if len(ends) == 1 and None not in ends:
            (q,) = ends
            assert q is not None and not is_identity(q)
            plans[t] = q
    return plans


@mutator
class _SplitHoister(PyExprMutator):  # type: ignore[misc]
    """Each planned split made of its source transposed by ``Q``; each part read back
    through ``Q``'s inverse (which SinkPermutes carries down to ``Q``)."""

    def __init__(self, plans: dict[relax.Var, tuple[int, ...]]) -> None:
        super().__init__()
        self.plans = plans
        self.split: dict[relax.Var, relax.Var] = {}  # the old split -> the new one

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        var, value = binding.var, binding.value
        q = self.plans.get(var)
        if q is not None:
            shared = self.builder_.emit(mark_origin(
                relax.op.permute_dims(self.visit_expr(value.args[0]), list(q)), SHARED))
            sections = value.attrs.indices_or_sections
            sections = int(sections) if isinstance(sections, int) or not hasattr(
                sections, "__len__") else [int(i) for i in sections]
            self.split[var] = self.builder_.emit(relax.op.split(
                shared, sections, axis=list(q).index(int(value.attrs.axis) % len(q))))
            return
        if isinstance(value, relax.TupleGetItem) and value.tuple_value in self.split:
            t = value.tuple_value
            part = self.builder_.emit(relax.TupleGetItem(self.split[t], value.index))
            back = self.builder_.emit(relax.op.permute_dims(part, list(inverse(self.plans[t]))))
            self.set_var_remap(var, back)
            return
        super().visit_var_binding_(binding)


@mutator
class _Hoister(PyExprMutator):  # type: ignore[misc]
    def __init__(self, func: relax.Function,
                 plans: dict[relax.Var, tuple[tuple[int, ...], int]]) -> None:
        super().__init__()
        self.plans = plans
        self.values = {b.var: b.value for blk in func.body.blocks for b in blk.bindings
                       if isinstance(b, relax.VarBinding)}
        self.shared: dict[relax.Var, relax.Var] = {}  # T -> T transposed

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        super().visit_var_binding_(binding)
        var, value = binding.var, binding.value
        if var in self.plans:
            lifted, _ = self.plans[var]
            self.shared[var] = self.builder_.emit(mark_origin(
                relax.op.permute_dims(self.visit_expr(var), list(lifted)), SHARED))
        src = value.args[0] if op_name(value) == _RESHAPE else None
        slice_value = self.values.get(src) if isinstance(src, relax.Var) else None
        if slice_value is not None and op_name(slice_value) == _SLICE and \
                slice_value.args[0] in self.shared:
            self._rebind(var, slice_value)

    def _rebind(self, var: relax.Var, slice_value: relax.Call) -> None:
        """The part ``var`` (a slice reshaped) read from the shared transpose, as a permute
        of it that SinkPermutes carries on."""
        t = slice_value.args[0]
        lifted, axis = self.plans[t]
        args = strided_slice_args(slice_value)
        assert args is not None
        out_shape = known_shape(var) or ()
        q = _q_of(lifted, axis)
        part = self.builder_.emit(relax.op.strided_slice(
            self.shared[t], [0], [int(args[1][0])], [int(args[2][0])]))
        flat = self.builder_.emit(relax.op.reshape(part, [out_shape[i] for i in q]))
        back = self.builder_.emit(relax.op.permute_dims(flat, list(inverse(q))))
        self.set_var_remap(var, back)


def _q_of(lifted: Sequence[int], axis: int) -> tuple[int, ...]:
    """The permutation of a part (T without the split axis) that `lifted` applies."""
    outer = [i for i in range(len(lifted)) if i != axis]
    return tuple(outer.index(i) for i in lifted[1:])


def hoist(func: relax.Function, unbinds: bool = True) -> relax.Function | None:
    """`func` with one shared transpose before each split whose parts end in one transpose,
    or None when it has no such split (`unbinds`: parts of one index too, else only
    ``relax.split``'s)."""
    new, plans = func, _plans(func) if unbinds else {}
    if plans:
        new = relax.analysis.remove_all_unused(_Hoister(func, plans).visit_expr(func))
    splits = split_plans(new)  # a split's vars, as they are after the unbinds' hoist
    if splits:
        new = relax.analysis.remove_all_unused(_SplitHoister(splits).visit_expr(new))
    return None if new is func else new


__all__ = ["SHARED", "SHARED_PARTS", "hoist", "is_shared", "split_plans"]
