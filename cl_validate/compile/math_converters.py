"""Math ops TVM 0.27's torch importer has no converter for, each as aten defines it.

* elementwise: ``exp2``, ``erfc``, ``copysign``, ``hypot``, ``heaviside`` and ``erfinv``
  (Giles' single-precision approximation refined by one Newton step on ``erf``: within a few
  float32 ulps of PyTorch's);
* scans, each over an ``(L, L)`` comparison along the axis (meant for the short axes models
  scan): ``logcumsumexp`` (each prefix shifted by its own maximum, neither overflow nor
  underflow), ``cummax`` / ``cummin`` (values and indices; on ties the later index, as
  PyTorch's CPU kernel);
* scatters: ``scatter_add`` and ``scatter_reduce`` (sum, prod, amax, amin; ``include_self``
  either way: without it, the scattered positions start from the reduction's identity);
* ``where`` with branches of two dtypes, promoted as PyTorch does;
* ``_cdist_forward`` (``torch.cdist``): the distances computed directly from the
  differences, for every ``p`` (PyTorch's matrix-product form for ``p = 2`` is within
  rounding of it);
* ``arange`` counting down by integers (``torch.arange(n - 1, -1, -1)``: a reversed index,
  Transformer-XL's relative positions): TVM 0.27 sizes it ``(end - start + step - 1) //
  step``, 8 elements for ``arange(5, -1, -1)``'s 6, and everything after it was misshapen.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from tvm import relax

from cl_validate.compile.converter_support import default_converter, node_arg


def _env(importer: Any, value: Any) -> Any:
    return importer.env[value] if value in importer.env else value


def _tensor(value: Any, like: Any) -> Any:
    """A Python number as a constant of `like`'s dtype; a tensor as it is."""
    if isinstance(value, (int, float, bool)):
        return relax.const(value, str(like.ty.dtype))
    return value


def _unary(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def convert(node: Any, importer: Any) -> Any:
        return fn(importer.block_builder, importer.env[node.args[0]])
    return convert


def _binary(fn: Callable[[Any, Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def convert(node: Any, importer: Any) -> Any:
        bb = importer.block_builder
        a = importer.env[node.args[0]]
        b = _tensor(_env(importer, node.args[1]), a)
        return fn(bb, a, b)
    return convert


def _c(value: float, x: Any) -> Any:
    return relax.const(value, str(x.ty.dtype))


def _exp2(bb: Any, x: Any) -> Any:
    return bb.emit(relax.op.power(_c(2.0, x), x))


def _erfc(bb: Any, x: Any) -> Any:
    return bb.emit(relax.op.subtract(_c(1.0, x), relax.op.erf(x)))


def _erfinv(bb: Any, y: Any) -> Any:
    """Giles (2010), "Approximating the erfinv function", single precision, then one Newton
    step ``x -= (erf(x) - y) / (2/√π · exp(-x²))``; ±1 give ±inf as PyTorch's."""
    op = relax.op
    w = bb.emit(op.negative(op.log(op.multiply(op.subtract(_c(1.0, y), y),
                                               op.add(_c(1.0, y), y)))))
    central = [2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
               0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941]
    tail = [-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
            0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682]

    def poly(t: Any, coefficients: list[float]) -> Any:
        p = _c(coefficients[0], y)
        for c in coefficients[1:]:
            p = bb.emit(op.add(op.multiply(p, t), _c(c, y)))
        return p

    small = poly(bb.emit(op.subtract(w, _c(2.5, y))), central)
    large = poly(bb.emit(op.subtract(op.sqrt(w), _c(3.0, y))), tail)
    x = bb.emit(op.multiply(op.where(op.less(w, _c(5.0, y)), small, large), y))
    slope = bb.emit(op.multiply(_c(2.0 / math.sqrt(math.pi), y),
                                op.exp(op.negative(op.multiply(x, x)))))
    refined = bb.emit(op.subtract(x, op.divide(op.subtract(op.erf(x), y), slope)))
    edge = bb.emit(op.equal(op.abs(y), _c(1.0, y)))
    return bb.emit(op.where(edge, op.multiply(y, _c(float("inf"), y)), refined))


def _copysign(bb: Any, a: Any, b: Any) -> Any:
    """|a| with b's sign bit (a negative zero counts as negative, as in C's copysign)."""
    negative = relax.op.less(b, _c(0.0, a))
    zero_negative = relax.op.logical_and(
        relax.op.equal(b, _c(0.0, a)),
        relax.op.less(relax.op.divide(_c(1.0, a), b), _c(0.0, a)))
    sign_negative = bb.emit(relax.op.logical_or(negative, zero_negative))
    magnitude = bb.emit(relax.op.abs(a))
    return bb.emit(relax.op.where(sign_negative, relax.op.negative(magnitude), magnitude))


def _hypot(bb: Any, a: Any, b: Any) -> Any:
    return bb.emit(relax.op.sqrt(relax.op.add(relax.op.multiply(a, a),
                                              relax.op.multiply(b, b))))


def _heaviside(bb: Any, x: Any, values: Any) -> Any:
    dtype = str(x.ty.dtype)
    values = bb.emit(relax.op.astype(values, dtype))
    step = bb.emit(relax.op.astype(relax.op.greater(x, _c(0.0, x)), dtype))
    return bb.emit(relax.op.where(relax.op.equal(x, _c(0.0, x)), values, step))


def _axis(node: Any, x: Any, i: int = 1) -> int:
    return int(node_arg(node, i, "dim", 0)) % max(1, len(x.ty.shape))


def _prefixes(bb: Any, x: Any, axis: int) -> tuple[Any, Any, list[int]]:
    """Each position's prefix along `axis`, as an extra axis after it: `x` read at
    ``[..., i, j, ...]`` (broadcast over ``i``) and the mask ``j <= i``; and the shape of an
    index along ``j``. An ``(L, L)`` comparison, meant for the short axes models scan."""
    length = int(x.ty.shape[axis])
    rank = len(x.ty.shape) + 1
    shape = [1] * rank
    shape[axis], shape[axis + 1] = length, length
    mask = relax.const(np.tril(np.ones((length, length), dtype=bool)).reshape(shape))
    rows = bb.emit(relax.op.expand_dims(x, [axis]))
    return rows, mask, [length if k == axis + 1 else 1 for k in range(rank)]


def _logcumsumexp(node: Any, importer: Any) -> Any:
    """Each prefix shifted by its own maximum (PyTorch's running log-add-exp keeps the small
    early terms that one shift by the axis' maximum would underflow)."""
    bb = importer.block_builder
    x = importer.env[node.args[0]]
    axis = _axis(node, x)
    rows, mask, _ = _prefixes(bb, x, axis)
    peak = bb.emit(relax.op.max(relax.op.where(mask, rows, _c(float("-inf"), x)),
                                axis=[axis + 1], keepdims=True))
    shift = bb.emit(relax.op.where(relax.op.isfinite(peak), peak, relax.op.zeros_like(peak)))
    terms = bb.emit(relax.op.where(mask, relax.op.exp(relax.op.subtract(rows, shift)),
                                   _c(0.0, x)))
    total = bb.emit(relax.op.log(relax.op.sum(terms, axis=[axis + 1], keepdims=True)))
    return bb.emit(relax.op.squeeze(relax.op.add(total, shift), [axis + 1]))


def _cumulative_extreme(largest: bool) -> Callable[[Any, Any], Any]:
    def convert(node: Any, importer: Any) -> Any:
        bb = importer.block_builder
        x = importer.env[node.args[0]]
        axis = _axis(node, x)
        rows, mask, along = _prefixes(bb, x, axis)
        fill = _c(float("-inf") if largest else float("inf"), x)
        seen = bb.emit(relax.op.where(mask, rows, fill))
        reduce = relax.op.max if largest else relax.op.min
        values = bb.emit(reduce(seen, axis=[axis + 1]))
        hit = bb.emit(relax.op.logical_and(mask, relax.op.equal(
            seen, relax.op.expand_dims(values, [axis + 1]))))
        positions = relax.const(np.arange(along[axis + 1], dtype="int64").reshape(along),
                                "int64")
        where = bb.emit(relax.op.where(hit, positions, relax.const(-1, "int64")))
        indices = bb.emit(relax.op.max(where, axis=[axis + 1]))
        return bb.emit(relax.Tuple([values, indices]))
    return convert


_IDENTITY = {"sum": 0.0, "prod": 1.0, "amax": float("-inf"), "amin": float("inf")}
_REDUCTION = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}


def _scatter(bb: Any, x: Any, axis: int, index: Any, src: Any, reduce: str,
             include_self: bool) -> Any:
    if reduce not in _REDUCTION:
        raise ValueError(f"scatter_reduce with reduce={reduce!r} is not supported "
                         f"(sum, prod, amax, amin are)")
    base = x
    if not include_self:  # the scattered positions start from the reduction's identity
        identity = bb.emit(relax.op.add(relax.op.zeros_like(src), _c(_IDENTITY[reduce], x)))
        base = bb.emit(relax.op.scatter_elements(x, index, identity, axis=axis))
    return bb.emit(relax.op.scatter_elements(base, index, src, axis=axis,
                                             reduction=_REDUCTION[reduce]))


def _scatter_add(node: Any, importer: Any) -> Any:
    x = importer.env[node.args[0]]
    return _scatter(importer.block_builder, x, _axis(node, x), importer.env[node.args[2]],
                    importer.env[node.args[3]], "sum", True)


def _scatter_reduce(node: Any, importer: Any) -> Any:
    x = importer.env[node.args[0]]
    return _scatter(importer.block_builder, x, _axis(node, x), importer.env[node.args[2]],
                    importer.env[node.args[3]], str(node.args[4]),
                    bool(node_arg(node, 5, "include_self", True)))


def _cdist(node: Any, importer: Any) -> Any:
    """``_cdist_forward(x1, x2, p, compute_mode)``: (…, P, M) and (…, R, M) → (…, P, R)."""
    bb = importer.block_builder
    a, b = importer.env[node.args[0]], importer.env[node.args[1]]
    p = float(node.args[2])
    rank = len(a.ty.shape)
    diff = bb.emit(relax.op.abs(relax.op.subtract(relax.op.expand_dims(a, [rank - 1]),
                                                  relax.op.expand_dims(b, [rank - 2]))))
    axis = [rank]
    if p == 0:
        return bb.emit(relax.op.sum(relax.op.astype(
            relax.op.not_equal(diff, _c(0.0, a)), str(a.ty.dtype)), axis=axis))
    if math.isinf(p):
        return bb.emit(relax.op.max(diff, axis=axis))
    if p == 1:
        return bb.emit(relax.op.sum(diff, axis=axis))
    if p == 2:
        return bb.emit(relax.op.sqrt(relax.op.sum(relax.op.multiply(diff, diff), axis=axis)))
    total = bb.emit(relax.op.sum(relax.op.power(diff, _c(p, a)), axis=axis))
    return bb.emit(relax.op.power(total, _c(1.0 / p, a)))


def _where(node: Any, importer: Any) -> Any:
    """``where(cond, a, b)`` with branches of two dtypes (``heaviside`` decomposes into an
    int64 zero beside float values): PyTorch promotes, TVM's ``where`` refuses; each branch
    is cast to the dtype PyTorch gives the result. Branches of one dtype: TVM's converter."""
    val = node.meta.get("val")
    dtype = str(getattr(val, "dtype", "")).removeprefix("torch.")
    branches = [_env(importer, a) for a in node.args[1:3]]
    if not dtype or all(isinstance(b, relax.Expr) and str(b.ty.dtype) == dtype
                        for b in branches):
        return default_converter(importer, "where.self")(node)
    bb = importer.block_builder
    cast = [relax.const(b, dtype) if isinstance(b, (int, float, bool))
            else b if str(b.ty.dtype) == dtype else bb.emit(relax.op.astype(b, dtype))
            for b in branches]
    return bb.emit(relax.op.where(importer.env[node.args[0]], *cast))


def _arange(node: Any, importer: Any) -> Any:
    """``arange(start, end, step)``; with an integer step below zero, sized as PyTorch sizes
    it (TVM's own converter otherwise): the values as a constant when the bounds are
    numbers, else the ascending range from the last value up, flipped."""
    start, end = node_arg(node, 0, "start", 0), node_arg(node, 1, "end")
    step = node_arg(node, 2, "step", 1)
    if not (isinstance(step, int) and step < 0):
        return default_converter(importer, "arange.start_step")(node)
    lo, hi = (_env(importer, v) for v in (start, end))
    floats = any(isinstance(v, float) for v in (lo, hi))
    dtype = "float32" if floats else "int64"
    if node.kwargs.get("dtype") is not None:
        dtype = str(importer._convert_data_type(str(node.kwargs["dtype"]), importer.env))
    bb = importer.block_builder
    if isinstance(lo, int | float) and isinstance(hi, int | float):
        return bb.emit(relax.const(np.arange(lo, hi, step).astype(dtype), dtype))
    if floats:  # a symbolic bound beside a float one: TVM sizes floats as PyTorch does
        return default_converter(importer, "arange.start_step")(node)
    count = (lo - hi - step - 1) // -step  # ceil((start - end) / -step)
    last = lo + step * (count - 1)
    return bb.emit(relax.op.flip(bb.emit(relax.op.arange(last, lo + 1, -step, dtype)), 0))


def math_converters() -> dict[str, Callable[[Any, Any], Any]]:
    """The converters, keyed as the importer looks them up (``node.target.__name__``)."""
    return {
        "exp2.default": _unary(_exp2),
        "erfc.default": _unary(_erfc),
        "erfinv.default": _unary(_erfinv),
        "copysign.Tensor": _binary(_copysign),
        "copysign.Scalar": _binary(_copysign),
        "hypot.default": _binary(_hypot),
        "heaviside.default": _binary(_heaviside),
        "logcumsumexp.default": _logcumsumexp,
        "cummax.default": _cumulative_extreme(largest=True),
        "cummin.default": _cumulative_extreme(largest=False),
        "scatter_add.default": _scatter_add,
        "scatter_reduce.two": _scatter_reduce,
        "_cdist_forward.default": _cdist,
        "where.self": _where,
        "arange.start_step": _arange,
    }


__all__ = ["math_converters"]
