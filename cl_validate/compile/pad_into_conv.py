"""A constant pad read by a convolution alone is done inside the convolution's kernel.

``conv2d(pad(x, v), w, padding=0)`` with the pad on the image axes only: FuseOps does not fuse
a producer into a convolution, so the pad is a kernel of its own, writing the whole padded
image to memory for the convolution to read back. TOPI's convolution pads inside its kernel
(a ``pad_temp`` stage every schedule inlines into its reads), with zeros. So, at
legalization, such a pair becomes one kernel:

- a pad of zeros (a model's ``F.pad`` before a convolution) moves into the convolution's own
  ``padding``;
- a pad of another value — what `integer_compute` writes for a quantized convolution, whose
  zero is the activation's zero point — becomes TOPI's convolution of the same pad stage with
  that value (``topi.nn.conv`` of ``topi.nn.pad``), legalized here as Relax would legalize the
  convolution (`relax.transform.LegalizeOps`'s own call), with the pad in it.

Exact: the same values are read in the same order; only where the padded image lives
changes. A pad that something else also reads, pads the batch or channel axes, or a
convolution that pads by itself as well, is left as it was.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax, topi
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.ir import bindings, op_name, replace_function, tensor_type, use_sites

_CONV, _PAD = "relax.nn.conv2d", "relax.nn.pad"


def _image_pads(pad: relax.Call, layout: str) -> tuple[list[int], list[int]] | None:
    """(before, after) of a constant pad that pads the H and W axes of `layout` only."""
    if str(pad.attrs.pad_mode) != "constant":
        return None
    width = [int(w) for w in pad.attrs.pad_width]
    if len(width) != 2 * len(layout):
        return None
    before, after = width[0::2], width[1::2]
    if any(before[i] or after[i] for i, d in enumerate(layout) if d not in "HW"):
        return None
    return before, after


def _padded_conv(data: Any, weight: Any, *, before: list[int], after: list[int], value: Any,
                 stride: Any, dilation: Any, groups: int, data_layout: str, kernel_layout: str,
                 out_dtype: str | None) -> Any:
    padded = topi.nn.pad(data, before, after, pad_value=value, name="pad_temp")
    return topi.nn.conv(padded, weight, stride, 0, dilation, groups, data_layout,
                        kernel_layout, out_dtype)


@mutator
class _PadIntoConv(PyExprMutator):  # type: ignore[misc]
    def __init__(self, mod: tvm.IRModule, pads: dict[relax.Var, relax.Call]) -> None:
        super().__init__(mod)
        self.pads = pads

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if op_name(call) != _CONV or call.args[0] not in self.pads:
            return call
        attrs = call.attrs
        pad = self.pads[call.args[0]]
        layout = str(attrs.data_layout)
        if str(attrs.out_layout) != layout or any(int(p) for p in attrs.padding):
            return call
        found = _image_pads(pad, layout)
        if found is None:
            return call
        before, after = found
        h, w = layout.index("H"), layout.index("W")
        value = float(pad.attrs.pad_value)
        x = self.visit_expr(pad.args[0])
        out_dtype = str(attrs.out_dtype) or None
        if value == 0.0:
            return relax.op.nn.conv2d(
                x, call.args[1], strides=attrs.strides,
                padding=[before[h], before[w], after[h], after[w]], dilation=attrs.dilation,
                groups=attrs.groups, data_layout=layout, kernel_layout=str(attrs.kernel_layout),
                out_layout=layout, out_dtype=out_dtype or "")
        ty = tensor_type(x)
        if ty is None:
            return call
        dtype = str(ty.dtype)
        code = int(value) if "int" in dtype else value
        return self.builder_.call_te(
            _padded_conv, x, call.args[1], before=before, after=after,
            value=tvm.tirx.const(code, dtype), stride=attrs.strides, dilation=attrs.dilation,
            groups=int(attrs.groups), data_layout=layout,
            kernel_layout=str(attrs.kernel_layout), out_dtype=out_dtype,
            primfunc_name_hint="conv2d")


def pad_into_conv(mod: tvm.IRModule) -> tvm.IRModule:
    """Every Relax function's convolutions read their constant pads inside their kernels (see
    the module docstring)."""
    out = mod
    for gvar, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue
        uses = use_sites(func)
        pads = {b.var: b.value for b in bindings(func) if op_name(b.value) == _PAD
                and len(uses.get(b.var, [])) == 1 and uses[b.var][0] is not None}
        if not pads:
            continue
        rewriter = _PadIntoConv(out, pads)
        new = relax.analysis.remove_all_unused(rewriter.visit_expr(func))
        out = replace_function(rewriter.builder_.get(), gvar.name_hint, new)
    return out


__all__ = ["pad_into_conv"]
