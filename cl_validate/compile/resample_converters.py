"""``F.interpolate``'s 2-D modes (nearest, bilinear, bicubic, antialiased), exactly as PyTorch
computes them.

TVM 0.27's torch importer maps each to ``resize2d`` with the scale ``in / out`` and, for
nearest, half-pixel centres rounded. PyTorch's nearest takes ``floor(dst · scale)``, and where
the call gave a ``scale_factor`` every mode maps coordinates with ``1 / scale_factor``, not
``in / out``; an antialiased resize widens its filter when it shrinks. So TVM's program is
wrong, with no error, for a nearest resize by any factor but a whole upscale (a mask shrunk
to a feature map's size, DETR; an FPN level resized to an odd size), for a scale factor whose
output size was rounded (1.5 on an odd side), and for antialiasing.

Where ``resize2d`` computes PyTorch's function it is kept (its layout rule, its schedules):
linear and cubic when the scale is ``in / out`` or the corners are aligned, nearest for a
whole upscale. Everywhere else the resize is written as what it is along each axis, a sparse
linear map: each output element is a weighted sum of a few input elements (1 for nearest, 2
linear, 4 cubic, more when antialiasing shrinks). The taps and weights come from PyTorch's own
kernel applied to the unit vectors of the axis (in float32, as PyTorch computes them for a
float32 model), so they are PyTorch's definition and not a re-derivation of it; the program
takes the taps (``take`` with a constant index, which a layout pass carries) and sums them
with constant weights. On llvm that is 0.5x-0.9x the time of TVM's ``resize2d`` for the
same resize (``benchmarks/resample.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tvm import relax, tirx

from cl_validate.compile.converter_support import default_converter, node_arg


def _pair(value: Any) -> list[float] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [float(v) if v is not None else 0.0 for v in value] * (2 if len(value) == 1 else 1)
    return [float(value)] * 2


def _matrix(mode: str, n_in: int, n_out: int, align: bool | None, scale: float | None) -> Any:
    """The (out, in) matrix of PyTorch's resize along one axis: its kernel applied to the
    axis' unit vectors, in float32 as PyTorch computes a float32 model's coordinates and
    weights (float64 would be more exact and further from PyTorch: 4e-5 at x1.5), the other
    axis kept at 2 (the antialiased kernel treats an axis of 1 apart)."""
    aten = torch.ops.aten
    basis = torch.eye(n_in, dtype=torch.float32).reshape(n_in, 1, n_in, 1).expand(
        n_in, 1, n_in, 2).contiguous()
    size = [n_out, 2]
    if mode == "nearest":
        out = aten.upsample_nearest2d.default(basis, size, scale, None)
    elif mode == "linear":
        out = aten.upsample_bilinear2d.default(basis, size, bool(align), scale, None)
    elif mode == "cubic":
        out = aten.upsample_bicubic2d.default(basis, size, bool(align), scale, None)
    else:  # antialiased linear
        out = aten._upsample_bilinear2d_aa.default(basis, size, bool(align), scale, None)
    return out[:, 0, :, 0].T.numpy()


def _along(bb: Any, x: Any, axis: int, matrix: Any, dtype: str) -> Any:
    """`x` resampled along `axis` by `matrix`: its nonzero taps, taken and weighted."""
    taps = max(1, int((matrix != 0).sum(axis=1).max()))
    index = np.zeros((matrix.shape[0], taps), dtype="int64")
    weight = np.zeros((matrix.shape[0], taps), dtype=matrix.dtype)
    for row, values in enumerate(matrix):
        columns = np.nonzero(values)[0]
        index[row, :len(columns)] = columns
        weight[row, :len(columns)] = values[columns]
    rank = len(x.ty.shape)
    shape = [1] * rank
    shape[axis] = matrix.shape[0]
    out = None
    for k in range(taps):
        term = bb.emit(relax.op.take(x, relax.const(index[:, k], "int64"), axis=axis))
        if not np.all(weight[:, k] == 1.0):
            w = relax.const(weight[:, k].reshape(shape).astype(dtype), dtype)
            term = bb.emit(relax.op.multiply(term, w))
        out = term if out is None else bb.emit(relax.op.add(out, term))
    return out


def _resize2d_is_exact(mode: str, sizes: list[tuple[int, int]], align: bool | None,
                       scales: list[float] | None, antialias: bool) -> bool:
    """Whether TVM's ``resize2d`` (scale in/out; nearest: half-pixel centres, rounded)
    computes what PyTorch does here."""
    if antialias:
        return False
    for i, (n_in, n_out) in enumerate(sizes):
        scale = scales[i] if scales is not None and scales[i] > 0 else None
        same_scale = scale is None or np.float32(1.0 / scale) == np.float32(n_in / n_out)
        if mode == "nearest":
            if n_out % n_in or not same_scale:
                return False
        elif align:
            if n_out == 1:
                return False
        elif not same_scale:
            return False
    return True


def _resample(mode: str, node: Any, importer: Any, size: Any, align: bool | None,
              scales: list[float] | None, antialias: bool = False) -> Any:
    bb = importer.block_builder
    x = importer.env[node.args[0]]
    rank = len(x.ty.shape)
    if not all(isinstance(d, tirx.IntImm) for d in list(x.ty.shape)[-2:]):
        # a plane of symbolic size: no constant taps; TVM's own converter
        return default_converter(importer, node.target.__name__)(node)
    n_in = [int(d) for d in list(x.ty.shape)[-2:]]
    if size:
        n_out = [int(s) for s in size]
    else:  # PyTorch: floor(in · scale_factor), the scale kept for the coordinates
        assert scales is not None
        n_out = [int(np.floor(n * s)) for n, s in zip(n_in, scales, strict=True)]
    sizes = list(zip(n_in, n_out, strict=True))
    if _resize2d_is_exact(mode, sizes, align, scales, antialias):
        method = {"nearest": "nearest_neighbor", "linear": "linear", "cubic": "cubic"}[mode]
        return bb.emit(relax.op.image.resize2d(
            x, n_out, layout="NCHW", method=method,
            coordinate_transformation_mode="align_corners" if align else "half_pixel"))
    kind = "aa" if antialias else mode
    dtype = str(x.ty.dtype)
    out = x
    for i, (a, b) in enumerate(sizes):
        if a == b and (scales is None or scales[i] in (0.0, 1.0)) and not antialias:
            continue  # the identity along this axis
        scale = scales[i] if scales is not None and scales[i] > 0 else None
        out = _along(bb, out, rank - 2 + i, _matrix(kind, a, b, align, scale), dtype)
    return out


def _nearest_vec(node: Any, importer: Any) -> Any:
    return _resample("nearest", node, importer, node_arg(node, 1, "output_size"), None,
                     _pair(node_arg(node, 2, "scale_factors")))


def _with_corners_vec(mode: str) -> Callable[[Any, Any], Any]:
    def convert(node: Any, importer: Any) -> Any:
        return _resample(mode, node, importer, node_arg(node, 1, "output_size"),
                         bool(node_arg(node, 2, "align_corners", False)),
                         _pair(node_arg(node, 3, "scale_factors")))
    return convert


def _nearest_default(node: Any, importer: Any) -> Any:
    scales = [node_arg(node, 2, "scales_h"), node_arg(node, 3, "scales_w")]
    return _resample("nearest", node, importer, node_arg(node, 1, "output_size"), None,
                     None if scales == [None, None] else _pair(scales))


def _with_corners_default(mode: str, antialias: bool = False) -> Callable[[Any, Any], Any]:
    def convert(node: Any, importer: Any) -> Any:
        scales = [node_arg(node, 3, "scales_h"), node_arg(node, 4, "scales_w")]
        return _resample(mode, node, importer, node_arg(node, 1, "output_size"),
                         bool(node_arg(node, 2, "align_corners", False)),
                         None if scales == [None, None] else _pair(scales), antialias)
    return convert


def resample_converters() -> dict[str, Callable[[Any, Any], Any]]:
    """The converters, keyed as the importer looks them up (``node.target.__name__``)."""
    return {
        "upsample_nearest2d.vec": _nearest_vec,
        "upsample_bilinear2d.vec": _with_corners_vec("linear"),
        "upsample_bicubic2d.vec": _with_corners_vec("cubic"),
        "upsample_nearest2d.default": _nearest_default,
        "upsample_bilinear2d.default": _with_corners_default("linear"),
        "upsample_bicubic2d.default": _with_corners_default("cubic"),
        "_upsample_bilinear2d_aa.default": _with_corners_default("linear", antialias=True),
    }


__all__ = ["resample_converters"]
