"""ElideBroadcasts: permute the small tensor, not its broadcast, and let elementwise ops broadcast.

Channel attention gates are computed on a pooled ``(N, C, 1, 1)`` vector and broadcast back to
the feature map explicitly (``y.expand_as(x)`` in ECA-Net imports as ``R.broadcast_to``). TVM
0.27 has no layout rule for ``broadcast_to``, so ConvertLayout leaves the full-size broadcast
in NCHW and transposes it, feature-map sized, to NHWC. Two exact rewrites remove that:

* ``permute_dims(broadcast_to(g, S), p)`` becomes ``broadcast_to(permute_dims(g, p), S∘p)``:
  the same elements, but the permute now moves the small tensor (often only size-1 axes,
  which PermuteToReshape then makes a free reshape);
* an elementwise op with numpy broadcasting that reads ``broadcast_to(g, S)`` reads ``g``
  itself wherever that leaves its result's shape unchanged: broadcasting replicates values
  and never computes, so every element of the result is the same operation on the same
  values. The ``broadcast_to`` then goes when nothing else reads it.
* a matmul reads ``broadcast_to(w, S)`` as ``w`` where the broadcast only adds or widens
  batch axes and the product's shape stays the same: matmul broadcasts its batch axes
  itself. An import of ``linear`` on a 3-D input can give the weight a broadcast to the
  batch (``(S, C, D)`` from ``(C, D)``); once folded that was an S-times larger constant,
  and the product read it all on every run. So does one through a reshape that only
  regroups the batch (``torch.matmul`` of a 4-D input by a weight, as export decomposes
  it: CaiT's talking heads, a Linear over the heads of the permuted scores); a quantized
  product whose weight was so expanded was left in float ("its weight is not a matrix").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._layout_ops import BROADCAST_OPS
from cl_validate.compile.passes._util import relax_function_pass
from cl_validate.ir import (
    bindings,
    known_shape,
    mark_origin,
    ndim,
    op_name,
    origin_tag,
    permute_axes,
)

BROADCAST_TO = "relax.broadcast_to"
#: Elementwise ops that broadcast their operands numpy-style (ewise_fma wants equal shapes).
ELIDING_OPS = BROADCAST_OPS - {"relax.ewise_fma"}
MATMUL = "relax.matmul"


def _broadcast_sources(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    """Each var bound to ``broadcast_to(g, S)``, mapped to ``g``."""
    return {b.var: b.value.args[0] for b in bindings(func)
            if isinstance(b, relax.VarBinding) and op_name(b.value) == BROADCAST_TO}


def _batch_merges(func: relax.Function, sources: dict[relax.Var, relax.Expr]
                  ) -> dict[relax.Var, relax.Expr]:
    """Each var bound to a reshape of ``broadcast_to(g, S)`` that keeps the last two axes,
    where ``g`` is one matrix (its leading axes, if any, all 1), mapped to ``g``: every batch
    of it is ``g``, however the reshape groups the batches (``torch.matmul`` of a 4-D input
    and a weight, as export decomposes it: the weight expanded and reshaped to a 3-D batch)."""
    merges = {}
    for b in bindings(func):
        if not isinstance(b, relax.VarBinding) or op_name(b.value) != "relax.reshape":
            continue
        src = b.value.args[0]
        g = sources.get(src) if isinstance(src, relax.Var) else None
        gs, out = (None, None) if g is None else (known_shape(g), known_shape(b.var))
        if gs is not None and out is not None and len(gs) >= 2 and len(out) >= 2 and \
                gs[-2:] == out[-2:] and all(d == 1 for d in gs[:-2]):
            merges[b.var] = g
    return merges


def _result_shape(shapes: Sequence[tuple[int, ...] | None]) -> tuple[int, ...] | None:
    if any(s is None for s in shapes):
        return None
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))  # type: ignore[arg-type]
    except ValueError:
        return None


def _matmul_shape(shapes: Sequence[tuple[int, ...] | None]) -> tuple[int, ...] | None:
    """The shape of ``matmul(a, b)`` from its operands' (matrices only: both at least 2-D)."""
    a, b = shapes
    if a is None or b is None or len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    batch = _result_shape([a[:-2], b[:-2]])
    return None if batch is None else (*batch, a[-2], b[-1])


@mutator
class _Elider(PyExprMutator):  # type: ignore[misc]
    def __init__(self, sources: dict[relax.Var, relax.Expr],
                 merges: dict[relax.Var, relax.Expr]) -> None:
        super().__init__()
        self.sources = sources
        self.matrices = {**sources, **merges}  # what a matmul may read instead

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = self._rewrite(binding.value)
        if value is None:
            super().visit_var_binding_(binding)
            return
        self.builder_.emit_normalized(relax.VarBinding(binding.var,
                                                       self.builder_.normalize(value)))

    def _rewrite(self, value: relax.Expr) -> relax.Expr | None:
        axes = permute_axes(value)
        if axes is not None:
            src = value.args[0]
            g = self.sources.get(src) if isinstance(src, relax.Var) else None
            out = known_shape(value)
            if g is None or out is None or ndim(g) != len(axes):
                return None
            moved = mark_origin(relax.op.permute_dims(self.visit_expr(g), list(axes)),
                             origin_tag(value))
            return relax.op.broadcast_to(moved, list(out))
        if op_name(value) == MATMUL:
            shape_of, sources = _matmul_shape, self.matrices
        elif op_name(value) in ELIDING_OPS:
            shape_of, sources = _result_shape, self.sources
        else:
            return None
        args = list(value.args)
        want = known_shape(value)
        changed = False
        for i, a in enumerate(args):
            g = sources.get(a) if isinstance(a, relax.Var) else None
            if g is None:
                continue
            trial = [g if j == i else x for j, x in enumerate(args)]
            if want is not None and shape_of([known_shape(x) for x in trial]) == want:
                args, changed = trial, True
        if not changed:
            return None
        return relax.Call(value.op, [self.visit_expr(a) for a in args], value.attrs,
                          value.ty_args)


def elide_broadcasts(func: relax.Function) -> relax.Function:
    """Permutes of broadcasts move onto the broadcast's input; elementwise ops read the
    unbroadcast input where their result stays the same shape (see the module docstring)."""
    current = func
    for _ in range(2):  # a permute moved in the first sweep makes a broadcast the second elides
        sources = _broadcast_sources(current)
        if not sources:
            break
        new = _Elider(sources, _batch_merges(current, sources)).visit_expr(current)
        if new.same_as(current):
            break
        current = relax.analysis.remove_all_unused(new)
    return current


ElideBroadcasts = relax_function_pass("ElideBroadcasts")(elide_broadcasts)

__all__ = ["ElideBroadcasts", "elide_broadcasts"]
