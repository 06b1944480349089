"""Discrete Fourier transforms on complex pairs, as products with constant DFT matrices.

Spectral token mixers and convolutions (GFNet's global filter, FNet, AFNO / FourCastNet, the
fast Fourier convolutions of LaMa's inpainting network) call ``torch.fft.rfft2`` / ``irfft2``
/ ``fft`` / ``ifft``; torch.export's decompositions leave ``_fft_r2c``, ``_fft_c2r`` and
``_fft_c2c``, for which Relax has no op. Each is separable: one DFT per transformed axis, and
a DFT of length ``n`` along an axis is a product with a constant ``(m, n)`` matrix of cosines
and sines, which reads the tensor viewed as ``(before, n, after)`` in place (no transpose: a
channels-last token grid keeps its layout). Complex values are `complex_pairs`' pairs (the
(real, imaginary) parts on a last axis of 2); inside a transform the parts travel as two real
tensors. (This module keeps its own two pair helpers: complex_pairs imports it, and sharing
theirs would make the import cycle the import contract forbids.)

* ``_fft_r2c(x, dim, norm, onesided)``: the last axis of ``dim`` real to complex (its first
  ``n // 2 + 1`` frequencies when one-sided), then a complex DFT along the others;
* ``_fft_c2r(x, dim, norm, n)``: inverse complex DFTs along all but the last axis of ``dim``,
  then the Hermitian half-spectrum of the last to ``n`` reals (each frequency but the zeroth
  and, for an even ``n``, the Nyquist one counted twice; their imaginary parts ignored, as
  pocketfft does);
* ``_fft_c2c(x, dim, norm, forward)``: a complex DFT along each axis of ``dim``.

With the case's convolutions channels-last, a transform over the spatial axes of an
``(N, C, H, W)`` feature map (LaMa's and HorNet's Fourier units: ``dim=(-2, -1)``; a map: the
ops of its shape around it reach a convolution or the image input, and no permute) is
computed on the map permuted to ``(N, H, W, C)``, where each DFT reads it in place, and
permuted back: the two permutes (the importer's, for the FFT) cancel against the transposes
ConvertLayout puts around the ops it has no rule for, where the map is NHWC anyway. A token
grid the model permuted itself is transformed where it is.

``norm`` scales by 1, ``1/√N`` or ``1/N`` (N: the signal's size over ``dim``), folded into the
first matrix. The matrices are computed in float64 and stored in the operand's dtype; the
sums run in that dtype (a direct DFT: O(n) products per output instead of an FFT's
O(log n), on the small grids these models transform).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from tvm import relax

Converter = Callable[[Any, Any], Any]
Parts = tuple[Any, Any]  # (real, imaginary) relax exprs; imaginary None for a real signal


def _shape(expr: Any) -> list[int]:
    return [int(d) for d in expr.ty.shape]


def _trig(n: int, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of ``2π·jk/n`` for row k, column j; the angle reduced mod n first and the
    sines of 0 and π exactly 0 (so a real signal's zeroth and Nyquist frequencies have an
    imaginary part of +0, as an FFT gives them, and ``angle`` sees no sign flip there)."""
    r = np.outer(np.arange(rows), np.arange(cols)) % n
    cos, sin = np.cos(2 * np.pi * r / n), np.sin(2 * np.pi * r / n)
    sin[(r == 0) | (2 * r == n)] = 0.0
    return cos, sin


def _along(bb: Any, x: Any, matrix: np.ndarray, axis: int) -> Any:
    """``matrix @ x`` along `axis`: x viewed as (before, n, after), the product broadcast
    over the rest, viewed back with `axis` of the matrix's row count."""
    matrix = matrix + 0.0  # no negative zeros
    shape = _shape(x)
    before, after = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
    m = relax.const(matrix.astype(str(x.ty.dtype)))
    x3 = bb.emit(relax.op.reshape(x, [before, shape[axis], after]))
    y = bb.emit(relax.op.matmul(m, x3))
    return bb.emit(relax.op.reshape(y, [*shape[:axis], matrix.shape[0], *shape[axis + 1:]]))


def _sum(bb: Any, terms: list[Any]) -> Any:
    out = terms[0]
    for t in terms[1:]:
        out = bb.emit(relax.op.add(out, t))
    return out


def _complex_dft(bb: Any, parts: Parts, axis: int, sign: int, scale: float) -> Parts:
    """(re, im) after ``X[k] = scale · Σ_j x[j] · exp(sign · 2πi·jk/n)`` along `axis`."""
    re, im = parts
    n = _shape(re)[axis]
    cos, sin = _trig(n, n, n)
    cos, sin = cos * scale, sin * sign * scale
    if im is None:
        return _along(bb, re, cos, axis), _along(bb, re, sin, axis)
    out_re = _sum(bb, [_along(bb, re, cos, axis), _along(bb, im, -sin, axis)])
    out_im = _sum(bb, [_along(bb, re, sin, axis), _along(bb, im, cos, axis)])
    return out_re, out_im


def _one_sided(bb: Any, x: Any, axis: int, onesided: bool, scale: float) -> Parts:
    """A real signal's DFT along `axis`: its first ``n // 2 + 1`` frequencies if `onesided`."""
    n = _shape(x)[axis]
    cos, sin = _trig(n, n // 2 + 1 if onesided else n, n)
    return _along(bb, x, cos * scale, axis), _along(bb, x, -sin * scale, axis)


def _to_real(bb: Any, parts: Parts, axis: int, n: int, scale: float) -> Any:
    """The `n` reals whose one-sided spectrum along `axis` is `parts` (inverse, sign +1)."""
    re, im = parts
    m = min(_shape(re)[axis], n // 2 + 1)
    k = np.arange(n // 2 + 1)
    weight = np.where((k == 0) | ((n % 2 == 0) & (k == n // 2)), 1.0, 2.0)[:m] * scale
    cos, sin = _trig(n, n, m)
    cos, sin = cos * weight, sin * weight
    pad = _shape(re)[axis] - m  # frequencies past n // 2 + 1 do not contribute
    if pad:
        cos, sin = (np.concatenate([t, np.zeros((n, pad))], axis=1) for t in (cos, sin))
    return _sum(bb, [_along(bb, re, cos, axis), _along(bb, im, -sin, axis)])


def _scale(norm: int, size: int) -> float:
    return {0: 1.0, 1: 1 / math.sqrt(size), 2: 1 / size}[int(norm)]


def _parts(bb: Any, pair: Any) -> Parts:
    last = len(_shape(pair)) - 1
    return tuple(bb.emit(relax.op.take(pair, relax.const(i, "int64"), axis=last))  # type: ignore[return-value]
                 for i in (0, 1))


def _pair(bb: Any, parts: Parts) -> Any:
    rank = len(_shape(parts[0]))
    return bb.emit(relax.op.concat([bb.emit(relax.op.expand_dims(p, rank)) for p in parts],
                                   axis=rank))


def _axes(dims: Any, rank: int) -> list[int]:
    return [int(d) % rank for d in dims]


#: channels-first (N, C, H, W) to channels-last (N, H, W, C), and back
_TO_LAST, _TO_FIRST = (0, 2, 3, 1), (0, 3, 1, 2)


#: The exported graph's ops that put a tensor in an order of the model's choosing.
_PERMUTES = frozenset({"permute", "transpose", "t", "swapaxes", "movedim"})
_WALK = 64  # nodes looked at, at most, per transform


def _feature_map(real: Any, downward: bool) -> bool:
    """`real` (an fx node, 4-D) is an (N, C, H, W) feature map: the ops of its shape around it
    (before it, or after it when `downward`) reach a convolution or an image input, and no
    permute (a channels-last token grid viewed by the model: transformed where it is)."""
    shape = tuple(getattr(real.meta.get("val"), "shape", ()))
    seen: set[Any] = set()
    todo, conv = [real], False
    while todo and len(seen) < _WALK:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        name = getattr(node.target, "__name__", str(node.target)).split(".")[0]
        if name in _PERMUTES:
            return False
        if name == "convolution" or (node.op == "placeholder" and not downward):
            conv = True
            continue
        nxt = list(node.users) if downward else node.all_input_nodes
        # a convolution reading the map has a shape of its own
        todo.extend(n for n in nxt if tuple(getattr(n.meta.get("val"), "shape", ())) == shape
                    or (downward and str(n.target).split(".")[-2:-1] == ["convolution"]))
    return conv


def _channels_last(node: Any, rank: int, axes: list[int], channels_last: bool,
                   downward: bool = False) -> bool:
    """Transform an (N, C, H, W) feature map over its spatial axes channels-last: the DFTs
    read it in place there, and the permutes to and from it cancel against the transposes of
    the case's NHWC layout. `node` is the map (the transform's input, or with `downward` the
    transform itself, whose output it is)."""
    return channels_last and rank == 4 and set(axes) <= {2, 3} and \
        _feature_map(node, downward)


def _permuted(bb: Any, x: Any, perm: tuple[int, ...], pair: bool) -> Any:
    return bb.emit(relax.op.permute_dims(x, [*perm, 4] if pair else list(perm)))


def _r2c(node: Any, importer: Any, channels_last: bool) -> Any:
    bb = importer.block_builder
    x = importer.env[node.args[0]]
    shape = _shape(x)
    axes = _axes(node.args[1], len(shape))
    scale = _scale(node.args[2], math.prod(shape[a] for a in axes))
    last = _channels_last(node.args[0], len(shape), axes, channels_last)
    if last:
        x, axes = _permuted(bb, x, _TO_LAST, False), [_TO_LAST.index(a) for a in axes]
    parts = _one_sided(bb, x, axes[-1], bool(node.args[3]), scale)
    for axis in axes[:-1]:
        parts = _complex_dft(bb, parts, axis, -1, 1.0)
    out = _pair(bb, parts)
    return _permuted(bb, out, _TO_FIRST, True) if last else out


def _c2r(node: Any, importer: Any, channels_last: bool) -> Any:
    bb = importer.block_builder
    pair = importer.env[node.args[0]]
    rank = len(_shape(pair)) - 1
    axes, n = _axes(node.args[1], rank), int(node.args[3])
    out = [*_shape(pair)[:-1]]
    out[axes[-1]] = n
    scale = _scale(node.args[2], math.prod(out[a] for a in axes))
    last = _channels_last(node, rank, axes, channels_last, downward=True)
    if last:
        pair, axes = _permuted(bb, pair, _TO_LAST, True), [_TO_LAST.index(a) for a in axes]
    parts = _parts(bb, pair)
    for axis in axes[:-1]:
        parts = _complex_dft(bb, parts, axis, 1, 1.0)
    real = _to_real(bb, parts, axes[-1], n, scale)
    return _permuted(bb, real, _TO_FIRST, False) if last else real


def _c2c(node: Any, importer: Any, channels_last: bool) -> Any:
    bb = importer.block_builder
    pair = importer.env[node.args[0]]
    shape = _shape(pair)[:-1]
    axes = _axes(node.args[1], len(shape))
    scale = _scale(node.args[2], math.prod(shape[a] for a in axes))
    last = _channels_last(node.args[0], len(shape), axes, channels_last)
    if last:
        pair, axes = _permuted(bb, pair, _TO_LAST, True), [_TO_LAST.index(a) for a in axes]
    parts = _parts(bb, pair)
    sign = -1 if bool(node.args[3]) else 1
    for i, axis in enumerate(axes):
        parts = _complex_dft(bb, parts, axis, sign, scale if i == 0 else 1.0)
    out = _pair(bb, parts)
    return _permuted(bb, out, _TO_FIRST, True) if last else out


#: The DFT ops (``node.target.__name__`` before the overload) and their converters.
FOURIER = {"_fft_r2c": _r2c, "_fft_c2r": _c2r, "_fft_c2c": _c2c}


def fourier_converters(channels_last: bool = False) -> dict[str, Converter]:
    """The converters by the importer's op names; with `channels_last` (the case's
    convolutions are NHWC), a spatial transform of an (N, C, H, W) map computed on its
    channels-last view (`_channels_last`)."""
    return {f"{base}.default": functools.partial(convert, channels_last=channels_last)
            for base, convert in FOURIER.items()}


__all__ = ["FOURIER", "fourier_converters"]
