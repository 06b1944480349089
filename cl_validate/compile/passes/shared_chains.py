"""ShareChainLayouts: a movement result read by several movement chains is made once, in the
layout one of the chains ends in, when every other chain is then only a reshape of it.

CSWin's values (and any "tokens -> NCHW map -> conv, and the same map -> heads" block) read a
tokens tensor through a transpose into NCHW windows ``X``; the depthwise conv reads ``X``
through ConvertLayout's transpose back to NHWC, the attention reads ``X`` through its own
reshape and head permute. FoldMovementChains folds only chains whose intermediates nothing
else reads, so ``X`` and both readers' transposes stay: three transposes where the windows
need one (or none). Here the prefix (the chain that makes ``X``) and one reader's chain fold
into one movement ``Y``; every other reader's chain is rewritten as a reshape of ``Y`` where
undoing the first reader's chain and applying its own moves no data.

The same holds across a split: q, k and v selected from one projection (``qkv[0]``, a take of
one index, or a one-wide slice) whose chains all fold to the same movement (CSWin's stripe
partition, a head permute) are that movement once, applied to the projection with the split
axis outermost, and each part a slice of it. Both are kept only where the transform cost goes
down; pure data movement, so exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._plan import with_fields
from cl_validate.compile.passes._util import (
    FREE,
    Cost,
    add_costs,
    inverse,
    permute_cost,
    relax_function_pass,
)
from cl_validate.compile.passes.movement_chains import (
    MovementChains,
    Step,
    fold_chain,
    folded_movement,
    is_movement,
)
from cl_validate.ir import (
    is_identity,
    is_tensor_constant,
    is_weight_derived,
    known_shape,
    merge_origins,
    op_name,
    origin_tag,
    permute_axes,
    static_shape,
    strided_slice_args,
)

#: Rounds of the whole rewrite (each settles the sharing points that do not overlap)
_ROUNDS = 4


@dataclass(frozen=True)
class _Plan:
    root: relax.Expr  # what the shared movement reads
    steps: list[Step]  # from root to the shared movement's result
    shape: tuple[int, ...]  # that result's shape
    origin: str | None
    #: every reader chain's end, each a reshape of the result (or of its slice at an index),
    #: then quantized and dequantized again where its chain did so on the way (per tensor)
    ends: tuple[tuple[relax.Var, int | None, tuple[relax.Call, ...]], ...]


@dataclass(frozen=True)
class _Tail:
    """A reader's chain: movement ops, and per-tensor quantize-dequantize pairs (which
    commute with them), each read only by the next."""

    end: relax.Var
    steps: list[Step]
    cost: Cost
    internal: tuple[relax.Var, ...]
    origin: str | None
    qdq: tuple[relax.Call, ...]  # the pairs' calls, in order


_QUANTIZE, _DEQUANTIZE = "relax.quantize", "relax.dequantize"


def per_tensor(call: relax.Expr | None) -> bool:
    """A quantize or dequantize with one scale and one zero point."""
    if op_name(call) not in (_QUANTIZE, _DEQUANTIZE):
        return False
    return all((s := known_shape(a)) is not None and math.prod(s) == 1
               for a in call.args[1:3])  # type: ignore[union-attr]


def _shapes(start: tuple[int, ...], steps: list[Step]) -> list[tuple[int, ...]]:
    """The shape before each step, and after the last."""
    shapes = [start]
    for kind, arg in steps:
        cur = shapes[-1]
        shapes.append(tuple(cur[p] for p in arg) if kind == "permute" else arg)
    return shapes


def _undo(start: tuple[int, ...], steps: list[Step]) -> list[Step]:
    """The steps that take the chain's result back to its start."""
    shapes = _shapes(start, steps)
    return [("permute", inverse(arg)) if kind == "permute" else ("reshape", shapes[i])
            for i, (kind, arg) in reversed(list(enumerate(steps)))]


def _cost(shape: tuple[int, ...], steps: list[Step]) -> Cost | None:
    folded = fold_chain(shape, steps)
    if folded is None:
        return None
    return FREE if is_identity(folded[1]) else permute_cost(folded[0], folded[1])


def _is_view(shape: tuple[int, ...], steps: list[Step]) -> bool:
    folded = fold_chain(shape, steps)
    return folded is not None and is_identity(folded[1])


class _Finder:
    def __init__(self, func: relax.Function) -> None:
        self.chains = MovementChains(func)
        self.taken: set[relax.Var] = set()

    def _next(self, var: relax.Var) -> relax.Var | None:
        """The one op reading `var`, where it continues a chain (movement, or a per-tensor
        quantize read only by a per-tensor dequantize); None otherwise."""
        users = self.chains.uses.get(var, [])
        if len(users) != 1 or users[0] is None:
            return None
        value = self.chains.values.get(users[0])
        if is_movement(value):
            return users[0]
        after = self.chains.uses.get(users[0], [])
        if op_name(value) == _QUANTIZE and per_tensor(value) and len(after) == 1 and \
                after[0] is not None and per_tensor(self.chains.values.get(after[0])) and \
                op_name(self.chains.values.get(after[0])) == _DEQUANTIZE:
            return users[0]
        return None

    def _tail(self, reader: relax.Var, root: relax.Var) -> _Tail | None:
        """`root`'s chain through `reader`, forward as far as it goes."""
        chains = self.chains
        block = chains.block.get(root)
        steps: list[Step] = []
        costs: list[Cost] = []
        internal: list[relax.Var] = []
        qdq: list[relax.Call] = []
        origin: str | None = None
        var: relax.Var | None = reader
        last = reader
        while var is not None:
            value = chains.values.get(var)
            if chains.block.get(var) != block or value is None:
                return None
            shape, src_shape = static_shape(var), static_shape(value.args[0])
            if shape is None or None in shape or src_shape is None or None in src_shape:
                return None
            axes = permute_axes(value)
            if axes is not None:
                steps.append(("permute", axes))
                costs.append(permute_cost(src_shape, axes))  # type: ignore[arg-type]
                origin = merge_origins(origin, origin_tag(value))
            elif op_name(value) == _QUANTIZE:
                deq = chains.uses[var][0]
                qdq += [value, chains.values[deq]]  # type: ignore[list-item,index]
                internal.append(var)
                var = deq  # type: ignore[assignment]
            else:
                steps.append(("reshape", shape))  # type: ignore[arg-type]
            last = var  # type: ignore[assignment]
            nxt = self._next(var)  # type: ignore[arg-type]
            if nxt is not None:
                internal.append(var)  # type: ignore[arg-type]
            var = nxt
        return _Tail(last, steps, add_costs(costs), tuple(internal), origin, tuple(qdq))

    def plan(self, x: relax.Var) -> _Plan | None:
        chains = self.chains
        readers = chains.uses.get(x, [])
        if (len(readers) < 2 or not is_movement(chains.values.get(x))
                or is_weight_derived(x, chains.weights) or any(r is None for r in readers)):
            return None
        prefix = chains.chain(x)
        x_shape = static_shape(x)
        if prefix is None or x_shape is None or None in x_shape:
            return None
        tails: list[_Tail] = []
        for reader in dict.fromkeys(readers):  # a reader of x twice is one chain
            value = chains.values.get(reader)  # type: ignore[arg-type]
            if not (is_movement(value) or op_name(value) == _QUANTIZE):
                return None
            tail = self._tail(reader, x)  # type: ignore[arg-type]
            if tail is None or (not tail.steps and not tail.qdq):
                return None
            tails.append(tail)
        involved = {x, *prefix.internal, *(v for t in tails for v in (t.end, *t.internal))}
        if involved & self.taken:
            return None
        root_shape = static_shape(prefix.root)
        if root_shape is None or None in root_shape:
            return None
        now = add_costs([prefix.cost, *(t.cost for t in tails)])
        best: tuple[Cost, _Plan] | None = None
        for tail in tails:
            steps = prefix.steps + tail.steps
            cost = _cost(root_shape, steps)  # type: ignore[arg-type]
            if cost is None or not cost < now or (best is not None and not cost < best[0]):
                continue
            end_shape = _shapes(x_shape, tail.steps)[-1]  # type: ignore[arg-type]
            back = _undo(x_shape, tail.steps)  # type: ignore[arg-type]
            if all(_is_view(end_shape, back + other.steps)
                   for other in tails if other is not tail):
                origin = merge_origins(prefix.origin, tail.origin)
                best = cost, _Plan(prefix.root, steps, end_shape, origin,
                                   tuple((t.end, None, t.qdq) for t in tails))
        if best is None:
            return None
        self.taken |= involved
        return best[1]

    def split_plan(self, t: relax.Var) -> _Plan | None:
        """T's parts along one axis (selects or one-wide slices) whose chains all fold to
        one movement: that movement of T, the split axis outermost."""
        chains = self.chains
        shape, block = static_shape(t), chains.block.get(t)
        if (shape is None or None in shape or is_weight_derived(t, chains.weights)
                or block is None):
            return None
        by_axis: dict[int, list[tuple[relax.Var, int]]] = {}
        for reader in dict.fromkeys(chains.uses.get(t, [])):
            part = _part(chains.values.get(reader), t, shape)  # type: ignore[arg-type]
            if part is not None and chains.block.get(reader) == block:
                by_axis.setdefault(part[0], []).append((reader, part[1]))  # type: ignore[arg-type]
        for axis, parts in by_axis.items():
            plan = self._split_plan(t, shape, axis, parts)  # type: ignore[arg-type]
            if plan is not None:
                return plan
        return None

    def _split_plan(self, t: relax.Var, shape: tuple[int, ...], axis: int,
                    parts: list[tuple[relax.Var, int]]) -> _Plan | None:
        if len(parts) < 2:
            return None
        folds, ends, costs, origin = set(), [], [], None
        involved: set[relax.Var] = set()
        for part, index in parts:
            reader = self._next(part)
            part_shape = static_shape(part)
            if reader is None or part_shape is None or None in part_shape:
                return None  # a part read as it is (or by several): nothing to share
            tail = self._tail(reader, part)
            if tail is None:
                return None
            folds.add(fold_chain(part_shape, tail.steps))  # type: ignore[arg-type]
            ends.append((tail.end, index, tail.qdq))
            costs.append(tail.cost)
            origin = merge_origins(origin, tail.origin)
            involved |= {part, tail.end, *tail.internal}
        if len(folds) != 1 or None in folds or involved & self.taken:
            return None
        ((group, perm),) = folds  # type: ignore[misc]
        if is_identity(perm):
            return None
        n = shape[axis]
        steps: list[Step] = [
            ("permute", (axis, *(i for i in range(len(shape)) if i != axis))),
            ("reshape", (n, *group)), ("permute", (0, *(p + 1 for p in perm)))]
        cost = _cost(shape, steps)
        if cost is None or not cost < add_costs(costs):
            return None
        self.taken |= involved | {t}
        return _Plan(t, steps, (n, *(group[p] for p in perm)), origin, tuple(ends))


def _part(value: relax.Expr | None, t: relax.Var, shape: tuple[int, ...]
          ) -> tuple[int, int] | None:
    """(axis, index) where `value` selects one index of `t` along one axis: a take of one
    constant index, or a one-wide, unit-stride slice; None otherwise."""
    if not isinstance(value, relax.Call) or not value.args[0].same_as(t):
        return None
    if op_name(value) == "relax.take":
        indices = value.args[1]
        if not is_tensor_constant(indices) or value.attrs.axis is None:
            return None
        index = np.asarray(indices.value.numpy())
        axis = int(value.attrs.axis) % len(shape)
        n = shape[axis]
        if index.ndim == 0 and index.dtype.kind in "iu" and -n <= int(index) < n:
            return axis, int(index) % n
        return None
    args = strided_slice_args(value) if op_name(value) == "relax.strided_slice" else None
    if args is None or len(args[0]) != 1 or (len(args) > 3 and int(args[3][0]) != 1):
        return None
    begin, end = int(args[1][0]), int(args[2][0])
    return (int(args[0][0]) % len(shape), begin) if end - begin == 1 and begin >= 0 else None


@mutator
class _Sharer(PyExprMutator):  # type: ignore[misc]
    def __init__(self, plans: dict[relax.Var, _Plan]) -> None:
        super().__init__()
        self.plans = plans
        #: a reader chain's end -> the shared movement, the index it takes of it, the
        #: quantize-dequantize pairs on its way
        self.made: dict[relax.Var, tuple[relax.Var, int | None, tuple[relax.Call, ...]]] = {}

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        found = self.made.get(binding.var)
        if found is not None:
            made, index, qdq = found
            value: relax.Expr = made
            if index is not None:
                value = self.builder_.emit(
                    relax.op.strided_slice(made, [0], [index], [index + 1]))
            shape = static_shape(binding.var)
            if static_shape(value) != shape:
                value = relax.op.reshape(value, list(shape))  # type: ignore[arg-type]
            for call in qdq:  # per tensor: the same codes wherever the values stand
                value = self.builder_.emit(value)
                attrs = with_fields(call.attrs, axis=-1)
                value = relax.Call(call.op, [value, *call.args[1:]], attrs, call.ty_args,
                                   call.span)
            self.builder_.emit_normalized(
                relax.VarBinding(binding.var, self.builder_.normalize(value)))
            return
        super().visit_var_binding_(binding)
        plan = self.plans.get(binding.var)
        if plan is None:
            return
        root_shape = static_shape(plan.root)
        folded = folded_movement(self.visit_expr(plan.root), root_shape,  # type: ignore[arg-type]
                                 plan.steps, plan.shape, plan.origin, self.builder_.emit)
        assert folded is not None  # the plan folded these steps already
        var = self.builder_.emit(folded[0])
        for end, index, qdq in plan.ends:
            self.made[end] = (var, index, qdq)


def share_chain_layouts(func: relax.Function) -> relax.Function:
    """Each movement result read only by movement chains, made once in the layout of the
    reader chain that leaves every other reader a reshape, where that lowers the cost."""
    for _ in range(_ROUNDS):
        finder = _Finder(func)
        plans = {x: p for x in list(finder.chains.values)
                 if (p := finder.plan(x) or finder.split_plan(x)) is not None}
        if not plans:
            break
        func = relax.analysis.remove_all_unused(_Sharer(plans).visit_expr(func))
    return func


ShareChainLayouts = relax_function_pass("ShareChainLayouts")(share_chain_layouts)

__all__ = ["ShareChainLayouts", "per_tensor", "share_chain_layouts"]
