"""Pools TVM 0.27's torch importer gets wrong or lacks: ``max_pool{1,2,3}d_with_indices``
(a max pool and where each maximum came from), ``adaptive_max_pool2d`` and ``avg_pool2d``
with a ``divisor_override``.

TVM 0.27's torch importer computes the pooled values but gives **zeros** as the indices: a
model that reads them (SegNet's and ENet's ``max_unpool2d`` scatters its values to them; a
model may return them) gets a wrong program, or fails the import where the zeros' float dtype
meets an integer index (torch's own ``max_unpool2d`` decomposition, an ``index_put``).

The values stay the importer's own max pool (its layout rule, its schedules). The indices are
computed beside them, exactly as PyTorch defines them: for each output position, the flat
index (row-major over the spatial axes of one plane) of the first maximum of its window in
the kernel's row-major order. The input is padded with the lowest value (``-inf``; right
padding as far as ``ceil_mode``'s last windows reach), each of the ``K`` kernel offsets is one
strided slice (a ``(K, ..., *out)`` stack), and ``argmax`` over the offsets picks the first
maximum; the index is the window origin's flat position (a constant) plus the chosen
offset's (elementwise integer arithmetic, so that the layout passes carry it like the
data). Nothing is computed when the indices are not read (dead code).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from typing import Any

import numpy as np
from tvm import relax, tirx

from cl_validate.compile.converter_support import default_converter, in_float32
from cl_validate.compile.sdpa_converter import static_dims
from cl_validate.ir import is_float


def _per_axis(value: Any, rank: int, default: int) -> list[int]:
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return [default] * rank
    if isinstance(value, (list, tuple)):
        values = [int(v) for v in value]
        return values * rank if len(values) == 1 else values
    return [int(value)] * rank


def _lowest(dtype: str) -> float:
    if is_float(dtype):
        return float("-inf")
    return float(np.iinfo(np.dtype(dtype)).min)


def _indices(bb: Any, x: Any, out: list[int], kernel: list[int], stride: list[int],
             padding: list[int], dilation: list[int]) -> Any:
    """The flat index of each window's first maximum (see the module's docstring)."""
    rank = len(kernel)
    lead = len(x.ty.shape) - rank  # the batch and channels may be symbolic
    size = [int(d) for d in list(x.ty.shape)[lead:]]
    reach = [(o - 1) * s + d * (k - 1) + 1
             for o, s, d, k in zip(out, stride, dilation, kernel, strict=True)]
    widths = [0, 0] * lead
    for n, p, r in zip(size, padding, reach, strict=True):
        widths += [p, max(0, r - n - p)]
    padded = x if not any(widths) else bb.emit(
        relax.op.nn.pad(x, widths, pad_value=_lowest(str(x.ty.dtype))))
    axes = list(range(lead, lead + rank))
    plane = [int(np.prod(size[i + 1:], dtype=np.int64)) for i in range(rank)]
    slices = []
    for offset in itertools.product(*(range(k) for k in kernel)):
        begin = [j * d for j, d in zip(offset, dilation, strict=True)]
        end = [b + (o - 1) * s + 1 for b, o, s in zip(begin, out, stride, strict=True)]
        window = bb.emit(relax.op.strided_slice(padded, axes, begin, end, stride))
        slices.append(bb.emit(relax.op.expand_dims(window, [0])))
    stack = slices[0] if len(slices) == 1 else bb.emit(relax.op.concat(slices, axis=0))
    # the argmax in float32 (exact): TVM 0.27's argmax of bfloat16 fails the build in FuseTIR
    chosen = bb.emit(relax.op.argmax(in_float32(bb, stack), axis=0))  # offset, row-major
    # its flat position in the plane, elementwise (a layout pass carries it like the data)
    position = None
    inner = 1
    for k, d, q in reversed(list(zip(kernel, dilation, plane, strict=True))):
        along = chosen if inner == 1 else bb.emit(
            relax.op.floor_divide(chosen, relax.const(inner, "int64")))
        if inner * k < int(np.prod(kernel)):
            along = bb.emit(relax.op.floor_mod(along, relax.const(k, "int64")))
        term = bb.emit(relax.op.multiply(along, relax.const(d * q, "int64")))
        position = term if position is None else bb.emit(relax.op.add(position, term))
        inner *= k
    grids = np.meshgrid(*(np.arange(o, dtype=np.int64) * s - p
                          for o, s, p in zip(out, stride, padding, strict=True)), indexing="ij")
    origin = sum(g * q for g, q in zip(grids, plane, strict=True))
    return bb.emit(relax.op.add(position, relax.const(np.asarray(origin, dtype="int64"),
                                                      "int64")))


def _with_indices(rank: int) -> Callable[[Any, Any], Any]:
    def convert(node: Any, importer: Any) -> Any:
        bb = importer.block_builder
        args = importer.retrieve_args(node)
        x = args[0]
        kernel = _per_axis(args[1], rank, 1)
        stride = _per_axis(args[2] if len(args) > 2 else None, rank, 0)
        stride = kernel if not any(stride) else stride
        padding = _per_axis(args[3] if len(args) > 3 else 0, rank, 0)
        dilation = _per_axis(args[4] if len(args) > 4 else 1, rank, 1)
        ceil_mode = bool(args[5]) if len(args) > 5 else False
        if not all(isinstance(d, tirx.IntImm) for d in list(x.ty.shape)[-rank:]):
            # a plane of symbolic size has no constant positions: TVM's own converter, whose
            # indices are zeros (every max pool exports with indices; most never read them)
            return getattr(importer, f"_max_pool{rank}d_with_indices")(node)
        pool = getattr(importer, f"_max_pool{rank}d_impl")
        values = pool(x, kernel, stride, padding, dilation, ceil_mode)
        if not isinstance(values, relax.Var):  # the 1-D pool's squeeze is left unbound
            values = bb.emit(values)
        out = [int(d) for d in list(values.ty.shape)[-rank:]]
        indices = _indices(bb, x, out, kernel, stride, padding, dilation)
        return bb.emit(relax.Tuple([values, indices]))

    return convert


def _adaptive_max_pool2d(node: Any, importer: Any) -> Any:
    """``F.adaptive_max_pool2d`` / ``nn.AdaptiveMaxPool2d`` (CBAM's and BAM's channel
    attention, PSP-style pyramids): no converter in TVM 0.27. A max pool when the output
    size divides the input's, else PyTorch's windows (``floor(i·H/oh)`` to
    ``ceil((i+1)·H/oh)``) each reduced and concatenated. Indices, where read, for a global
    pool only (the position in the flattened plane, as PyTorch's)."""
    args = importer.retrieve_args(node)
    x, size = args[0], args[1]
    dims = static_dims(x)
    if dims is None or len(dims) not in (3, 4):
        raise ValueError("adaptive_max_pool2d needs an input of known shape, (N,) C, H, W")
    h, w = dims[-2:]
    oh, ow = (h if s is None else int(s) for s in size) if len(size) == 2 else (
        int(size[0]), int(size[0]))
    bb = importer.block_builder
    data = x if len(dims) == 4 else bb.emit(relax.op.expand_dims(x, 0))
    if h % oh == 0 and w % ow == 0:
        values = bb.emit(relax.op.nn.max_pool2d(data, (h // oh, w // ow), (h // oh, w // ow)))
    else:
        rows = []
        for i in range(oh):
            cells = [bb.emit(relax.op.max(bb.emit(relax.op.strided_slice(
                data, [2, 3], [i * h // oh, j * w // ow],
                [-(-(i + 1) * h // oh), -(-(j + 1) * w // ow)])), axis=[2, 3], keepdims=True))
                for j in range(ow)]
            rows.append(bb.emit(relax.op.concat(cells, axis=3)) if ow > 1 else cells[0])
        values = bb.emit(relax.op.concat(rows, axis=2)) if oh > 1 else rows[0]
    if len(dims) == 3:
        values = bb.emit(relax.op.squeeze(values, [0]))
    if all(u.target is operator.getitem and u.args[1] == 0 for u in node.users):
        return bb.emit(relax.Tuple([values]))
    if (oh, ow) != (1, 1):
        raise ValueError("adaptive_max_pool2d's indices are supported for a global pool "
                         "(output size 1) only")
    flat = bb.emit(relax.op.reshape(x, [*dims[:-2], h * w]))
    indices = bb.emit(relax.op.reshape(relax.op.argmax(in_float32(bb, flat), axis=-1,
                                                       keepdims=True),
                                       [*dims[:-2], 1, 1]))
    return bb.emit(relax.Tuple([values, indices]))


def _window_counts(size: int, out: int, kernel: int, stride: int, padding: int) -> Any:
    """How many input elements (no padding) each window along one axis covers, PyTorch's
    windows: start ``o·stride - padding``, end ``min(start + kernel, size + padding)``."""
    start = np.arange(out) * stride - padding
    end = np.minimum(start + kernel, size + padding)
    return np.minimum(end, size) - np.maximum(start, 0)


def _avg_pool2d(node: Any, importer: Any) -> Any:
    """``avg_pool2d(..., divisor_override=d)``: TVM 0.27's converter drops the divisor (each
    window's sum divided by its size instead of by ``d``, a wrong program). With one, the
    average over the real elements times their count (a constant per position) is the
    window's sum, divided by ``d``; without, TVM's converter."""
    args = list(node.args) + [None] * (7 - len(node.args))
    divisor = args[6] if args[6] is not None else node.kwargs.get("divisor_override")
    if divisor is None:
        return default_converter(importer, "avg_pool2d.default")(node)
    bb = importer.block_builder
    x = importer.env[args[0]]
    kernel = _per_axis(args[1], 2, 1)
    stride = _per_axis(args[2], 2, 0)
    stride = kernel if not any(stride) else stride
    padding = _per_axis(args[3] if args[3] is not None else 0, 2, 0)
    ceil_mode = bool(args[4]) if args[4] is not None else False
    mean = importer._avg_pool2d_impl(x, kernel, stride, padding, ceil_mode, False)
    if not isinstance(mean, relax.Var):
        mean = bb.emit(mean)
    shape = list(mean.ty.shape)
    if not all(isinstance(d, tirx.IntImm) for d in shape[-2:] + list(x.ty.shape)[-2:]):
        raise NotImplementedError("avg_pool2d's divisor_override on a map of symbolic size")
    size = [int(d) for d in list(x.ty.shape)[-2:]]
    out = [int(d) for d in shape[-2:]]
    counts = [_window_counts(n, o, k, s, p) for n, o, k, s, p
              in zip(size, out, kernel, stride, padding, strict=True)]
    scale = np.outer(counts[0], counts[1]) / float(divisor)
    dtype = str(x.ty.dtype)
    return bb.emit(relax.op.multiply(mean, relax.const(scale.astype(dtype), dtype)))


def pool_converters() -> dict[str, Callable[[Any, Any], Any]]:
    """The converters, keyed as the importer looks them up (``node.target.__name__``)."""
    return {**{f"max_pool{rank}d_with_indices.default": _with_indices(rank)
               for rank in (1, 2, 3)},
            "adaptive_max_pool2d.default": _adaptive_max_pool2d,
            "avg_pool2d.default": _avg_pool2d}


__all__ = ["pool_converters"]
