"""``native_group_norm`` without an affine weight or bias, which TVM 0.27's importer crashes on
(``F.group_norm(x, groups)``, ``nn.GroupNorm(..., affine=False)``: "Found null pointer node
while traversing AST"): the missing γ is ones, the missing β zeros, and the norm is Relax's
``nn.group_norm`` like any other. Its mean and reciprocal standard deviation, the op's other
two results (training code reads them), are computed too; nothing reads them in inference,
and they are dropped with the dead code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tvm import relax


def _group_norm(node: Any, importer: Any) -> Any:
    bb = importer.block_builder
    x = importer.env[node.args[0]]
    weight, bias = (importer.env[a] if a is not None else None for a in node.args[1:3])
    n, c, groups, eps = (int(node.args[3]), int(node.args[4]), int(node.args[6]),
                         float(node.args[7]))
    shape = [int(d) for d in x.ty.shape]
    dtype = str(x.ty.dtype)
    gamma = weight if weight is not None else relax.const(np.ones(c, dtype))
    beta = bias if bias is not None else relax.const(np.zeros(c, dtype))
    out = bb.emit(relax.op.nn.group_norm(x, gamma, beta, groups, channel_axis=1,
                                         axes=list(range(2, len(shape))), epsilon=eps))
    grouped = bb.emit(relax.op.reshape(x, [n, groups, -1]))
    mean = bb.emit(relax.op.mean(grouped, axis=[2]))
    var = bb.emit(relax.op.variance(grouped, axis=[2]))
    rstd = bb.emit(relax.op.rsqrt(bb.emit(relax.op.add(var, relax.const(eps, dtype)))))
    return bb.emit(relax.Tuple([out, mean, rstd]))


def norm_converters() -> dict[str, Callable[[Any, Any], Any]]:
    """The converters, keyed as the importer looks them up (``node.target.__name__``)."""
    return {"native_group_norm.default": _group_norm}


__all__ = ["norm_converters"]
