"""PermuteToReshape: a ``permute_dims`` that only moves size-1 axes is a reshape.

``(1, 8, 1, 1) -> (1, 1, 1, 8)`` moves no data: every element keeps its linear offset. Legalized
as a transpose it is still a kernel launch (and one the transform budget counts); as
``R.reshape`` it becomes a free view once ``RewriteDataflowReshape`` runs. ConvertLayout produces
these for every bias, squeeze-excite gate and pooled vector it moves between NCHW and NHWC.

A view of a view (a ``squeeze`` then a ``reshape``, as ECA's pooled channels reach its
``Conv1d``) becomes one reshape of the first view's input: TVM makes a lone reshape a free
view, but fuses a chain of them into a copy kernel of its own.
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import moves_only_unit_axes, relax_function_pass
from cl_validate.ir import is_identity, op_name, permute_axes, shape_exprs, static_shape

_VIEWS = ("relax.reshape", "relax.squeeze", "relax.expand_dims")


@mutator
class _UnitPermuteRewriter(PyExprMutator):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.views: dict[relax.Var, relax.Expr] = {}  # a view's var -> the data it views

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if op_name(binding.value) in _VIEWS:
            self._view(binding)
            return
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
        self._view(binding, data, unit_permute=True)

    def _view(self, binding: relax.VarBinding, data: relax.Expr | None = None,
              unit_permute: bool = False) -> None:
        """`binding` (a view, or a permute of size-1 axes of `data`) as a reshape of what it
        views at the root: of `data`'s own input when `data` is a view too."""
        if data is None:
            data = self.visit_expr(binding.value.args[0])
        out_shape = shape_exprs(binding.var)
        source = self.views.get(data, data) if isinstance(data, relax.Var) else data
        if out_shape is None or (source is data and not unit_permute):
            super().visit_var_binding_(binding)  # a view of a computed value: as it is
        else:
            value = self.builder_.normalize(relax.op.reshape(source, out_shape))
            self.builder_.emit_normalized(relax.VarBinding(binding.var, value))
        if out_shape is not None:
            self.views[binding.var] = source


def unit_permutes_to_reshapes(func: relax.Function) -> relax.Function:
    """Every permute of a statically known shape that keeps the order of its non-1 axes becomes
    ``R.reshape`` to the same output shape (symbolic extents count as "not 1"); a view of a
    view, one reshape."""
    new = _UnitPermuteRewriter().visit_expr(func)
    return func if new.same_as(func) else relax.analysis.remove_all_unused(new)


PermuteToReshape = relax_function_pass("PermuteToReshape")(unit_permutes_to_reshapes)

__all__ = ["PermuteToReshape", "unit_permutes_to_reshapes"]
