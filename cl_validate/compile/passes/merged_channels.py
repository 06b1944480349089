"""MergeFilterChannels: a depthwise filter along one axis, run on a permuted tensor, as a
depthwise convolution over merged channels that reads the tensor where it lies.

transformers' Nyströmformer adds ``conv(value)`` to its attention's context: a depthwise
``Conv2d(heads, heads, (k, 1), groups=heads)`` over ``value.permute(0, 2, 1, 3)``, the
``(B, S, heads, head_dim)`` projection read as ``(B, heads, S, head_dim)``: a filter along the
sequence, the same for every ``head_dim`` column of a head. In a channels-last program that
costs three transforms a layer: the value into ``(B, S, head_dim, heads)`` for the NHWC
convolution, its output back, and the context's own permute, which the result no longer
cancels.

A depthwise convolution whose kernel is 1 wide along one spatial axis ``U`` (stride 1, no
padding along it) filters along the other axis ``F`` for each channel ``c`` and each
position ``u`` alone: it is the depthwise convolution of the ``C·U`` merged channels
``(c, u)`` with channel ``c``'s kernel for each. When the input is ``permute(v, p)`` with
``v`` stored as ``(B, F, C, U)``, those merged channels are ``v``'s contiguous last
``C·U`` values, so the convolution reads ``v`` as ``(B, F, 1, C·U)`` (a view) and writes
``(B, F', 1, C·U)``, which viewed as ``(B, F', C, U)`` and permuted by ``p`` is the
original output. Every output value is the same sum of the same products (the kernel is
repeated, never combined). The permutes this leaves are the import's spelling of a
channels-last convolution and the model's own: ConvertLayout and the cleanup passes
cancel them where the layouts around allow, and the pipeline keeps the rewrite only where
its layout stages then leave fewer run-time transforms (`cl_validate.compile.pipeline`).
"""

from __future__ import annotations

from typing import Any

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import relax_function_pass
from cl_validate.ir import bindings, known_shape, op_name, permute_axes

#: (filtered axis F, unit-kernel axis U) of an NCHW input → the permute `p` with
#: ``input = permute(v, p)`` for ``v`` stored as ``(B, F, C, U)``
_STORED_AS = {(2, 3): (0, 2, 1, 3), (3, 2): (0, 2, 3, 1)}


def _ints(values: Any) -> list[int]:
    return [int(v) for v in values]


def _plan(call: relax.Call, data_axes: tuple[int, ...], x_shape: tuple[int, ...],
          w_shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(F, U) when `call` is a depthwise NCHW conv2d the rewrite computes exactly, else None."""
    a = call.attrs
    if len(x_shape) != 4 or str(a.data_layout) != "NCHW" or str(a.kernel_layout) != "OIHW" or \
            str(a.out_layout) not in ("NCHW", ""):
        return None
    channels = x_shape[1]
    if int(a.groups) != channels or w_shape[0] != channels or w_shape[1] != 1:
        return None
    strides, padding = _ints(a.strides), _ints(a.padding)
    for (f, u), stored in _STORED_AS.items():
        k = u - 2  # the unit axis's index among (H, W)
        if data_axes == stored and w_shape[u] == 1 and strides[k] == 1 and \
                padding[k] == 0 and padding[k + 2] == 0:
            return f, u
    return None


@mutator
class _Merger(PyExprMutator):  # type: ignore[misc]
    def __init__(self, permutes: dict[relax.Var, relax.Call]) -> None:
        super().__init__()
        self.permutes = permutes

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        call = binding.value
        if op_name(call) != "relax.nn.conv2d":
            super().visit_var_binding_(binding)
            return
        x, w = call.args
        permute = self.permutes.get(x) if isinstance(x, relax.Var) else None
        axes = permute_axes(permute) if permute is not None else None
        xs, ws, out = known_shape(x), known_shape(w), known_shape(binding.var)
        plan = None if permute is None or axes is None or xs is None or ws is None or \
            out is None else _plan(call, tuple(axes), xs, ws)
        if plan is None or permute is None or xs is None or ws is None or out is None:
            super().visit_var_binding_(binding)
            return
        f, u = plan
        k = f - 2  # the filtered axis's index among (H, W)
        a = call.attrs
        batch, channels, merged = xs[0], xs[1], xs[1] * xs[u]
        strides, dilation, padding = _ints(a.strides), _ints(a.dilation), _ints(a.padding)
        bb = self.builder_
        v = self.visit_expr(permute.args[0])
        # v as (B, F, 1, C·U), read in the import's NCHW spelling: (B, C·U, F, 1)
        view = bb.emit(relax.op.reshape(v, [batch, xs[f], 1, merged]))
        data = bb.emit(relax.op.permute_dims(view, [0, 3, 1, 2]))
        kernel = bb.emit(relax.op.reshape(w, [channels, 1, ws[f], 1]))
        kernel = bb.emit(relax.op.repeat(kernel, xs[u], axis=0))  # channel c for each u
        conv = bb.emit(relax.op.nn.conv2d(
            data, kernel, strides=[strides[k], 1], padding=[padding[k], 0, padding[k + 2], 0],
            dilation=[dilation[k], 1], groups=merged, data_layout="NCHW",
            kernel_layout="OIHW", out_layout="NCHW", out_dtype=a.out_dtype))
        back = bb.emit(relax.op.permute_dims(conv, [0, 2, 3, 1]))  # (B, F', 1, C·U)
        stored = bb.emit(relax.op.reshape(back, [batch, out[f], channels, xs[u]]))
        value = bb.normalize(relax.op.permute_dims(stored, list(_STORED_AS[(f, u)])))
        bb.emit_normalized(relax.VarBinding(binding.var, value))


def merge_filter_channels(func: relax.Function) -> relax.Function:
    """Every depthwise conv2d with a kernel 1 wide along one axis, on a permute of a tensor
    stored as (B, F, C, U), as the depthwise conv2d of that tensor's merged (C, U) channels
    (module docstring)."""
    permutes = {b.var: b.value for b in bindings(func)
                if isinstance(b, relax.VarBinding) and op_name(b.value) == "relax.permute_dims"}
    if not permutes:
        return func
    new = _Merger(permutes).visit_expr(func)
    return func if new.same_as(func) else relax.analysis.remove_all_unused(new)


MergeFilterChannels = relax_function_pass("MergeFilterChannels")(merge_filter_channels)

__all__ = ["MergeFilterChannels", "merge_filter_channels"]
