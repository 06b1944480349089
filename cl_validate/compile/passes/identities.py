"""DropIdentities: a gather that picks every position of its axis in order is its data (and
so the reshape to the shape it already has that the import writes after it).

``F.pad(x, (0, pw, 0, ph), "reflect")`` (SwinIR's and Swin2SR's pad to a multiple of the
window; ``"replicate"`` alike) decomposes into one ``take`` per padded axis, each followed by
a reshape to the shape it has, the index computed from ``arange`` (reflected by ``abs``). At a
size that already is a multiple nothing is padded and each index is ``0, 1, …, n-1``: a copy
of the whole tensor at the model's input resolution that changes nothing, and a take and a
reshape that ConvertLayout has no rule for, between the input and its convolution, so the
input's layout conversion is placed after them and named after the reshape. The index is
computed here from constants alone (`fold_values.value_of`), before anything is folded, so
the layout stages see the input reach the convolution directly. The same elements in the
same places: exact.
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from cl_validate.compile.fold import created
from cl_validate.compile.fold_values import value_of
from cl_validate.compile.passes._util import rebind, relax_function_pass
from cl_validate.ir import bindings, known_shape, op_name


def _identity(value: relax.Expr, values: dict[relax.Var, relax.Expr]) -> bool:
    """``take(data, index, axis)`` with an index known to be ``arange(n)``, n the axis's
    extent."""
    if op_name(value) != "relax.take":
        return False
    data = value.args[0]  # type: ignore[union-attr]
    shape = known_shape(data)
    if shape is None:
        return False
    axis = getattr(value.attrs, "axis", None)  # type: ignore[union-attr]
    if axis is None:
        return False
    picked = value_of(value.args[1], values, created)  # type: ignore[union-attr]
    n = shape[int(axis) % len(shape)]
    return picked is not None and picked.shape == (n,) and \
        bool(np.array_equal(picked, np.arange(n)))


def drop_identities(func: relax.Function) -> relax.Function:
    """Every gather of all of its axis in order replaced by its data, and so the reshape to
    its own shape the import writes after it. Other reshapes to their data's shape stay:
    other passes read them as the model's views (StyleGAN2's ``upfirdn2d``, channels
    folded into a batch of one-channel planes, ``reshape(-1, 1, H, W)`` of ``(N·C, 1, H,
    W)``: `UnfoldChannelFilters` finds the fold by it), and TVM makes them free views."""
    values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    plans = {var: value.args[0] for var, value in values.items()  # type: ignore[union-attr]
             if _identity(value, values)}
    plans.update({var: value.args[0] for var, value in values.items()  # type: ignore[union-attr]
                  if op_name(value) == "relax.reshape" and value.args[0] in plans and
                  known_shape(value) == known_shape(value.args[0])})  # type: ignore[union-attr]

    def rebuild(mut, data, var):  # type: ignore[no-untyped-def]
        return mut.visit_expr(data)

    return rebind(func, plans, rebuild)


DropIdentities = relax_function_pass("DropIdentities")(drop_identities)

__all__ = ["DropIdentities", "drop_identities"]
