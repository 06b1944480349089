"""``Tensor.unfold(dim, size, step)``: sliding windows along one axis, which TVM 0.27's torch
importer has no converter for (audio framing, ``x.unfold(2, p, p).unfold(3, p, p)`` patch
extraction, sliding-window inference).

The windows are a gather: window ``i`` of the axis holds its elements ``i·step + k`` for
``k < size``, so one ``take`` with the constant ``(n, size)`` index picks them all (``n =
(length - size) // step + 1``), and a permute moves the window's axis last, where PyTorch
puts it (none when `dim` is the last axis already). Exact: the elements are copied.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tvm import relax


def _unfold(node: Any, importer: Any) -> Any:
    bb = importer.block_builder
    x = importer.env[node.args[0]]
    shape = [int(d) for d in x.ty.shape]
    rank = len(shape)
    dim, size, step = int(node.args[1]) % max(rank, 1), int(node.args[2]), int(node.args[3])
    if rank == 0:  # a scalar's one window is itself, on a new axis
        return bb.emit(relax.op.reshape(x, [1]))
    n = (shape[dim] - size) // step + 1
    index = np.arange(n)[:, None] * step + np.arange(size)[None, :]
    windows = bb.emit(relax.op.take(x, relax.const(index.astype("int64")), axis=dim))
    if dim == rank - 1:
        return windows
    order = [*range(dim + 1), *range(dim + 2, rank + 1), dim + 1]
    return bb.emit(relax.op.permute_dims(windows, order))


def window_converters() -> dict[str, Callable[[Any, Any], Any]]:
    """The converters, keyed as the importer looks them up (``node.target.__name__``)."""
    return {"unfold.default": _unfold}


__all__ = ["window_converters"]
