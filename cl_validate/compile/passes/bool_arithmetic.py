"""BoolArithmetic: arithmetic, comparisons and min/max on booleans computed on integers.

A model's masks are booleans, and PyTorch computes with them directly:
``(y > lo) * (y < hi)`` (a logical and), ``mask.all(-1)`` / ``mask.any(-1)``, ``torch.maximum``
of two masks, a mask compared with another, ``argmax`` of a mask (RT-DETR's anchor validity
and query selection, detection post-processing). TVM 0.27 imports them as the same Relax ops
on ``bool`` tensors, and its llvm code generation cannot emit them: the build fails with
``Check failed: (t.MatchesCode(DLDataTypeCode::kDLFloat))`` (add, subtract, multiply,
maximum, minimum, comparisons, cumsum), ``LLVM module verification failed`` (equal) or
``Cannot decide min_value for bool`` (max, min, argmax, argmin).

Here each such call reads its boolean operands as ``int32`` 0/1 and its result is cast back
to the type the call had: exact, since on 0 and 1 a product is the and, a sum read as a
boolean the or, the maximum and minimum the or and the and, and comparisons and arg-max
order them as booleans are ordered (false < true). Other ops on booleans (logical and
bitwise ops, ``where``, ``sum``, casts) build as they are and are left alone.
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import relax_function_pass
from cl_validate.ir import mark_origin, origin_tag, tensor_type

#: The ops whose boolean operands TVM cannot compute with on llvm.
_ON_INTEGERS = frozenset(f"relax.{name}" for name in (
    "add", "subtract", "multiply", "maximum", "minimum", "greater", "greater_equal", "less",
    "less_equal", "equal", "not_equal", "max", "min", "argmax", "argmin", "cumsum",
    "cumprod", "prod"))


def _bool(expr: relax.Expr) -> bool:
    ty = tensor_type(expr)
    return ty is not None and str(ty.dtype) == "bool"


@mutator
class _OnIntegers(PyExprMutator):  # type: ignore[misc]
    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        call = binding.value
        name = getattr(getattr(call, "op", None), "name", None)
        if name not in _ON_INTEGERS or not any(_bool(a) for a in call.args):
            super().visit_var_binding_(binding)
            return
        args = [self.builder_.emit(relax.op.astype(self.visit_expr(a), "int32")) if _bool(a)
                else self.visit_expr(a) for a in call.args]
        value = mark_origin(relax.Call(call.op, args, call.attrs, call.ty_args),
                            origin_tag(call))
        want = tensor_type(binding.var)
        got = tensor_type(self.builder_.normalize(value))
        if want is not None and got is not None and str(got.dtype) != str(want.dtype):
            value = relax.op.astype(self.builder_.emit(value), str(want.dtype))
        self.builder_.emit_normalized(relax.VarBinding(binding.var,
                                                       self.builder_.normalize(value)))


def bool_arithmetic(func: relax.Function) -> relax.Function:
    """Every call of `_ON_INTEGERS` with a boolean operand computed on int32, cast back."""
    new = _OnIntegers().visit_expr(func)
    return func if new.same_as(func) else new


BoolArithmetic = relax_function_pass("BoolArithmetic")(bool_arithmetic)

__all__ = ["BoolArithmetic", "bool_arithmetic"]
