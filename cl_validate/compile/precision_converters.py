"""A half-precision model (``model.half()``, ``model.to(torch.bfloat16)``), imported to
compute closer to PyTorch's half-precision kernels: convolutions and reductions accumulate
in float32, each result rounded once to the model's dtype.

TVM 0.27's importer builds every convolution (and ``addmm``'s product) with ``out_dtype =
"float32"`` whatever the model's dtype, then adds the bias as it is: a float16 or bfloat16
model fails the import ("Binary operators must have the same datatype", float32 on the
left, float16 on the right). Here the bias (``convolution``'s third argument, ``addmm``'s
first) is read in float32 for TVM's converter, and the result is cast back to the model's
dtype: the product accumulates in float32 from half-precision operands and is rounded once,
as PyTorch's half-precision convolutions and GEMMs accumulate; the cast ends the
convolution's own kernel after fusion (no extra pass over the map).

TVM builds every reduction in the operands' dtype: a float16 softmax, LayerNorm or mean,
each summed in float16, took a small transformer 11x further from float64 than PyTorch's
float16 eager (3.9x a conv net with a softmax head). The reductions, softmaxes and norms
read their half-precision operands cast to float32 and round their results: both at 1x.
TVM builds the other products (``mm``, ``bmm``, ``matmul``, ``einsum``) with a float32
result and leaves it so: everything after them computed and stored in float32 (twice the
traffic) until a convolution rounded it, and a model returning a product returned float32.
Their results are rounded to the model's dtype (the cast ends the product's kernel after
fusion); the attention raise sees through these casts. Other dtypes: the converters as
they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes  # apache-tvm's own dependency: bfloat16 for numpy
import numpy as np
from tvm import relax

from cl_validate.compile.converter_support import (
    HALF,
    default_converter,
    read_as,
    read_in_float32,
)


def _dtype_of(val: Any) -> str:
    if isinstance(val, (list, tuple)):
        val = val[0] if val else None
    return str(getattr(val, "dtype", "")).removeprefix("torch.")


def _bias_in_float32(name: str, bias_at: int) -> Callable[[Any, Any], Any]:
    def convert(node: Any, importer: Any) -> Any:
        dtype = _dtype_of(node.meta.get("val"))
        own = default_converter(importer, name)
        if dtype not in HALF:
            return own(node)
        with read_in_float32(importer, node.args[bias_at:bias_at + 1]):
            out = own(node)
        if str(out.ty.dtype) == dtype:
            return out
        return importer.block_builder.emit(relax.op.astype(out, dtype))
    return convert


def _rounded(name: str) -> Callable[[Any, Any], Any]:
    """`name`'s converter, its float32 result (TVM builds ``mm``, ``bmm``, ``matmul`` and
    ``einsum`` with ``out_dtype = "float32"`` for every input dtype) rounded to the model's
    half-precision dtype: PyTorch's product, accumulated in float32 and rounded once."""
    def convert(node: Any, importer: Any) -> Any:
        val = node.meta.get("val")
        out = default_converter(importer, name)(node)
        return _round(importer.block_builder, out, val) if _dtype_of(val) in HALF else out
    return convert


def _promoted(name: str) -> Callable[[Any, Any], Any]:
    """`name`'s converter (``cat``, ``stack``), its tensors of other dtypes than the result
    cast to it first: PyTorch promotes (a float16 map concatenated with float32 anchors is
    float32, YOLO's decode in a half model), TVM's concat refuses mixed dtypes."""
    def convert(node: Any, importer: Any) -> Any:
        dtype = _dtype_of(node.meta.get("val"))
        parts = node.args[0] if node.args and isinstance(node.args[0], (list, tuple)) else ()
        if not dtype:
            return default_converter(importer, name)(node)
        with read_as(importer, parts, dtype):
            return default_converter(importer, name)(node)
    return convert


#: Reductions, softmaxes and norms PyTorch accumulates in float32 for a half-precision input.
_ACCUMULATE = ("mean.dim", "mean.default", "sum.dim_IntList", "sum.default",
               "_softmax.default", "_log_softmax.default", "var.correction", "std.correction",
               "var_mean.correction", "native_layer_norm.default", "native_group_norm.default",
               "_native_batch_norm_legit_no_training.default", "linalg_vector_norm.default",
               "logsumexp.default", "cumsum.default", "_adaptive_avg_pool2d.default",
               "adaptive_avg_pool2d.default", "avg_pool2d.default")


def _own(name: str, inner: Callable[[Any, Any], Any] | None, node: Any, importer: Any) -> Any:
    """`name`'s converter: ours where there is one, else the importer's."""
    if inner is not None:
        return inner(node, importer)
    return default_converter(importer, name)(node)


def _round(bb: Any, out: Any, val: Any) -> Any:
    """`out` (float32 where the model has half precision) in the dtypes PyTorch gives."""
    if isinstance(out.ty, relax.TupleType):
        vals = val if isinstance(val, (list, tuple)) else [val] * len(out.ty.fields)
        fields = [_round(bb, bb.emit(relax.TupleGetItem(out, i)), v)
                  for i, v in enumerate(vals)]
        return bb.emit(relax.Tuple(fields))
    dtype = _dtype_of(val)
    if dtype in HALF and str(out.ty.dtype) != dtype:
        return bb.emit(relax.op.astype(out, dtype))
    return out


def _accumulating(name: str, inner: Callable[[Any, Any], Any] | None
                  ) -> Callable[[Any, Any], Any]:
    def convert(node: Any, importer: Any) -> Any:
        val = node.meta.get("val")
        if _dtype_of(val) not in HALF:
            return _own(name, inner, node, importer)
        with read_in_float32(importer, node.args):
            out = _own(name, inner, node, importer)
        return _round(importer.block_builder, out, val)
    return convert


#: Ops TVM 0.27 gets wrong or cannot build in a half-precision dtype, by the dtypes:
#: bfloat16 sorts compare its raw 16-bit patterns as integers (``topk``, ``sort``,
#: ``median`` of negative values: a wrong order, a wrong program); ``power`` checks
#: ``IsFloatType``, false for bfloat16 ("power only applies to float": RMSNorm's and
#: ConvNeXt's ``x.pow(2)``, ``torch.square``, ``exp2``); bfloat16 ``fmod``, ``isnan``,
#: ``isinf``, ``logcumsumexp``, ``argmax``/``argmin`` fail the build or the import; LLVM
#: has no float16 ``atan2``, ``asin``, ``acos``, ``atan``, ``sinh``, ``cosh``, ``asinh``,
#: ``acosh`` ("unknown intrinsic"). Computed in float32 and rounded once, as PyTorch's CPU
#: kernels compute them (a sort of values widened exactly; a Python number beside them
#: rounded to the model's dtype first, as PyTorch rounds it: ``fmod(x, 0.7)`` of bfloat16
#: divides by 0.69921875).
_HALF_IN_FLOAT32 = {
    **dict.fromkeys(("topk.default", "sort.default", "argsort.default", "median.dim",
                     "median.default", "kthvalue.default", "pow.Tensor_Scalar",
                     "pow.Tensor_Tensor", "pow.Scalar", "exp2.default", "fmod.Scalar",
                     "fmod.Tensor", "isnan.default", "isinf.default", "logcumsumexp.default",
                     "argmax.default", "argmin.default"), ("bfloat16",)),
    **dict.fromkeys(("atan2.default", "asin.default", "acos.default", "atan.default",
                     "sinh.default", "cosh.default", "asinh.default", "acosh.default"),
                    ("float16",)),
}


class _NumbersRounded:
    """An FX node as a converter reads it, its float arguments rounded to `dtype`."""

    def __init__(self, node: Any, dtype: str) -> None:
        self._node = node
        narrow = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
        self.args = tuple(float(narrow(a)) if isinstance(a, float) else a for a in node.args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._node, name)


def _in_float32(name: str, inner: Callable[[Any, Any], Any] | None,
                dtypes: tuple[str, ...]) -> Callable[[Any, Any], Any]:
    def convert(node: Any, importer: Any) -> Any:
        args = [a for a in node.args if a in importer.env]
        kinds = {str(getattr(importer.env[a].ty, "dtype", "")) for a in args} & set(dtypes)
        if not kinds:
            return _own(name, inner, node, importer)
        with read_as(importer, args, "float32", dtypes):
            out = _own(name, inner, _NumbersRounded(node, kinds.pop()), importer)
        return _round(importer.block_builder, out, node.meta.get("val"))
    return convert


def accumulate_in_float32(convert_map: dict[str, Callable[[Any, Any], Any]]
                          ) -> dict[str, Callable[[Any, Any], Any]]:
    """`convert_map` with every product and reduction of a half-precision model accumulating
    in float32 (see the module's docstring), and the ops TVM cannot build in its dtype
    computed in float32; unchanged for other dtypes."""
    out = dict(convert_map)
    for name in _ACCUMULATE:
        out[name] = _accumulating(name, convert_map.get(name))
    for name, dtypes in _HALF_IN_FLOAT32.items():
        out[name] = _in_float32(name, convert_map.get(name), dtypes)
    return out


def precision_converters() -> dict[str, Callable[[Any, Any], Any]]:
    """The converters, keyed as the importer looks them up (``node.target.__name__``)."""
    return {
        "convolution.default": _bias_in_float32("convolution.default", 2),
        "conv1d.default": _bias_in_float32("conv1d.default", 2),
        "conv2d.default": _bias_in_float32("conv2d.default", 2),
        "conv3d.default": _bias_in_float32("conv3d.default", 2),
        "conv_transpose1d.default": _bias_in_float32("conv_transpose1d.default", 2),
        "conv_transpose2d.input": _bias_in_float32("conv_transpose2d.input", 2),
        "addmm.default": _bias_in_float32("addmm.default", 0),
        **{name: _rounded(name) for name in ("mm.default", "bmm.default", "matmul.default",
                                             "einsum.default")},
        "cat.default": _promoted("cat.default"),
        "stack.default": _promoted("stack.default"),
    }


__all__ = ["accumulate_in_float32", "precision_converters"]
