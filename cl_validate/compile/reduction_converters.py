"""Reductions along one axis that TVM 0.27's torch importer has no converter for.

* ``prod.dim_int(x, dim, keepdim, dtype)``: Relax's ``prod`` over that axis (``torch.prod(x,
  dim)``; the importer knows only the product of all elements);
* ``kthvalue(x, k, dim, keepdim)``: the k-th smallest along the axis and its index: the
  sorted values' k-th and the stable argsort's k-th (PyTorch returns an index of the value;
  among equal values which one is unspecified, and here it is the first in order).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tvm import relax

from cl_validate.compile.converter_support import node_arg


def _prod(node: Any, importer: Any) -> Any:
    bb = importer.block_builder
    x = importer.env[node.args[0]]
    dtype = node_arg(node, 3, "dtype", None)
    if dtype is not None:
        x = bb.emit(relax.op.astype(x, str(dtype).removeprefix("torch.")))
    return bb.emit(relax.op.prod(x, axis=[int(node.args[1])],
                                 keepdims=bool(node_arg(node, 2, "keepdim", False))))


def _kthvalue(node: Any, importer: Any) -> Any:
    bb = importer.block_builder
    x = importer.env[node.args[0]]
    k = int(node.args[1])
    axis = int(node_arg(node, 2, "dim", -1)) % len(x.ty.shape)
    keep = bool(node_arg(node, 3, "keepdim", False))
    order = bb.emit(relax.op.argsort(x, axis=axis, dtype="int64"))
    index = bb.emit(relax.op.strided_slice(order, [axis], [k - 1], [k]))
    value = bb.emit(relax.op.gather_elements(x, index, axis=axis))
    if not keep:
        value = bb.emit(relax.op.squeeze(value, [axis]))
        index = bb.emit(relax.op.squeeze(index, [axis]))
    return bb.emit(relax.Tuple([value, index]))


def reduction_converters() -> dict[str, Callable[[Any, Any], Any]]:
    """The converters, keyed as the importer looks them up (``node.target.__name__``)."""
    return {"prod.dim_int": _prod, "kthvalue.default": _kthvalue}


__all__ = ["reduction_converters"]
