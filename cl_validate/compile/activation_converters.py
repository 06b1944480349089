"""Activations TVM 0.27's torch importer gets wrong or lacks.

* ``elu(x, alpha, scale, input_scale)``: torch's decompositions turn ``selu`` into
  ``elu(x, 1.6733, 1.0507)`` and ``celu(x, α)`` into ``elu(x, α, 1, 1/α)``; the importer reads
  only ``alpha`` and computes ``relu(x) - α·relu(1 - exp(x))``, so a SELU network's every
  activation is off by its scale (up to 0.5 at |x| ~ 3) and a CELU with α ≠ 1 is wrong for
  negative inputs (`docs/upstream/elu-scale.md`). Here: ``scale·x`` for x > 0, else
  ``scale·α·(exp(input_scale·x) - 1)``, as aten computes it.
* ``rrelu_with_noise_functional`` in inference (``training=False``): a leaky ReLU with the
  mean of its bounds, ``(lower + upper) / 2``, as aten computes it then; in training it is
  random, which no compiled program reproduces, and it is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tvm import relax


def _scalar(value: Any, dtype: str) -> Any:
    return relax.const(float(value), dtype)


def _elu(node: Any, importer: Any) -> Any:
    bb = importer.block_builder
    x = importer.env[node.args[0]]
    args = [*node.args[1:], *([None] * 3)]
    alpha = node.kwargs.get("alpha", 1.0 if args[0] is None else args[0])
    scale = node.kwargs.get("scale", 1.0 if args[1] is None else args[1])
    input_scale = node.kwargs.get("input_scale", 1.0 if args[2] is None else args[2])
    dtype = str(x.ty.dtype)
    zero = _scalar(0.0, dtype)
    scaled = x if float(input_scale) == 1.0 else bb.emit(
        relax.op.multiply(x, _scalar(input_scale, dtype)))
    negative = bb.emit(relax.op.multiply(
        bb.emit(relax.op.subtract(bb.emit(relax.op.exp(scaled)), _scalar(1.0, dtype))),
        _scalar(float(alpha) * float(scale), dtype)))
    positive = x if float(scale) == 1.0 else bb.emit(
        relax.op.multiply(x, _scalar(scale, dtype)))
    return bb.emit(relax.op.where(bb.emit(relax.op.greater(x, zero)), positive, negative))


def _rrelu(node: Any, importer: Any) -> Any:
    args = [*node.args[1:], *([None] * 5)]
    lower = node.kwargs.get("lower", 1 / 8 if args[1] is None else args[1])
    upper = node.kwargs.get("upper", 1 / 3 if args[2] is None else args[2])
    training = node.kwargs.get("training", bool(args[3]))
    if training:
        raise ValueError("rrelu in training mode is random: put the model in eval mode")
    bb = importer.block_builder
    x, noise = importer.env[node.args[0]], importer.env[node.args[1]]
    slope = (float(lower) + float(upper)) / 2
    # (the result, the noise buffer it would have written)
    return bb.emit(relax.Tuple([bb.emit(relax.op.nn.leakyrelu(x, slope)), noise]))


def activation_converters() -> dict[str, Callable[[Any, Any], Any]]:
    """The converters, keyed as the importer looks them up (``node.target.__name__``)."""
    return {"elu.default": _elu, "rrelu_with_noise_functional.default": _rrelu}


__all__ = ["activation_converters"]
