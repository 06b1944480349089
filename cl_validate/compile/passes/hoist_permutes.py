"""HoistPermutes: a transpose after a concat of single-channel parts moves onto the parts.

Inception-v3's ``transform_input`` (and any model that slices an NCHW input into channels,
rescales each and concatenates them back) builds a (N, C, H, W) tensor from (N, 1, H, W)
parts in NCHW and then needs one real transpose to NHWC for the first convolution. Moved onto
the parts, that transpose only moves their size-1 channel axis: a free reshape each
(PermuteToReshape). SinkPermutes cannot find this, as it only moves permutes downwards.

``permute_dims(concat(parts, axis), q)`` equals ``concat([permute_dims(p, q) for p in
parts], axis=q⁻¹[axis])`` exactly (pure data movement). It is rewritten only when the concat
is read by this permute alone and every part's permute moves only size-1 axes, so a real
transpose becomes free ones and nothing else changes.
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import inverse, moves_only_unit_axes, relax_function_pass
from cl_validate.ir import (
    bindings,
    is_identity,
    mark_origin,
    op_name,
    origin_tag,
    permute_axes,
    static_shape,
    use_sites,
)

CONCAT = "relax.concat"


def _hoistable(func: relax.Function) -> dict[relax.Var, relax.Call]:
    """Each concat var read only by one permute that moves only its parts' size-1 axes."""
    uses = use_sites(func)
    values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    found: dict[relax.Var, relax.Call] = {}
    for var, value in values.items():
        axes = permute_axes(value)
        src = value.args[0] if axes is not None else None
        if axes is None or is_identity(axes) or not isinstance(src, relax.Var):
            continue
        concat = values.get(src)
        if op_name(concat) != CONCAT or uses.get(src) != [var] or not isinstance(
                concat.args[0], relax.Tuple):  # type: ignore[union-attr]
            continue
        shapes = [static_shape(f) for f in concat.args[0].fields]  # type: ignore[union-attr]
        if all(s is not None and len(s) == len(axes) and moves_only_unit_axes(s, axes)
               for s in shapes):
            found[var] = concat  # type: ignore[assignment]
    return found


@mutator
class _Hoister(PyExprMutator):  # type: ignore[misc]
    def __init__(self, hoist: dict[relax.Var, relax.Call]) -> None:
        super().__init__()
        self.hoist = hoist

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        concat = self.hoist.get(binding.var)
        if concat is None:
            super().visit_var_binding_(binding)
            return
        axes = permute_axes(binding.value)
        assert axes is not None
        origin = origin_tag(binding.value)
        parts = [self.builder_.emit(mark_origin(relax.op.permute_dims(self.visit_expr(f),
                                                                   list(axes)), origin))
                 for f in concat.args[0].fields]
        axis = inverse(axes)[int(concat.attrs.axis) % len(axes)]
        value = relax.op.concat(parts, axis=axis)
        self.builder_.emit_normalized(relax.VarBinding(binding.var,
                                                       self.builder_.normalize(value)))


def hoist_permutes(func: relax.Function) -> relax.Function:
    """Permutes of concats whose parts they would only reshape move onto the parts."""
    hoist = _hoistable(func)
    if not hoist:
        return func
    return relax.analysis.remove_all_unused(_Hoister(hoist).visit_expr(func))


HoistPermutes = relax_function_pass("HoistPermutes")(hoist_permutes)

__all__ = ["HoistPermutes", "hoist_permutes"]
