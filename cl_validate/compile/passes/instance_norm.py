"""PerSampleInstanceNorm: an instance norm on a batch of more than one sample, as the norm it is.

PyTorch's ``instance_norm`` on ``(B, C, H, W)`` folds the batch into the channels and runs a
batch norm without statistics: ``view(1, B·C, H, W)``, normalize over axes 0, 2, 3, ``view(B, C,
H, W)``, with γ and β ``repeat``-ed B times (the import: ``reshape``, ``nn.instance_norm`` with
``axes=[0, 2, 3]``, ``tile``-d γ and β, ``reshape``). The fold has no layout rule: in a
channels-last program each instance norm costs a transpose into NCHW and its reshape (CycleGAN's
generator, style transfer, RAFT's encoder at a batch of two frames; at batch one the views are
identities and vanish). Each ``(b, c)`` plane is normalized alone either way, so the three ops
are one ``nn.instance_norm`` of ``(B, C, H, W)`` over its spatial axes with the per-channel γ and
β, which ConvertLayout carries into NHWC. The statistics are the same sums over the same
elements: the rewrite is exact.

Taken only where γ and β repeat one per-channel vector over the batch (a ``tile`` of it, or a
constant whose B rows are equal) and the views fold exactly ``(B, C, …) ↔ (1, B·C, …)``.
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator

from cl_validate.compile.passes._plan import remake, with_fields
from cl_validate.compile.passes._util import rebind, relax_function_pass
from cl_validate.ir import bindings, is_tensor_constant, known_shape, op_name, use_sites

_NORM = "relax.nn.instance_norm"


def _per_channel(e: relax.Expr, values: dict[relax.Var, relax.Expr], batch: int,
                 channels: int) -> relax.Expr | None:
    """The (C,) vector `e` (of shape (B·C,)) repeats `batch` times, None if it does not."""
    value = values.get(e) if isinstance(e, relax.Var) else e
    if op_name(value) == "relax.tile":
        src = value.args[0]  # type: ignore[union-attr]
        reps = [int(r) for r in value.attrs.repeats]  # type: ignore[union-attr]
        if known_shape(src) == (channels,) and reps == [batch]:
            return src  # type: ignore[no-any-return]
        return None
    if is_tensor_constant(value):
        rows = np.asarray(value.value.numpy()).reshape(batch, channels)  # type: ignore[union-attr]
        if (rows == rows[0]).all():
            return relax.const(np.ascontiguousarray(rows[0]), str(rows.dtype))
    return None


def _plans(func: relax.Function) -> dict[relax.Var, relax.Call]:
    """The last view of each folded instance norm → the norm on the unfolded data."""
    values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    uses = use_sites(func)
    out: dict[relax.Var, relax.Call] = {}
    for var, back in values.items():
        norm_var = back.args[0] if op_name(back) == "relax.reshape" else None  # type: ignore[union-attr]
        norm = values.get(norm_var) if isinstance(norm_var, relax.Var) else None
        if op_name(norm) != _NORM or uses.get(norm_var) != [var]:
            continue
        fold_var = norm.args[0]  # type: ignore[union-attr]
        fold = values.get(fold_var) if isinstance(fold_var, relax.Var) else None
        if op_name(fold) != "relax.reshape" or uses.get(fold_var) != [norm_var]:
            continue
        data = fold.args[0]  # type: ignore[union-attr]
        shape, folded, result = known_shape(data), known_shape(fold_var), known_shape(var)
        attrs = norm.attrs  # type: ignore[union-attr]
        if shape is None or result != shape or len(shape) < 3 or shape[0] < 2 or \
                folded != (1, shape[0] * shape[1], *shape[2:]) or \
                int(attrs.channel_axis) != 1 or \
                sorted(int(a) for a in attrs.axes) != [0, *range(2, len(shape))]:
            continue
        gamma, beta = (_per_channel(x, values, shape[0], shape[1])
                       for x in norm.args[1:3])  # type: ignore[union-attr]
        if gamma is None or beta is None:
            continue
        new_attrs = with_fields(attrs, axes=list(range(2, len(shape))))
        out[var] = remake(norm, [data, gamma, beta], new_attrs)
    return out


def _unfolded(m: PyExprMutator, plan: relax.Call, _var: relax.Var) -> relax.Expr:
    return remake(plan, [m.visit_expr(a) for a in plan.args])


def per_sample_instance_norm(func: relax.Function) -> relax.Function:
    """Every batch-folded instance norm as one ``nn.instance_norm`` over the spatial axes."""
    return rebind(func, _plans(func), _unfolded)


PerSampleInstanceNorm = relax_function_pass("PerSampleInstanceNorm")(per_sample_instance_norm)

__all__ = ["PerSampleInstanceNorm", "per_sample_instance_norm"]
