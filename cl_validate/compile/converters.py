"""Converters for PyTorch ops the TVM 0.27 torch frontend lacks or gets wrong, via
``custom_convert_map`` (quantization's in `cl_validate.compile.quant_converters`, other
families in the ``*_converters`` modules next to this one).

Division with a rounding mode (``torch.floor_divide``, ``torch.div(..., rounding_mode=...)``,
``//`` on tensors: all export as ``aten.div.Tensor_mode``) by a Python number: TVM's converter
makes the number an ``int32`` constant whatever the tensor's dtype, and the import of a float
tensor ``// 2`` (positional-encoding helpers) dies with "Binary operators must have the same
datatype". Here the number takes the tensor's dtype, as PyTorch's type promotion has it (an
integer tensor divided by a float becomes float32).

``adaptive_max_pool2d`` (CBAM's channel attention) has no converter in TVM 0.27: a max pool
where the output size divides the input's, else PyTorch's overlapping windows.

``amax`` / ``amin`` (``x.amax(dim=1, keepdim=True)``: CBAM's spatial attention, channel
max-pooling) have no converter in TVM 0.27; they are Relax's ``max`` / ``min``. ``x.max(dim)``
(Hiera's query pooling, ``.max(dim=3).values``) is a sort in TVM's converter (``topk``, k = 1)
and ``x.min(dim)`` has none; both are the reduction and its ``argmax`` / ``argmin``.

``add`` / ``sub`` / ``mul`` of an integer tensor and a Python float (``torch.arange(h) + 0.5``:
YOLO anchor grids): TVM's converter makes the float a constant of the tensor's dtype, so
``+ 0.5`` adds ``0``. PyTorch computes in float32; so does the import here.

Advanced indexing with several index tensors next to each other after sliced axes
(``x[:, :, ih[:, None], iw[None, :]]``: unfold-style patch gathers) is refused by TVM's
converter ("cannot broadcast index shapes"). It is exactly a ``take`` along the indexed axes
flattened into one: the index tensors combine into one flat index (constants fold it away),
the data is viewed with those axes merged (a free reshape), and the result viewed back to
``pre + broadcast(index shapes) + post`` — no transpose, so the layout passes can carry it.
Index tensors on axes apart (``x[i, :, j]``) put the broadcast shape first, as PyTorch does
(TVM's converter put it in the wrong place).

Negative indices count from the end in PyTorch (``x[:, -1]``: the last time step, the last
token; an index tensor holding ``-1``; ``torch.take``). TVM's converters hand them to
``take`` in its fast mode, which reads out of bounds: a wrong program, not an error. Here
every index is counted from the end where it is negative (a constant folds; a dynamic length
is read at run time). Indexed writes likewise: ``x[:, idx] = v`` (``index_put`` with sliced
axes) did not import at all, and ``x[x > 0] = 0`` (a mask and one value) is a ``where``.

``var_mean`` (BiT's weight standardization) has no converter in TVM 0.27: Relax's
``variance`` and ``mean``, the variance scaled by N / (N − correction).

``clamp`` of an integer tensor with one bound (``rel_pos.clamp(max=k)``: SAM's decomposed
relative positions) is ``R.clip(x, -inf, k)`` in TVM's converter, whose legalization then fails
("Cannot convert infinity to BigInt"); here it is the bounds it has, as integer
``maximum`` / ``minimum`` (docs/upstream/int-clamp.md is the upstream report).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

from tvm import relax, tirx

from cl_validate.compile.activation_converters import activation_converters
from cl_validate.compile.converter_support import HALF, dtype_name, in_float32
from cl_validate.compile.math_converters import math_converters
from cl_validate.compile.norm_converters import norm_converters
from cl_validate.compile.pool_converters import pool_converters
from cl_validate.compile.precision_converters import (
    accumulate_in_float32,
    precision_converters,
)
from cl_validate.compile.quant_converters import quant_converters
from cl_validate.compile.reduction_converters import reduction_converters
from cl_validate.compile.resample_converters import resample_converters
from cl_validate.compile.sdpa_converter import convert_sdpa, static_dims
from cl_validate.compile.window_converters import window_converters
from cl_validate.ir import is_float


def _scalar_operands(lhs: Any, rhs: Any) -> tuple[Any, Any]:
    """A Python number next to a tensor becomes a constant of the dtype PyTorch computes in."""
    if isinstance(lhs, relax.Expr) and isinstance(rhs, relax.Expr):
        return lhs, rhs
    tensor, number, number_first = (rhs, lhs, True) if isinstance(rhs, relax.Expr) else (
        lhs, rhs, False)
    dtype = str(tensor.ty.dtype)
    if isinstance(number, float) and not is_float(dtype):
        tensor, dtype = relax.op.astype(tensor, "float32"), "float32"
    const = relax.const(number, dtype)
    return (const, tensor) if number_first else (tensor, const)


def _divide_rounded(node: Any, importer: Any) -> Any:
    args = importer.retrieve_args(node)
    mode = args[2] if len(args) > 2 else node.kwargs.get("rounding_mode")
    lhs, rhs = _scalar_operands(args[0], args[1])
    bb = importer.block_builder
    if mode is None:
        return bb.emit(relax.op.divide(lhs, rhs))
    if mode == "floor":
        return bb.emit(relax.op.floor_divide(lhs, rhs))
    if mode == "trunc":
        return bb.emit(relax.op.trunc(bb.emit(relax.op.divide(lhs, rhs))))
    raise ValueError(f"unsupported rounding_mode {mode!r}")


def _reduce_extreme(node: Any, importer: Any, op: Callable[..., Any]) -> Any:
    args = importer.retrieve_args(node)
    dims = args[1] if len(args) > 1 else node.kwargs.get("dim", ())
    keep = args[2] if len(args) > 2 else node.kwargs.get("keepdim", False)
    axis = [dims] if isinstance(dims, int) else (list(dims) or None)  # () means every axis
    return importer.block_builder.emit(op(args[0], axis=axis, keepdims=bool(keep)))


def _extreme_with_index(op: Callable[..., Any], arg: Callable[..., Any]
                        ) -> Callable[[Any, Any], Any]:
    """``x.max(dim)`` / ``x.min(dim)``: (values, indices) as a reduction and an arg-reduction.
    TVM's converter sorts for them (``topk`` with k = 1) and has none for ``min``."""

    def convert(node: Any, importer: Any) -> Any:
        bb = importer.block_builder
        values = _reduce_extreme(node, importer, op)
        # ``.values`` alone (the usual case): no indices, which would hold the input's layout
        if all(u.target is operator.getitem and u.args[1] == 0 for u in node.users):
            return bb.emit(relax.Tuple([values]))
        args = importer.retrieve_args(node)
        dim = int(args[1] if len(args) > 1 else node.kwargs["dim"])
        keep = bool(args[2] if len(args) > 2 else node.kwargs.get("keepdim", False))
        indices = bb.emit(arg(args[0], axis=dim, keepdims=keep))
        return bb.emit(relax.Tuple([values, indices]))

    return convert


def _cumulative(op: Callable[..., Any]) -> Callable[[Any, Any], Any]:
    """``cumsum`` / ``cumprod`` in the dtype PyTorch gives (int64 for booleans and integers,
    unless asked otherwise): TVM's importer kept the input's, so a mask's running count
    came out boolean."""

    def convert(node: Any, importer: Any) -> Any:
        args = importer.retrieve_args(node)
        dim = args[1] if len(args) > 1 else node.kwargs["dim"]
        out = dtype_name(node.meta["val"].dtype)
        return importer.block_builder.emit(op(args[0], axis=int(dim), dtype=out))

    return convert


def _binary_promoting(relax_op: Callable[..., Any], intrinsic: Callable[..., Any]
                      ) -> Callable[[Any, Any], Any]:
    def convert(node: Any, importer: Any) -> Any:
        args = importer.retrieve_args(node)
        if len(args) == 2 and not node.kwargs and any(
                isinstance(a, float) and not isinstance(b, (int, float))
                for a, b in (args, args[::-1])):
            lhs, rhs = _scalar_operands(args[0], args[1])
            return importer.block_builder.emit(relax_op(lhs, rhs))
        return importer._binary_op(relax_op, intrinsic)(node)  # the importer's own

    return convert


def _from_end(bb: Any, idx: Any, n: Any) -> Any:
    """Index values as int64 with PyTorch's negative indices (``-1`` is the last of `n`, a
    number or a symbolic length) counted from the end: TVM's ``take`` reads a negative index
    out of bounds."""
    idx = bb.emit(relax.op.astype(idx, "int64"))
    return bb.emit(relax.op.where(relax.op.less(idx, relax.const(0, "int64")),
                                  relax.op.add(idx, _int64(bb, n)), idx))


def _int64(bb: Any, n: Any) -> Any:
    """`n`, a number or a symbolic length, as an int64 scalar."""
    if isinstance(n, int):
        return relax.const(n, "int64")
    return bb.emit(relax.op.reshape(relax.op.shape_to_tensor(relax.ShapeExpr([n])), []))


def _integer_indices(indices: list[Any], used: list[int]) -> bool:
    """Every index in `used` an integer tensor of known shape (no mask)."""
    return all(static_dims(indices[k]) is not None
               and str(indices[k].ty.dtype).startswith(("int", "uint")) for k in used)


def _adjacent(used: list[int]) -> bool:
    return used == list(range(used[0], used[-1] + 1))


def _index_tensors(node: Any, importer: Any) -> Any:
    """``x[..., i0, i1, ...]``: a take along the indexed axes merged into one, with negative
    indices counted from the end. Index tensors on axes apart (``x[i, :, j]``) put their
    broadcast shape first, as PyTorch does: the indexed axes are moved to the front."""
    args = importer.retrieve_args(node)
    data, indices = args[0], list(args[1])
    used = [k for k, idx in enumerate(indices) if idx is not None]
    shape = getattr(data.ty, "shape", None)
    if not used or not isinstance(shape, relax.ShapeExpr) or not _integer_indices(indices,
                                                                                  used):
        return importer._index_tensor(node)  # masks, unknown ranks: TVM's own
    dims = [int(d) if isinstance(d, tirx.IntImm) else d for d in shape.values]
    bb = importer.block_builder
    taken = [indices[k] for k in used]
    if not _adjacent(used):  # apart: indexed axes first
        rest = [k for k in range(len(dims)) if k not in used]
        data = bb.emit(relax.op.permute_dims(data, [*used, *rest]))
        dims = [dims[k] for k in used] + [dims[k] for k in rest]
        used = list(range(len(used)))
    first, last = used[0], used[-1]
    flat: Any = None
    stride: Any = 1
    for k, index in reversed(list(zip(used, taken, strict=True))):
        idx = _from_end(bb, index, dims[k])
        term = idx if isinstance(stride, int) and stride == 1 else bb.emit(
            relax.op.multiply(idx, _int64(bb, stride)))
        flat = term if flat is None else bb.emit(relax.op.add(flat, term))
        stride = stride * dims[k]
    out_index = [int(d) for d in static_dims(flat) or []]
    merged = [*dims[:first], stride, *dims[last + 1:]]
    view = bb.emit(relax.op.reshape(data, merged)) if len(used) > 1 else data
    picked = bb.emit(relax.op.take(view, bb.emit(relax.op.reshape(flat, [-1])), axis=first))
    return bb.emit(relax.op.reshape(picked, [*dims[:first], *out_index, *dims[last + 1:]]))


def _index_put(node: Any, importer: Any) -> Any:
    """``x[:, idx] = v`` (``index_put`` with sliced axes, ``None`` in its indices): TVM's
    converter takes one index per axis and refuses fewer ("IndexPut requires the number of
    index tensors to match"), and passes negative indices through. Here every axis gets an
    index: an ``arange`` where the axis is sliced, each placed where PyTorch puts that axis in
    the indexed result (the index tensors' broadcast shape where they stand, adjacent), the
    negative indices counted from the end, the values broadcast to that result. ``x[mask] =
    v`` with one value is a select (``where``). Index tensors on axes apart, masked writes of
    many values and dynamic shapes: TVM's own."""
    args = importer.retrieve_args(node)
    data, indices, values = args[0], list(args[1]), args[2]
    accumulate = bool(args[3]) if len(args) > 3 else bool(node.kwargs.get("accumulate", False))
    dims = static_dims(data)
    used = [k for k, idx in enumerate(indices) if idx is not None]
    bb = importer.block_builder
    if dims is not None and used == [0] and str(indices[0].ty.dtype) == "bool" and (
            static_dims(values) is not None and math.prod(static_dims(values) or []) == 1):
        # ``x[mask] = v`` with a mask over the leading axes and one value: a select
        mask = indices[0]
        extra = len(dims) - len(static_dims(mask) or [])
        if extra:
            mask = bb.emit(relax.op.reshape(mask, [*(static_dims(mask) or []), *[1] * extra]))
        value = bb.emit(relax.op.reshape(relax.op.astype(values, str(data.ty.dtype)), []))
        if accumulate:
            return bb.emit(relax.op.add(data, relax.op.where(mask, value, relax.const(
                0, str(data.ty.dtype)))))
        return bb.emit(relax.op.where(mask, value, data))
    if dims is None or not used or not _adjacent(used) or not _integer_indices(indices, used):
        return importer._index_put(node)
    indices += [None] * (len(dims) - len(indices))
    first, last = used[0], used[-1]
    rank = max(len(static_dims(indices[k]) or []) for k in used)
    # the indexed result: the sliced axes before, the broadcast index shape, those after
    full = []
    for k in range(len(dims)):
        shape = [1] * (len(dims) - len(used) + rank)
        if k in used:
            sh = static_dims(indices[k]) or []
            shape[first + rank - len(sh):first + rank] = sh
            full.append(bb.emit(relax.op.reshape(_from_end(bb, indices[k], dims[k]), shape)))
        else:
            shape[k if k < first else k - last - 1 + first + rank] = dims[k]
            full.append(bb.emit(relax.op.reshape(
                relax.op.arange(0, dims[k], 1, "int64"), shape)))
    broadcast = [max(d) for d in zip(*[static_dims(f) or [] for f in full], strict=True)]
    values = bb.emit(relax.op.broadcast_to(values, broadcast))
    return bb.emit(relax.op.index_put(data, relax.Tuple(full), values, accumulate))


def _select(node: Any, importer: Any) -> Any:
    """``x[:, -1]`` (``select.int``): the index counted from the end where it is negative;
    TVM's converter passes ``-1`` to ``take``, which reads out of bounds."""
    x = importer.env[node.args[0]]
    dims = static_dims(x) or []
    axis = node.args[1] % len(dims) if dims else node.args[1]
    index = int(node.args[2])
    bb = importer.block_builder
    if index >= 0 or not dims:
        mode = "fast" if index >= 0 else "wrap"  # a dynamic axis: the modulo at run time
        return bb.emit(relax.op.take(x, relax.const(index, "int64"), axis, mode=mode))
    return bb.emit(relax.op.take(x, relax.const(index + dims[axis], "int64"), axis))


def _full(node: Any, importer: Any) -> Any:
    """``torch.full(size, v)`` with ``v`` infinite or NaN (a causal mask's ``-inf``, GPT-2's
    masked value): TVM 0.27 legalizes ``R.full`` through ``topi.full``, which tests its dtype
    as a string and fails on the Relax dtype ("argument of type 'PrimType' is not iterable";
    docs/upstream/full-infinite.md). Here the same tensor, the constant broadcast to the
    size. A finite value, or one computed at run time, is TVM's."""
    args = importer.retrieve_args(node)
    value = args[1] if len(args) > 1 else node.kwargs.get("fill_value")
    if not isinstance(value, float) or math.isfinite(value):
        return importer._full(node)
    import torch  # lazy: converters load with TVM, torch only when a model is imported

    dtype = importer._convert_data_type(node.kwargs.get("dtype", torch.get_default_dtype()),
                                        importer.env)
    size = args[0] if isinstance(args[0], list | tuple) else (args[0],)
    return importer.block_builder.emit(relax.op.broadcast_to(relax.const(value, dtype),
                                                             relax.ShapeExpr(size)))


def _full_like(node: Any, importer: Any) -> Any:
    """``torch.full_like(x, v)`` with ``v`` infinite or NaN: as `_full`, the constant added to
    zeros of ``x``'s shape (``0 + v`` is ``v`` for every such ``v``)."""
    x, value = importer.env[node.args[0]], node.args[1]
    if not isinstance(value, float) or math.isfinite(value):
        return importer._full_like(node)
    dtype = node.kwargs.get("dtype")
    dtype = str(x.ty.dtype) if dtype is None else \
        importer._convert_data_type(dtype, importer.env)
    bb = importer.block_builder
    return bb.emit(relax.op.add(bb.emit(relax.op.zeros_like(x, dtype)),
                                relax.const(value, dtype)))


def _clamp(node: Any, importer: Any) -> Any:
    """``x.clamp(min, max)`` on an integer tensor with one bound missing: TVM's converter puts
    ``-inf`` / ``inf`` in ``R.clip`` and the legalization then fails ("Cannot convert
    infinity to BigInt"; docs/upstream/int-clamp.md). Here an integer clamp is the bounds it
    has, as ``maximum`` / ``minimum`` with constants of its dtype; so is a clamp whose min
    exceeds its max (PyTorch: ``min(max(x, lo), hi)``, all ``hi``; ``R.clip`` gives ``lo``).
    A float one, or one with a tensor bound, is TVM's."""
    args = list(importer.retrieve_args(node))
    x = args[0]
    lo = args[1] if len(args) > 1 else node.kwargs.get("min")
    hi = args[2] if len(args) > 2 else node.kwargs.get("max")
    dtype = str(getattr(x.ty, "dtype", ""))
    integer = dtype.startswith(("int", "uint"))
    bounds = [b for b in (lo, hi) if b is not None]
    numbers = all(isinstance(b, int | float) for b in bounds)
    crossed = numbers and len(bounds) == 2 and lo > hi
    if not numbers or not (integer or crossed):
        return importer._clamp(node)
    bb = importer.block_builder
    out = x
    if lo is not None:
        out = bb.emit(relax.op.maximum(out, relax.const(math.ceil(lo) if integer else lo,
                                                        dtype)))
    if hi is not None:
        out = bb.emit(relax.op.minimum(out, relax.const(math.floor(hi) if integer else hi,
                                                        dtype)))
    return out


def _grid_sample(node: Any, importer: Any) -> Any:
    """``F.grid_sample(data, grid)``: Relax's ``image.grid_sample`` takes the grid as
    ``(N, 2, H_out, W_out)`` (its shape inference and TOPI's kernel both read it so), PyTorch
    gives ``(N, H_out, W_out, 2)``. TVM 0.27's converter passes PyTorch's grid as it is, and
    the output's shape comes out wrong (RT-DETR's deformable attention then fails to import
    with a reshape error far from the cause). The grid's coordinate axis moves first here,
    a permute marked as the importer's. A half-precision sample is computed in float32 and
    rounded once: TVM 0.27 lowers ``image.grid_sample`` of float16 to a PrimFunc with a
    float32 result while the op's type says float16, and the build then fails at the next
    binary op (docs/upstream/grid-sample-half.md)."""
    args = importer.retrieve_args(node)
    data, grid = args[0], args[1]
    interp = {0: "bilinear", 1: "nearest", 2: "bicubic"}.get(int(args[2]) if len(args) > 2
                                                             else 0, "bilinear")
    padding = {0: "zeros", 1: "border", 2: "reflection"}.get(int(args[3]) if len(args) > 3
                                                             else 0, "zeros")
    align = bool(args[4]) if len(args) > 4 else False
    bb = importer.block_builder
    if len(static_dims(grid) or []) != 4:
        return importer._grid_sampler_2d(node)
    grid = bb.emit(relax.op.permute_dims(grid, [0, 3, 1, 2]))
    dtype = str(data.ty.dtype)
    # TVM lowers a half sample to a float32 result its type calls half: sampled in float32
    data, grid = in_float32(bb, data), in_float32(bb, grid)
    out = bb.emit(relax.op.image.grid_sample(data, grid, method=interp, layout="NCHW",
                                             padding_mode=padding, align_corners=align))
    return out if dtype not in HALF else bb.emit(relax.op.astype(out, dtype))


def _var_mean(node: Any, importer: Any) -> Any:
    """``torch.var_mean`` (BiT's ``StdConv2d`` standardizing its weight in forward): the
    variance, divided by N − correction as PyTorch has it (1 unless given), and the mean."""
    bb = importer.block_builder
    args = importer.retrieve_args(node)
    x, dims = args[0], args[1] if len(args) > 1 else node.kwargs.get("dim")
    correction = node.kwargs.get("correction")
    keep = bool(node.kwargs.get("keepdim", False))
    shape = static_dims(x)
    if shape is None:
        raise ValueError("var_mean of a tensor of symbolic shape")
    axis = None if dims is None else [dims] if isinstance(dims, int) else list(dims)
    n = math.prod(shape[a] for a in (axis if axis else range(len(shape))))
    c = 1 if correction is None else float(correction)
    mean = bb.emit(relax.op.mean(x, axis, keepdims=keep))
    var = bb.emit(relax.op.variance(x, axis, keepdims=keep))
    if c:
        factor = n / (n - c) if n > c else math.inf
        var = bb.emit(relax.op.multiply(var, relax.const(factor, str(x.ty.dtype))))
    return bb.emit(relax.Tuple([var, mean]))


def custom_convert_map() -> dict[str, Callable[[Any, Any], Any]]:
    """The converters, keyed as the importer looks them up (``node.target.__name__``); a
    half-precision model's products and reductions accumulate in float32."""
    return accumulate_in_float32({
        **quant_converters(),
        "div.Tensor_mode": _divide_rounded,
        "amax.default": lambda n, imp: _reduce_extreme(n, imp, relax.op.max),
        "amin.default": lambda n, imp: _reduce_extreme(n, imp, relax.op.min),
        "max.dim": _extreme_with_index(relax.op.max, relax.op.argmax),
        "min.dim": _extreme_with_index(relax.op.min, relax.op.argmin),
        "add.Tensor": _binary_promoting(relax.op.add, operator.add),
        "sub.Tensor": _binary_promoting(relax.op.subtract, operator.sub),
        "mul.Tensor": _binary_promoting(relax.op.multiply, operator.mul),
        "index.Tensor": _index_tensors,
        "index_put.default": _index_put,
        "select.int": _select,
        "scaled_dot_product_attention.default": convert_sdpa,
        "grid_sampler_2d.default": _grid_sample,
        "clamp.default": _clamp,
        "full.default": _full,
        "full_like.default": _full_like,
        "cumsum.default": _cumulative(relax.op.cumsum),
        "var_mean.correction": _var_mean,
        "cumprod.default": _cumulative(relax.op.cumprod),
        **activation_converters(),
        **window_converters(),
        **norm_converters(),
        **reduction_converters(),
        **pool_converters(),
        **resample_converters(),
        **math_converters(),
        **precision_converters(),
    })
