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
from cl_validate.ir import bindings, known_shape, op_name, output_of_weights, tensor_type

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
    if output_of_weights(new) and not output_of_weights(func):
        return func  # a model that reads its input only for a shape: its program stays one
    return new


ConstantFills = relax_function_pass("ConstantFills")(constant_fills)

__all__ = ["ConstantFills", "constant_fills"]
