"""Convolutions and ``addmm`` of a half-precision model (``model.half()``,
``model.to(torch.bfloat16)``).

TVM 0.27's importer builds every convolution (and ``addmm``'s product) with ``out_dtype =
"float32"`` whatever the model's dtype, then adds the bias as it is: a float16 or bfloat16
model fails the import ("Binary operators must have the same datatype", float32 on the
left, float16 on the right). Here the bias (``convolution``'s third argument, ``addmm``'s
first) is read in float32 for TVM's converter, and the result is cast back to the model's
dtype: the product accumulates in float32 from half-precision operands and is rounded once,
as PyTorch's half-precision convolutions and GEMMs accumulate; the cast ends the
convolution's own kernel after fusion (no extra pass over the map). Other dtypes: TVM's
converter as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tvm import relax

_HALF = ("float16", "bfloat16")


def _in_float32(method: str, bias_at: int) -> Callable[[Any, Any], Any]:
    def convert(node: Any, importer: Any) -> Any:
        val = node.meta.get("val")
        dtype = str(getattr(val, "dtype", "")).removeprefix("torch.")
        own = getattr(importer, method)
        if dtype not in _HALF:
            return own(node)
        bb = importer.block_builder
        bias = node.args[bias_at] if len(node.args) > bias_at else None
        saved = importer.env.get(bias) if bias is not None and bias in importer.env else None
        if saved is not None and str(getattr(saved.ty, "dtype", "")) in _HALF:
            importer.env[bias] = bb.emit(relax.op.astype(saved, "float32"))
        try:
            out = own(node)
        finally:
            if saved is not None:
                importer.env[bias] = saved
        if str(out.ty.dtype) == dtype:
            return out
        return bb.emit(relax.op.astype(out, dtype))
    return convert


def precision_converters() -> dict[str, Callable[[Any, Any], Any]]:
    """The converters, keyed as the importer looks them up (``node.target.__name__``)."""
    return {
        "convolution.default": _in_float32("_convolution", 2),
        "conv1d.default": _in_float32("_conv1d", 2),
        "conv2d.default": _in_float32("_conv2d", 2),
        "conv3d.default": _in_float32("_conv3d", 2),
        "conv_transpose1d.default": _in_float32("_conv_transpose1d", 2),
        "conv_transpose2d.input": _in_float32("_conv_transpose2d", 2),
        "addmm.default": _in_float32("_addmm", 0),
    }


__all__ = ["precision_converters"]
