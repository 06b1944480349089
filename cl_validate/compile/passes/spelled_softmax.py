"""SpelledSoftmax: a softmax written out, ``exp(x - max(x)) / sum(exp(x - max(x)))`` over one
axis, becomes Relax's ``nn.softmax``.

Models and tutorials spell the numerically stable softmax by hand (``a - a.amax(-1,
keepdim=True)``, ``exp``, ``/ e.sum(-1, keepdim=True)``): four kernels where one does, and an
attention written that way is not seen as attention. The op computes the same steps (the
maximum, the exponentials of the differences, their sum, the quotient), so the rewrite only
changes how many kernels do it. Matched only when the maximum and the sum run over the same
single axis with ``keepdims``, subtract from the same tensor, and the exponentials are read by
the sum and the quotient alone; the form without the maximum is left as written (it
overflows where the op would not, so the two are not the same program).
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import relax_function_pass
from cl_validate.ir import bindings, known_shape, op_name, use_sites


def _axis(call: relax.Expr | None) -> int | None:
    """The one axis a ``keepdims`` reduction runs over (non-negative), else None."""
    attrs = getattr(call, "attrs", None)
    rank = len(known_shape(call) or ())
    if attrs is None or not rank or not bool(attrs.keepdims) or attrs.axis is None or \
            len(attrs.axis) != 1:
        return None
    return int(attrs.axis[0]) % rank


_Values = dict[relax.Var, relax.Expr]
_Uses = dict[relax.Var, list[relax.Var | None]]


def _quotient(values: _Values, uses: _Uses, value: relax.Expr
              ) -> tuple[relax.Call, relax.Call] | None:
    """``(exp, sum)`` when `value` is ``exp(·) / sum(exp(·), axis)`` over one axis with
    ``keepdims``, the exponentials read by the two alone."""
    if op_name(value) != "relax.divide":
        return None
    e, total = value.args  # type: ignore[attr-defined]
    summed = values.get(total) if isinstance(total, relax.Var) else None
    exp = values.get(e) if isinstance(e, relax.Var) else None
    if op_name(summed) != "relax.sum" or op_name(exp) != "relax.exp" or \
            _axis(summed) is None or len(uses.get(e, [])) != 2 or \
            not summed.args[0].same_as(e):  # type: ignore[union-attr]
        return None
    return exp, summed  # type: ignore[return-value]


def _written_out(values: _Values, uses: _Uses,
                 value: relax.Expr) -> tuple[relax.Expr, int] | None:
    """``(x, axis)`` when `value` is ``exp(x - max(x, axis)) / sum(that exp, axis)``."""
    found = _quotient(values, uses, value)
    if found is None or len(uses.get(value.args[1], [])) != 1:  # type: ignore[attr-defined]
        return None
    exp, summed = found
    diff = exp.args[0]
    sub = values.get(diff) if isinstance(diff, relax.Var) else None
    if op_name(sub) != "relax.subtract" or len(uses.get(diff, [])) != 1:
        return None
    x, m = sub.args  # type: ignore[union-attr]
    peak = values.get(m) if isinstance(m, relax.Var) else None
    if op_name(peak) != "relax.max" or len(uses.get(m, [])) != 1 or \
            not peak.args[0].same_as(x):  # type: ignore[union-attr]
        return None
    axis = _axis(summed)
    if axis is None or axis != _axis(peak) or known_shape(x) != known_shape(value):
        return None
    return x, axis


#: Why a softmax written without its maximum stays as it is (said where it is between two
#: products: attention's)
NO_MAXIMUM = ("a softmax written without subtracting its maximum (exp(s) / sum(exp(s))): it "
              "overflows where the attention op would not, so the two are not the same program")


def bare_softmaxes(values: _Values, uses: _Uses) -> set[relax.Var]:
    """The quotients ``exp(x) / sum(exp(x), axis)`` (one axis, ``keepdims``; the exponentials
    read by the two alone) among a function's bindings `values` (read as `uses` says):
    softmaxes written without their maximum, left as written."""
    return {var for var, value in values.items() if _quotient(values, uses, value) is not None}


@mutator
class _Rewrite(PyExprMutator):  # type: ignore[misc]
    def __init__(self, found: dict[relax.Var, tuple[relax.Expr, int]]) -> None:
        super().__init__()
        self.found = found

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        hit = self.found.get(binding.var)
        if hit is None:
            super().visit_var_binding_(binding)
            return
        x, axis = hit
        new = self.builder_.normalize(relax.op.nn.softmax(self.visit_expr(x), axis))
        self.builder_.emit_normalized(relax.VarBinding(binding.var, new))


def spelled_softmax(func: relax.Function) -> relax.Function:
    """Every written-out, max-subtracted softmax as one ``nn.softmax``."""
    values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    uses = use_sites(func)
    found = {var: hit for var, value in values.items()
             if (hit := _written_out(values, uses, value)) is not None}
    if not found:
        return func
    return relax.analysis.remove_all_unused(_Rewrite(found).visit_expr(func))


SpelledSoftmax = relax_function_pass("SpelledSoftmax")(spelled_softmax)

__all__ = ["NO_MAXIMUM", "SpelledSoftmax", "bare_softmaxes", "spelled_softmax"]
