"""UnmergeGroupedMaps: statistics over channel groups, read with the groups' axes kept apart.

Hand-written group statistics view a map ``(B, C, H, W)`` as ``(B, G, C/G·H·W)`` and reduce
the last axis: a manual GroupNorm (``x.view(B, G, -1)``, ``(x - mean) / std``, ``view(B, C,
H, W)``), timm's EvoNorm (``x.reshape(B, G, -1).var(-1)``, the std expanded back), a
per-sample standardization (``G = 1``). The merged axis runs over channels *and* pixels in
NCHW order, so the view has no layout rule: in a channels-last program every such norm costs
a transpose into NCHW, and one back after the view back.

The same computation keeps the axes: the view ``(B, G, C/G, H, W)`` (a split of the channel
axis alone, which a channels-last map is a view of too), each reduction over the last three
axes, each statistic ``(B, G, 1, 1, 1)``, a broadcast to the map's five axes, and the view
back merging ``G`` and ``C/G``. The layout passes carry all of it. The reductions take the
same elements (in NCHW in the same order: the rewrite alone changes no bit; in NHWC the sums
run in another order, as under TVM's own group_norm rule).

Taken only where every reader of the grouped map, and of what is computed from it, is
elementwise (with scalars, or with statistics of the same map), a reduction of the merged
axis that keeps it, a broadcast of a statistic back to the grouped shape, or the view back
to ``(B, C, H, W)``; anything else (a statistic returned or read elsewhere, a transpose of
the grouped map) leaves the region as it is.
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._layout_ops import BROADCAST_OPS, REDUCE_OPS, UNARY_OPS
from cl_validate.compile.passes._plan import remake, with_fields
from cl_validate.compile.passes._util import relax_function_pass
from cl_validate.ir import bindings, known_shape, op_name, use_sites

_MAP, _STAT, _EXIT = "map", "stat", "exit"


def _scalar_like(e: relax.Expr) -> bool:
    """A rank-0 value, or one whose every extent is 1 (broadcast alike in 3 or 5 axes)."""
    shape = known_shape(e)
    return shape is not None and len(shape) <= 3 and all(d == 1 for d in shape)


def _kind(value: relax.Expr, kinds: dict[relax.Var, str], grouped: tuple[int, int, int],
          mapped: tuple[int, int, int, int]) -> str | None:
    """What `value`, which reads the region, makes: a grouped map, a statistic, the view back
    (an exit) or None (the region cannot be rewritten). Its operands come before it, so each
    is known: in the region, or a scalar."""
    name = op_name(value)
    if name is None or not isinstance(value, relax.Call):
        return None
    operands = [kinds.get(a) if isinstance(a, relax.Var) else None for a in value.args]
    first, shape = operands[0], known_shape(value)
    if name == "relax.reshape":
        return _EXIT if first == _MAP and shape == mapped else None
    if name == "relax.broadcast_to":
        return _MAP if first == _STAT and shape == grouped else None
    if name in REDUCE_OPS or name in ("relax.variance", "relax.std"):
        axes = value.attrs.axis
        if first != _MAP or axes is None or [int(a) for a in axes] != [2] or \
                not bool(value.attrs.keepdims):
            return None
        return _STAT
    if name in UNARY_OPS:
        return first if first in (_MAP, _STAT) else None
    if name in BROADCAST_OPS:
        found = {k for k in operands if k is not None}
        if not found <= {_MAP, _STAT} or any(
                k is None and not _scalar_like(a) for k, a in zip(operands, value.args,
                                                                   strict=True)):
            return None
        return _MAP if _MAP in found else _STAT
    return None


def _region(start: relax.Var, order: list[relax.Var], values: dict[relax.Var, relax.Expr],
            uses: dict[relax.Var, list[relax.Var | None]], grouped: tuple[int, int, int],
            mapped: tuple[int, int, int, int]) -> dict[relax.Var, str] | None:
    """The region's vars and kinds, in binding order from `start`; None where one of them
    is read by anything else (the function's result included)."""
    kinds: dict[relax.Var, str] = {start: _MAP}
    for var in order[order.index(start) + 1:]:
        value = values[var]
        if not any(isinstance(a, relax.Var) and kinds.get(a) in (_MAP, _STAT)
                   for a in relax.analysis.free_vars(value)):
            continue
        kind = _kind(value, kinds, grouped, mapped)
        if kind is None:
            return None
        kinds[var] = kind
    for var, kind in kinds.items():
        if kind != _EXIT and any(u is None or u not in kinds for u in uses.get(var, [])):
            return None
    return kinds


def _plans(func: relax.Function) -> dict[relax.Var, tuple[str, tuple[int, ...]]]:
    """Each region var → its kind and the five-axis shape of its grouped map."""
    values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    order = list(values)
    uses = use_sites(func)
    plans: dict[relax.Var, tuple[str, tuple[int, ...]]] = {}
    for var, value in values.items():
        if op_name(value) != "relax.reshape" or var in plans:
            continue
        source, out = known_shape(value.args[0]), known_shape(var)  # type: ignore[union-attr]
        if source is None or out is None or len(source) != 4 or len(out) != 3:
            continue
        b, c, h, w = source
        groups = out[1]
        if out[0] != b or groups < 1 or c % groups or out[2] != c // groups * h * w \
                or h * w == 1:
            continue
        kinds = _region(var, order, values, uses, (b, groups, out[2]), (b, c, h, w))
        if kinds is None or _EXIT not in kinds.values():
            continue
        split = (b, groups, c // groups, h, w)
        plans[var] = ("start", split)
        for v, kind in kinds.items():
            if v is not var:
                plans[v] = (kind, split)
    return plans


@mutator
class _Unmerge(PyExprMutator):  # type: ignore[misc]
    def __init__(self, plans: dict[relax.Var, tuple[str, tuple[int, ...]]]) -> None:
        super().__init__()
        self.plans = plans

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        plan = self.plans.get(binding.var)
        if plan is None:
            super().visit_var_binding_(binding)
            return
        kind, split = plan
        value = binding.value
        args = [self.visit_expr(a) for a in value.args]
        if kind == "start":
            new = relax.op.reshape(args[0], split)
        elif kind == _EXIT:
            new = relax.op.reshape(args[0], known_shape(binding.var))
        elif op_name(value) == "relax.broadcast_to":
            new = relax.op.broadcast_to(args[0], split)
        elif kind == _STAT and value.args and op_name(value) not in UNARY_OPS | BROADCAST_OPS:
            new = remake(value, args, with_fields(value.attrs, axis=[2, 3, 4]))
        else:
            new = remake(value, args)
        var = self.builder_.emit(new, binding.var.name)
        self.set_var_remap(binding.var, var)


def unmerge_grouped_maps(func: relax.Function) -> relax.Function:
    """Every grouped-statistics region (see the module's docstring) with its axes kept."""
    plans = _plans(func)
    if not plans:
        return func
    return relax.analysis.remove_all_unused(_Unmerge(plans).visit_expr(func))


UnmergeGroupedMaps = relax_function_pass("UnmergeGroupedMaps")(unmerge_grouped_maps)

__all__ = ["UnmergeGroupedMaps", "unmerge_grouped_maps"]
