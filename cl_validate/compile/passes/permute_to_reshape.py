"""PermuteToReshape: a ``permute_dims`` that only moves size-1 axes is a reshape.

``(1, 8, 1, 1) -> (1, 1, 1, 8)`` moves no data: every element keeps its linear offset. Legalized
as a transpose it is still a kernel launch (and one the transform budget counts); as
``R.reshape`` it becomes a free view once ``RewriteDataflowReshape`` runs. ConvertLayout produces
these for every bias, squeeze-excite gate and pooled vector it moves between NCHW and NHWC.
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import moves_only_unit_axes, relax_function_pass
from cl_validate.ir import is_identity, permute_axes, shape_exprs, static_shape


@mutator
class _UnitPermuteRewriter(PyExprMutator):  # type: ignore[misc]
    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        axes = permute_axes(binding.value)
        if axes is None or is_identity(axes):  # identities are CancelPermutes' job
            super().visit_var_binding_(binding)
            return
        data = self.visit_expr(binding.value.args[0])
        in_shape = static_shape(data)
        out_shape = shape_exprs(binding.var)
        if in_shape is None or out_shape is None or not moves_only_unit_axes(in_shape, axes):
            super().visit_var_binding_(binding)
            return
        value = self.builder_.normalize(relax.op.reshape(data, out_shape))
        self.builder_.emit_normalized(relax.VarBinding(binding.var, value))


def unit_permutes_to_reshapes(func: relax.Function) -> relax.Function:
    """Every permute of a statically known shape that keeps the order of its non-1 axes becomes
    ``R.reshape`` to the same output shape (symbolic extents count as "not 1")."""
    new = _UnitPermuteRewriter().visit_expr(func)
    return func if new.same_as(func) else new


PermuteToReshape = relax_function_pass("PermuteToReshape")(unit_permutes_to_reshapes)

__all__ = ["PermuteToReshape", "unit_permutes_to_reshapes"]
