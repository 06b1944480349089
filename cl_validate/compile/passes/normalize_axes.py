"""NormalizeAxes: negative axis attributes become their non-negative equals, before ConvertLayout.

TVM 0.27's layout rules index layout strings with the axis attribute as written. For a negative
axis that is out of bounds: ``R.squeeze(x, axis=[-1])`` makes ConvertLayout die with
``std::bad_alloc`` (InferLayoutSqueeze writes ``axis_str[-1]``), ``R.stack(..., axis=-1)`` with
``basic_string::replace``, and ``R.permute_dims(x, axes=[0, 1, -1, -2])`` with "Invalid layout".
PyTorch code writes negative axes all the time (``y.squeeze(-1)`` in ECA-Net,
``nn.MultiheadAttention``'s projections), and the importer keeps them as written.

``axis = -k`` on a rank-``r`` tensor means ``r - k``; the rewrite changes the spelling, never
the computation, so it is exact. Ops whose rank of reference is the *output's* (``expand_dims``
and ``stack`` add axes) are normalized against it.
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._plan import with_fields
from cl_validate.compile.passes._util import relax_function_pass
from cl_validate.ir import ndim, op_name

#: op -> (attribute, whose rank it counts against: "in" the first argument's, "out" the result's)
AXIS_ATTRS: dict[str, tuple[str, str]] = {
    **{f"relax.{n}": ("axis", "in") for n in (
        "squeeze sum mean max min prod variance std argmax argmin cumsum cumprod "
        "nn.softmax nn.log_softmax concat split flip repeat take").split()},
    "relax.permute_dims": ("axes", "in"),
    "relax.strided_slice": ("axes", "in"),
    "relax.expand_dims": ("axis", "out"),
    "relax.stack": ("axis", "out"),
}


def _rank(call: relax.Call, which: str) -> int | None:
    if which == "out":
        return ndim(call)
    arg = call.args[0]
    if isinstance(arg, relax.Tuple):  # concat / stack: the fields' rank
        arg = arg.fields[0] if arg.fields else None
    return ndim(arg)


def normalized(call: relax.Call) -> relax.Call | None:
    """``call`` with its negative axes made non-negative, None if it has none (or an unknown
    rank, where the spelling cannot be resolved)."""
    spec = AXIS_ATTRS.get(op_name(call) or "")
    if spec is None or call.attrs is None:
        return None
    field, which = spec
    value = getattr(call.attrs, field, None)
    rank = _rank(call, which)
    if value is None or rank is None:
        return None
    if isinstance(value, int) or hasattr(value, "value"):  # a single axis
        axis = int(value)
        if axis >= 0:
            return None
        new: object = axis + rank
    else:
        axes = [int(a) for a in value]
        if all(a >= 0 for a in axes):
            return None
        new = [a + rank if a < 0 else a for a in axes]
    attrs = with_fields(call.attrs, **{field: new})
    return relax.Call(call.op, call.args, attrs, call.ty_args, call.span)


@mutator
class _AxisNormalizer(PyExprMutator):  # type: ignore[misc]
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        new = normalized(call)
        return call if new is None else new


def normalize_axes(func: relax.Function) -> relax.Function:
    """Every axis attribute of the ops in `AXIS_ATTRS` spelled non-negative."""
    new = _AxisNormalizer().visit_expr(func)
    return func if new.same_as(func) else new


NormalizeAxes = relax_function_pass("NormalizeAxes")(normalize_axes)

__all__ = ["AXIS_ATTRS", "NormalizeAxes", "normalize_axes", "normalized"]
