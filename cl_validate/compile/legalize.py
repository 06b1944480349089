"""Legalization that tags every layout transform's PrimFunc, so the analysis finds it again;
and what legalization could not lower.

After FuseOps and FuseTIR a transpose is a few loops inside a fused kernel, indistinguishable
by name from any other copy. Our legalization of ``permute_dims`` and ``layout_transform``
writes `TRANSFORM_ATTR` (which op), `AXES_ATTR` (the permutation) and `SOURCE_ATTR` (the
attribution `annotate_transforms` put in the call's span) onto the PrimFunc it creates;
fusion keeps the PrimFunc as a component of its kernel, and `cl_validate.analysis` reads the
attributes back.

LegalizeOps leaves an op as it is when TVM's lowering refuses its layout (TVM 0.27 lowers
``conv2d_transpose`` in NCHW/IOHW only); the build then fails deep in the VM's code
generator. `unlowered_ops` finds such ops right after the pipeline, and `import_layouts` gives
the layout to keep them in instead (see `cl_validate.compile.program`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.attention import attention_legalizations
from cl_validate.compile.attribution import annotate_transforms
from cl_validate.compile.context import PipelineContext
from cl_validate.compile.contiguous_weights import contiguous_weights
from cl_validate.compile.pad_into_conv import pad_into_conv
from cl_validate.ir import (
    AXES_ATTR,
    SOURCE_ATTR,
    TRANSFORM_ATTR,
    TRANSFORM_OPS,
    bindings,
    is_tensor_constant,
    op_name,
    replace_function,
    tensor_type,
)
from cl_validate.spec.layouts import converted_layouts


def tagged_transform_legalizations() -> dict[str, Callable[..., Any]]:
    """Legalizations of the transform ops that tag their PrimFunc with `TRANSFORM_ATTR`."""
    def tag(op_name: str) -> Callable[..., Any]:
        default = tvm.ir.Op.get(op_name).get_attr("FLegalize")

        def legalize(bb: Any, call: Any) -> Any:
            out = default(bb, call)
            gvar = out.args[0]
            func = bb.get()[gvar].with_attr(TRANSFORM_ATTR, op_name.split(".")[-1])
            if call.span is not None:  # the attribution annotate_transforms put there
                func = func.with_attr(SOURCE_ATTR, str(call.span.source_name.name))
            if op_name == "relax.permute_dims" and call.attrs.axes is not None:
                func = func.with_attr(AXES_ATTR, [int(a) for a in call.attrs.axes])
            bb.update_func(gvar, func)
            return out

        return legalize

    return {name: tag(name) for name in TRANSFORM_OPS}


@mutator
class _QuantizeAsPyTorch(PyExprMutator):  # type: ignore[misc]
    """``quantize(x, s, zp)`` → ``quantize(x * r, 1, zp)`` with ``r = float32(1 / s)``.

    TVM's quantize divides, ``round(x / s)``; PyTorch's (``quantized_decomposed``, what PT2E
    models compute) multiplies by the reciprocal, ``round(x * float32(1 / s))``. The two
    differ by one rounding where ``x / s`` lies near a half, and in a deep network such a
    flipped code early on spreads to many outputs: the program must compute what the model
    computes. Dividing by a scale of exactly 1 is exact, so the rewritten op is PyTorch's.
    """

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if op_name(call) != "relax.quantize" or "int" not in str(call.attrs.out_dtype):
            return call
        data, scale, zp = call.args
        if not is_tensor_constant(scale) or tensor_type(data) is None:
            return call
        s = scale.value.numpy()
        recip = (1.0 / s.astype(np.float64)).astype(np.float32)
        rank, axis = int(tensor_type(data).ndim), int(call.attrs.axis)  # type: ignore[union-attr]
        if recip.ndim == 1 and recip.size > 1 and rank > 0:  # per channel, along `axis`
            shape = [1] * rank
            shape[axis % rank] = recip.size
            recip = recip.reshape(shape)
        scaled = relax.op.multiply(data, relax.const(recip))
        return relax.op.quantize(scaled, relax.const(np.ones_like(s)), zp,
                                 axis=axis, out_dtype=str(call.attrs.out_dtype))


def legalize(ctx: PipelineContext) -> Callable[[tvm.IRModule], tvm.IRModule]:
    """The ``legalize`` stage: attribute every transform, quantize as PyTorch does, pad inside
    convolutions (`pad_into_conv`), read integer matmuls' weights along the reduction on a
    CPU (`contiguous_weights`), then lower ops to PrimFuncs (attention to the kernel of
    `cl_validate.compile.attention`)."""

    def run(mod: tvm.IRModule) -> tvm.IRModule:
        mod = annotate_transforms(mod, ctx.sources, ctx.case.layout_overrides,
                                  ctx.keep_layouts, converted_layouts(ctx.case.layout))
        mod = contiguous_weights(pad_into_conv(quantize_as_pytorch(mod)), ctx.target)
        with ctx.target:
            return tvm.transform.Sequential([
                relax.backend.DispatchSampling(),
                relax.backend.DispatchSortScan(),
                relax.transform.LegalizeOps(customize_legalize_map={
                    **tagged_transform_legalizations(), **attention_legalizations()}),
                # a transpose the attention kernels read in place is read by nothing
                relax.transform.DeadCodeElimination(),
                relax.transform.AnnotateTIROpPattern(),
                relax.transform.FoldConstant(),
            ])(mod)

    return run


def quantize_as_pytorch(mod: tvm.IRModule) -> tvm.IRModule:
    """Every Relax function's quantize ops computed as PyTorch computes them
    (`_QuantizeAsPyTorch`)."""
    out = mod
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function) and any(
                op_name(b.value) == "relax.quantize" for b in bindings(func)):
            out = replace_function(out, gvar.name_hint,
                                   _QuantizeAsPyTorch().visit_expr(func))
    return out


#: attributes naming an op's layouts, in the order ConvertLayout's desired layouts list them
_LAYOUT_ATTRS = ("data_layout", "layout", "kernel_layout", "out_layout")


def _op_layout(call: relax.Call) -> list[str]:
    attrs = call.attrs
    return [str(getattr(attrs, a)) for a in _LAYOUT_ATTRS if hasattr(attrs, a)]


def _op_calls(mod: tvm.IRModule) -> list[relax.Call]:
    """Every call of a Relax op (not a function) in the module's Relax functions, in order."""
    calls: list[relax.Call] = []

    def visit(expr: Any) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            calls.append(expr)

    for _, func in mod.functions.items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return calls


def unlowered_ops(mod: tvm.IRModule) -> dict[str, list[str]]:
    """Ops with a layout left in a legalized module although TVM has a lowering for them:
    TVM refuses them in the layout they are in (``conv2d_transpose`` in NHWC), and the VM
    cannot run them. Op name → the layout of the first one left."""
    left: dict[str, list[str]] = {}
    for call in _op_calls(mod):
        name = str(call.op.name)
        if name not in left and call.op.get_attr("FLegalize") is not None:
            layout = _op_layout(call)
            if layout:
                left[name] = layout
    return left


def import_layouts(mod: tvm.IRModule, ops: Iterable[str]) -> dict[str, list[str]]:
    """For each of `ops` that has layout attributes, the layouts it had when imported (a layout
    TVM lowers: the importer writes what PyTorch computes), as a ConvertLayout desired entry."""
    wanted, found = set(ops), dict[str, list[str]]()
    for call in _op_calls(mod):
        name = str(call.op.name)
        if name in wanted and name not in found:
            layout = _op_layout(call)
            if layout:
                found[name] = layout[:2]
    return found
