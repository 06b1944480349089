"""DropRoundTrips: a value widened and cast straight back to its own dtype is the value.

``astype(astype(x, wide), narrow)`` with ``x`` of dtype ``narrow`` and ``wide`` holding every
``narrow`` value exactly (float16 or bfloat16 in float32, float32 in float64, an integer in a
wider one of the same sign) is ``x``, bit for bit. A half-precision model leaves such pairs
where two rewrites meet: its products and reductions are rounded to the model's dtype
(`compile.precision_converters`) right where a raised attention (summed in float32) or a
float32 read begins. Between two permutes the pair keeps them from cancelling: a float16
window attention kept 6 transforms its float32 model does not have.
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import relax_function_pass
from cl_validate.ir import op_name, tensor_type

#: dtype -> the dtypes that hold each of its values exactly
_EXACT_IN = {
    "float16": {"float32", "float64"}, "bfloat16": {"float32", "float64"},
    "float32": {"float64"},
    "int8": {"int16", "int32", "int64"}, "int16": {"int32", "int64"}, "int32": {"int64"},
    "uint8": {"uint16", "uint32", "uint64", "int16", "int32", "int64"},
    "uint16": {"uint32", "uint64", "int32", "int64"}, "uint32": {"uint64", "int64"},
}


def _dtype(e: relax.Expr) -> str | None:
    ty = tensor_type(e)
    return None if ty is None else str(ty.dtype)


@mutator
class _Drop(PyExprMutator):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.values: dict[relax.Var, relax.Expr] = {}

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        self.values[binding.var] = binding.value
        value = binding.value
        if op_name(value) == "relax.astype":
            wide = self.values.get(value.args[0]) if isinstance(value.args[0], relax.Var) \
                else None
            if op_name(wide) == "relax.astype":
                x = wide.args[0]  # type: ignore[union-attr]
                narrow, mid = _dtype(x), _dtype(value.args[0])
                if narrow is not None and narrow == str(value.attrs.dtype) and \
                        mid in _EXACT_IN.get(narrow, ()):
                    new = self.visit_expr(x)
                    if isinstance(binding.var, relax.DataflowVar) or \
                            not isinstance(new, relax.DataflowVar):
                        self.set_var_remap(binding.var, new)
                    else:  # a block's output var stays, bound to the value
                        self.builder_.emit_normalized(relax.VarBinding(binding.var, new))
                    return
        super().visit_var_binding_(binding)


def drop_round_trips(func: relax.Function) -> relax.Function:
    """Every ``astype(astype(x, wide), dtype(x))`` with `wide` exact for `x` read as `x`."""
    new = _Drop().visit_expr(func)
    return func if new.same_as(func) else relax.analysis.remove_all_unused(new)


DropRoundTrips = relax_function_pass("DropRoundTrips")(drop_round_trips)

__all__ = ["DropRoundTrips", "drop_round_trips"]
