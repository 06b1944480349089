"""ConstantFills: a fill shaped like a tensor (``full_like``, ``zeros_like``, ``ones_like``)
of a static shape reads nothing of that tensor but its shape: it is ``full`` of that shape.

ShiftViT shifts its channel groups by slice assignment into ``torch.zeros_like(x)``. Imported
as ``full_like(x, 0)``, the zeros depend on ``x`` for the layout passes, so ConvertLayout and
the passes after it treat them as a run-time value: quantized, ``x`` is a dequantize's
result and the zeros were transposed at run time ("a weight transform that should have
folded"). As ``full(shape, 0)`` they are a constant, and any permute of them folds when the
weights are bound. The same values: exact.
"""

from __future__ import annotations

from tvm import relax

from cl_validate.compile.passes._util import rebind, relax_function_pass
from cl_validate.ir import (
    all_weight_derived,
    bindings,
    known_shape,
    op_name,
    tensor_type,
    weight_derived,
)

_LIKE = ("relax.full_like", "relax.zeros_like", "relax.ones_like")


def constant_fills(func: relax.Function) -> relax.Function:
    """Every fill-like of a static shape as a ``full`` (``zeros``, ``ones``) of that shape."""
    plans = {}
    for b in bindings(func):
        name = op_name(b.value)
        shape = known_shape(b.var)
        if name not in _LIKE or shape is None:
            continue
        dtype = str(getattr(tensor_type(b.var), "dtype", ""))
        plans[b.var] = relax.op.full(list(shape), b.value.args[1], dtype) \
            if name == "relax.full_like" else \
            (relax.op.zeros if name == "relax.zeros_like" else relax.op.ones)(list(shape), dtype)
    new = rebind(func, plans, lambda mut, full, _var: mut.visit_expr(full))
    if _constant_output(new) and not _constant_output(func):
        return func  # a model that reads its input only for a shape: its program stays one
    return new


def _constant_output(func: relax.Function) -> bool:
    """Every output of `func` computable from its weights alone: a program that would no
    longer read its input at all (it would fold to a constant), which this pass does not
    make of one that reads it."""
    out = func.body.body
    leaves = out.fields if isinstance(out, relax.Tuple) else [out]
    return all_weight_derived(leaves, weight_derived(func))


ConstantFills = relax_function_pass("ConstantFills")(constant_fills)

__all__ = ["ConstantFills", "constant_fills"]
