"""LowerConvTranspose: a transposed convolution in any layout, as a convolution in that layout.

TVM 0.27 lowers ``relax.nn.conv1d/2d/3d_transpose`` only in the import layout (``NCHW`` data,
``IOHW`` kernel, output like the data). ConvertLayout has a rule for the op, so with no
desired layout for it the op follows its input into NHWC, where LegalizeOps leaves it alone and
the build fails ("CodeGenVM cannot emit this Relax operator"). Pinning it to NCHW builds, at the
price of a transpose pair around every upsampling.

This pass removes the op instead, in whatever layout it is in, with the identity every
framework's reference lowering rests on: a transposed convolution with stride ``s``, padding
``p``, output padding ``q`` and dilation ``d`` is a plain convolution (stride 1, dilation ``d``)
of the input with ``s - 1`` zeros inserted between neighbours, padded by ``d (k - 1) - p``
before and ``d (k - 1) - p + q`` after, with the kernel flipped spatially and its ``I``/``O``
axes swapped (regrouped when ``groups > 1``). So:

* the data path is reshape → pad (the zeros) → reshape, in the op's own layout: no transpose;
  negative paddings (``p`` larger than the kernel's reach) become a slice;
* the weight path (flip, regroup, permute to the convolution's kernel layout) depends on the
  weights only and folds into one constant when the weights are bound;
* the convolution takes the kernel layout the case asks of convolutions (``[layout]``'s entry
  for the same op family) when its data layout matches, otherwise the data layout's own
  (``NHWC`` → ``OHWI``).

The result is numerically the same sum of products (in another order); the extra zeros cost
``s^d`` times the multiply-adds of the direct form, as TVM's own NCHW lowering does. Ops TVM
lowers itself (import layout) are left alone. The new convolution keeps the transposed one's
variable, so attribution and the kernel list name it as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import relax_function_pass
from cl_validate.ir import op_name, shape_exprs

#: transposed op → (its convolution, its TVM-lowerable data layout and kernel layout)
TRANSPOSED = {
    "relax.nn.conv1d_transpose": ("relax.nn.conv1d", "NCW", "IOW"),
    "relax.nn.conv2d_transpose": ("relax.nn.conv2d", "NCHW", "IOHW"),
    "relax.nn.conv3d_transpose": ("relax.nn.conv3d", "NCDHW", "IODHW"),
}
_CONV = {
    "relax.nn.conv1d": relax.op.nn.conv1d,
    "relax.nn.conv2d": relax.op.nn.conv2d,
    "relax.nn.conv3d": relax.op.nn.conv3d,
}


def tvm_lowers(call: relax.Call) -> bool:
    """True if TVM's own legalization lowers this transposed convolution."""
    _, data, kernel = TRANSPOSED[str(op_name(call))]
    a = call.attrs
    return (str(a.data_layout) == data and str(a.kernel_layout) == kernel
            and str(a.out_layout) == data)


def _plain(layout: str, letters: str) -> bool:
    return layout.isalpha() and layout.isupper() and sorted(layout) == sorted(letters)




@mutator
class _Lowerer(PyExprMutator):  # type: ignore[misc]
    def __init__(self, conv_layouts: Mapping[str, Sequence[str]]) -> None:
        super().__init__()
        self.conv_layouts = conv_layouts

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        if op_name(value) in TRANSPOSED and not tvm_lowers(value):
            new = self._lower(self.visit_expr(value))
            if new is not None:
                self.builder_.emit_normalized(
                    relax.VarBinding(binding.var, self.builder_.normalize(new)))
                return
        super().visit_var_binding_(binding)

    def _emit(self, expr: relax.Expr) -> relax.Var:
        return self.builder_.emit(expr)

    def _lower(self, call: relax.Call) -> relax.Expr | None:
        conv_op, import_data, import_kernel = TRANSPOSED[str(op_name(call))]
        a = call.attrs
        data_layout, kernel_layout = str(a.data_layout), str(a.kernel_layout)
        spatial = import_data[2:]  # "HW"
        if (str(a.out_layout) != data_layout or not _plain(data_layout, import_data)
                or not _plain(kernel_layout, import_kernel)):
            return None
        data, weight = call.args
        shape, w_shape = shape_exprs(data), shape_exprs(weight)
        if shape is None or w_shape is None:
            return None
        nd = len(spatial)
        strides = [int(s) for s in a.strides]
        dilation = [int(d) for d in a.dilation]
        pad = [int(p) for p in a.padding]  # begin per spatial axis, then end
        out_pad = [int(q) for q in a.output_padding]
        groups = int(a.groups)
        try:
            kernel = [int(w_shape[kernel_layout.index(ax)]) for ax in spatial]
            c_in = int(w_shape[kernel_layout.index("I")])
            c_out_g = int(w_shape[kernel_layout.index("O")])
        except TypeError:  # a symbolic kernel extent
            return None

        # Data: s - 1 zeros after every element along each strided spatial axis.
        if any(s > 1 for s in strides):
            expanded: list[Any] = []
            widths: list[int] = []
            merged: list[Any] = []
            for axis, extent in zip(data_layout, shape, strict=True):
                s = strides[spatial.index(axis)] if axis in spatial else 1
                expanded.append(extent)
                widths += [0, 0]
                merged.append(extent * s if s > 1 else extent)
                if s > 1:
                    expanded.append(1)
                    widths += [0, s - 1]
            data = self._emit(relax.op.reshape(data, expanded))
            data = self._emit(relax.op.nn.pad(data, widths))
            data = self._emit(relax.op.reshape(data, merged))
        # Padding: the kernel's reach minus the transposed padding, less the s - 1 zeros the
        # dilation put after the last element; negative amounts are cut off instead.
        begin, end = [], []
        for i in range(nd):
            reach = dilation[i] * (kernel[i] - 1)
            begin.append(reach - pad[i])
            end.append(reach - pad[nd + i] + out_pad[i] - (strides[i] - 1))
        if any(b < 0 for b in begin + end):
            axes = [data_layout.index(ax) for ax in spatial]
            dshape = shape_exprs(data)
            assert dshape is not None
            data = self._emit(relax.op.strided_slice(
                data, axes, [max(0, -b) for b in begin],
                [dshape[ax] - max(0, -e) for ax, e in zip(axes, end, strict=True)]))
        conv_pad = [max(0, b) for b in begin] + [max(0, e) for e in end]

        # Weight: in the import order (I, O/g, *spatial), flipped, regrouped to (O, I/g, ...),
        # then permuted to the convolution's kernel layout. All of it folds.
        w = weight
        canon = "IO" + spatial
        if kernel_layout != canon:
            w = self._emit(relax.op.permute_dims(w, [kernel_layout.index(x) for x in canon]))
        for spatial_axis in range(2, 2 + nd):
            w = self._emit(relax.op.flip(w, spatial_axis))
        if groups == 1:
            w = self._emit(relax.op.permute_dims(w, [1, 0, *range(2, 2 + nd)]))
        else:
            c_in_g = c_in // groups
            w = self._emit(relax.op.reshape(w, [groups, c_in_g, c_out_g, *kernel]))
            w = self._emit(relax.op.permute_dims(w, [0, 2, 1, *range(3, 3 + nd)]))
            w = self._emit(relax.op.reshape(w, [groups * c_out_g, c_in_g, *kernel]))
        conv_kernel = self._kernel_layout(conv_op, data_layout)
        canon_conv = "OI" + spatial
        if conv_kernel != canon_conv:
            w = self._emit(relax.op.permute_dims(w, [canon_conv.index(x) for x in conv_kernel]))
        return _CONV[conv_op](
            data, w, strides=[1] * nd, padding=conv_pad, dilation=dilation, groups=groups,
            data_layout=data_layout, kernel_layout=conv_kernel, out_layout=data_layout,
            out_dtype=str(a.out_dtype) if str(a.out_dtype) else "")

    def _kernel_layout(self, conv_op: str, data_layout: str) -> str:
        wanted = self.conv_layouts.get(conv_op)
        if wanted is not None and len(wanted) >= 2 and str(wanted[0]) == data_layout:
            return str(wanted[1])
        return data_layout.replace("N", "O").replace("C", "I")


def lower_conv_transpose(conv_layouts: Mapping[str, Sequence[str]]) -> Any:
    """The pass, for a case whose ``[layout]`` asks `conv_layouts` of convolutions."""

    def rewrite(func: relax.Function) -> relax.Function:
        if not any(op_name(b.value) in TRANSPOSED
                   for block in getattr(func.body, "blocks", [])
                   for b in block.bindings if isinstance(b, relax.VarBinding)):
            return func
        return _Lowerer(conv_layouts).visit_expr(func)

    return relax_function_pass("LowerConvTranspose")(rewrite)()


__all__ = ["TRANSPOSED", "lower_conv_transpose", "tvm_lowers"]
