"""Converters for quantization: quantize/dequantize (``torch.ops.quantized_decomposed.*``,
what PT2E quantization and QDQ models export) become Relax's own ``R.quantize`` /
``R.dequantize``, so the IR holds real int8 tensors and ConvertLayout sees the convolutions
between them; dynamic quantization's ``choose_qparams`` computes the scale and zero point at
run time as PyTorch does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tvm import relax

from cl_validate.compile.converter_support import dtype_name

_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767),
           "int32": (-2**31, 2**31 - 1)}


def _qparam(value: Any, dtype: str) -> Any:
    """A scale or zero point: a Python number becomes a constant, an expression stays."""
    if isinstance(value, (int, float)):
        return relax.const(value, dtype)
    have = getattr(getattr(value, "ty", None), "dtype", None)
    if have is not None and str(have) not in (dtype, "float32") and str(have).startswith("int"):
        # torch keeps per-channel zero points as int64, which R.quantize refuses
        return relax.op.astype(value, "int32")
    return value


def _quantize(node: Any, importer: Any, per_channel: bool) -> Any:
    args = importer.retrieve_args(node)
    if per_channel:
        x, scale, zp, axis, qmin, qmax, dtype = args[:7]
    else:
        x, scale, zp, qmin, qmax, dtype = args[:6]
        axis = -1
    out_dtype = dtype_name(dtype)
    bb = importer.block_builder
    q = bb.emit(relax.op.quantize(x, _qparam(scale, "float32"), _qparam(zp, out_dtype),
                                  axis=int(axis), out_dtype=out_dtype))
    if (int(qmin), int(qmax)) != _RANGES.get(out_dtype):  # a narrower range than the dtype's
        q = bb.emit(relax.op.clip(q, int(qmin), int(qmax)))
    return q


def _dequantize(node: Any, importer: Any, per_channel: bool) -> Any:
    args = importer.retrieve_args(node)
    if per_channel:
        x, scale, zp, axis = args[:4]
        in_dtype = dtype_name(args[6]) if len(args) > 6 else "int8"
    else:
        x, scale, zp = args[:3]
        axis = -1
        in_dtype = dtype_name(args[5]) if len(args) > 5 else "int8"
    out_dtype = dtype_name(node.kwargs.get("out_dtype") or "float32")
    return importer.block_builder.emit(relax.op.dequantize(
        x, _qparam(scale, "float32"), _qparam(zp, in_dtype), axis=int(axis),
        out_dtype=out_dtype))


def _choose_qparams(node: Any, importer: Any) -> Any:
    """``choose_qparams.tensor(x, qmin, qmax, eps, dtype)``: dynamic quantization's per-tensor
    affine scale and zero point of `x`, computed at run time as PyTorch does
    (``determine_qparams``): the range widened to hold 0, ``scale = max((hi - lo) / (qmax -
    qmin), eps)``, ``zero_point = clamp(qmin - round(lo / scale), qmin, qmax)``, each of shape
    (1,), the scale in float32."""
    args = importer.retrieve_args(node)
    x, qmin, qmax, eps = args[0], int(args[1]), int(args[2]), float(args[3])
    bb = importer.block_builder
    f32 = "float32"
    zero = relax.const(0.0, f32)
    lo = bb.emit(relax.op.minimum(relax.op.min(x), zero))
    hi = bb.emit(relax.op.maximum(relax.op.max(x), zero))
    scale = bb.emit(relax.op.maximum(
        relax.op.divide(relax.op.subtract(hi, lo), relax.const(float(qmax - qmin), f32)),
        relax.const(eps, f32)))
    # round half to even, as torch.round: TVM's round goes half away from zero
    ratio = bb.emit(relax.op.divide(lo, scale))
    nearest = bb.emit(relax.op.round(ratio))
    tie = bb.emit(relax.op.equal(relax.op.abs(relax.op.subtract(ratio, relax.op.trunc(ratio))),
                                 relax.const(0.5, f32)))
    odd = bb.emit(relax.op.not_equal(relax.op.floor_mod(nearest, relax.const(2.0, f32)),
                                     zero))
    even = bb.emit(relax.op.where(relax.op.logical_and(tie, odd), relax.op.subtract(
        nearest, relax.op.sign(ratio)), nearest))
    zp = bb.emit(relax.op.clip(relax.op.subtract(relax.const(float(qmin), f32), even),
                               qmin, qmax))
    return bb.emit(relax.Tuple([relax.op.reshape(scale, [1]),
                                relax.op.reshape(relax.op.astype(zp, "int32"), [1])]))


def quant_converters() -> dict[str, Callable[[Any, Any], Any]]:
    """The quantization converters, keyed as the importer looks them up."""
    return {
        "quantize_per_tensor.default": lambda n, imp: _quantize(n, imp, False),
        "dequantize_per_tensor.default": lambda n, imp: _dequantize(n, imp, False),
        "quantize_per_channel.default": lambda n, imp: _quantize(n, imp, True),
        "dequantize_per_channel.default": lambda n, imp: _dequantize(n, imp, True),
        # dynamic quantization: the scale and zero point are tensors computed at run time
        "choose_qparams.tensor": _choose_qparams,
        "quantize_per_tensor.tensor": lambda n, imp: _quantize(n, imp, False),
        "dequantize_per_tensor.tensor": lambda n, imp: _dequantize(n, imp, False),
    }


__all__ = ["quant_converters"]
