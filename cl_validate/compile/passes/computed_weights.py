"""ComputeInLayout: a kernel computed at run time from a constant, elementwise, is computed in
the layout the convolution wants, so ConvertLayout's transpose of it is gone.

StyleGAN2's modulated convolution (and the decoders built on it, such as GFPGAN's) computes
its kernel per sample: the constant weight times a style vector, times a demodulation vector,
viewed ``(B·O, I, k, k)``. In NHWC the convolution wants OHWI, so
ConvertLayout transposes the computed kernel on every call. Each element of that kernel is one
product of a weight element and a few per-channel factors: computed from the weight already
permuted (a constant, folded when the program is compiled) and the factors viewed alike (their
size-one axes move, a free reshape), it comes out in OHWI with no transpose.

Matched, all of it checked (else the IR is left as it was): a run-time ``permute_dims`` whose
operand is a tree of elementwise ops (broadcasting binaries and unaries) and views that only
add or drop size-one axes or merge neighbours that stay neighbours, down to leaves that are
each derived from weights and constants alone (permuted once, folded) or whose permutation
moves only size-one axes (a reshape). A node of the tree that something else reads too is
computed again in the new layout only when its own leaves are all such (no tensor computed at
run time is read twice); the original stays for its other readers. The same operations on the
same values in the same order: exact.
"""

from __future__ import annotations

import math

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._layout_ops import BROADCAST_OPS, UNARY_OPS
from cl_validate.compile.passes._util import relax_function_pass
from cl_validate.compile.passes.movement_chains import fold_chain
from cl_validate.ir import (
    bindings,
    is_identity,
    is_weight_derived,
    known_shape,
    op_name,
    permute_axes,
    use_sites,
    weight_derived,
)
from cl_validate.spec.layouts import moves_only_unit_axes

#: How many ops up from the transpose the tree may reach
_DEPTH = 16


def _through_view(src: tuple[int, ...], dst: tuple[int, ...], perm: tuple[int, ...]
                  ) -> tuple[int, ...] | None:
    """The permutation `q` of the reshape's input with ``reshape(permute(x, q))`` equal to
    ``permute(reshape(x, dst), perm)``: where the reshape only merges neighbours that stay
    neighbours and adds or drops size-one axes; None otherwise."""
    folded = fold_chain(src, [("reshape", dst), ("permute", perm)])
    if folded is None:
        return None
    group, order = folded
    # each group must be whole axes of `src` (size-one axes aside): no axis split
    axes = [i for i, d in enumerate(src) if d != 1]
    runs: list[list[int]] = []
    for extent in group:
        run: list[int] = []
        have = 1
        while have < extent and axes:
            run.append(axes.pop(0))
            have *= src[run[-1]]
        if have != extent:
            return None
        runs.append(run)
    if axes:
        return None
    moved = [a for g in order for a in runs[g]]  # src's non-unit axes in the result's order
    units = [i for i, d in enumerate(src) if d == 1]
    # size-one axes keep their places; the others take the new order around them
    it = iter(moved)
    return tuple(i if i in units else next(it) for i in range(len(src)))


Key = tuple[relax.Var, tuple[int, ...]]


class _Tree:
    """Which bindings up from one transpose can be computed in its layout."""

    def __init__(self, func: relax.Function) -> None:
        self.values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
        self.uses = use_sites(func)
        self.weights = weight_derived(func)

    def plan(self, expr: relax.Expr, perm: tuple[int, ...], depth: int, small: int | None,
             out: set[Key]) -> bool:
        """Can `expr` be had in `perm`'s layout without a run-time transform? Records each
        (var, permutation) to compute again in `out`. `small`: under an op something else
        reads too (computed again, the original kept), a leaf computed at run time may hold
        at most that many elements (it is read twice)."""
        if is_weight_derived(expr, self.weights):
            return True  # permuted once, folded when the program is compiled
        shape = known_shape(expr)
        if shape is None or len(shape) != len(perm):
            return False
        if moves_only_unit_axes(shape, perm):
            return small is None or math.prod(shape) <= small  # a reshape
        value = self.values.get(expr) if isinstance(expr, relax.Var) else None
        if not isinstance(value, relax.Call) or depth == 0:
            return False
        if small is None and len(self.uses.get(expr, [])) > 1:  # type: ignore[arg-type]
            small = math.prod(shape) // 8
        name = op_name(value)
        if name == "relax.reshape":
            src = known_shape(value.args[0])
            q = _through_view(src, shape, perm) if src is not None else None
            if q is None or not self.plan(value.args[0], q, depth - 1, small, out):
                return False
        elif name in UNARY_OPS or name in BROADCAST_OPS:
            operands = [value.args[0]] if name in UNARY_OPS else list(value.args)
            for a in operands:
                a_shape = known_shape(a)
                if a_shape is None or not a_shape:
                    continue  # a scalar or an attribute-like argument
                lead = len(perm) - len(a_shape)  # broadcasting aligns the trailing axes
                if lead < 0 or any(p < lead for p in perm[lead:]):
                    return False  # the permutation mixes in axes the operand lacks
                if not self.plan(a, tuple(p - lead for p in perm[lead:]), depth - 1, small,
                                 out):
                    return False
        else:
            return False
        out.add((expr, perm))  # type: ignore[arg-type]
        return True


@mutator
class _Recompute(PyExprMutator):  # type: ignore[misc]
    def __init__(self, tree: _Tree, plans: dict[relax.Var, set[Key]]) -> None:
        super().__init__()
        self.tree, self.plans = tree, plans

    def _permuted(self, expr: relax.Expr, perm: tuple[int, ...], made: set[Key],
                  memo: dict[Key, relax.Expr], top: bool = False) -> relax.Expr:
        """`expr` in `perm`'s layout; every node but the top one bound as it is made."""
        key = (expr, perm)
        if key in memo:
            return memo[key]
        shape = known_shape(expr)
        assert shape is not None  # the plan read every shape
        value = self.tree.values.get(expr) if isinstance(expr, relax.Var) else None
        if key not in made or value is None:  # a leaf: folded, or a free reshape
            new = self.visit_expr(expr)
            if not is_identity(perm):
                new = relax.op.reshape(new, [shape[p] for p in perm]) if \
                    moves_only_unit_axes(shape, perm) else relax.op.permute_dims(new, list(perm))
        elif op_name(value) == "relax.reshape":
            src = known_shape(value.args[0])
            q = _through_view(src, shape, perm)  # type: ignore[arg-type]
            inner = self._permuted(value.args[0], q, made, memo)  # type: ignore[arg-type]
            new = relax.op.reshape(inner, [shape[p] for p in perm])
        else:
            args = []
            for a in value.args:
                a_shape = known_shape(a)
                if a_shape is None or not a_shape:
                    args.append(a)
                    continue
                lead = len(perm) - len(a_shape)
                args.append(self._permuted(a, tuple(p - lead for p in perm[lead:]), made,
                                           memo))
            new = relax.Call(value.op, args, value.attrs, value.ty_args, value.span)
        if not top and isinstance(new, relax.Call):
            new = self.builder_.emit(new)
        memo[key] = new
        return new

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        made = self.plans.get(binding.var)
        if made is None:
            super().visit_var_binding_(binding)
            return
        perm = permute_axes(binding.value)
        new = self._permuted(binding.value.args[0], perm, made, {}, top=True)  # type: ignore[arg-type]
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(new)))


def compute_in_layout(func: relax.Function) -> relax.Function:
    """Every run-time transpose of an elementwise tree over weights and per-channel factors,
    gone: the tree computed in the transposed layout."""
    tree = _Tree(func)
    plans: dict[relax.Var, set[Key]] = {}
    for var, value in tree.values.items():
        perm = permute_axes(value)
        src = value.args[0] if perm is not None else None
        if perm is None or is_identity(perm) or is_weight_derived(src, tree.weights) or \
                not isinstance(src, relax.Var) or known_shape(src) is None or \
                moves_only_unit_axes(known_shape(src), perm):  # type: ignore[arg-type]
            continue
        made: set[Key] = set()
        if tree.plan(src, perm, _DEPTH, None, made) and made:
            plans[var] = made
    if not plans:
        return func
    return relax.analysis.remove_all_unused(_Recompute(tree, plans).visit_expr(func))


ComputeInLayout = relax_function_pass("ComputeInLayout")(compute_in_layout)

__all__ = ["ComputeInLayout", "compute_in_layout"]
