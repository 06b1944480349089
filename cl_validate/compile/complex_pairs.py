"""Complex tensors as pairs of reals: rotary positions written with complex numbers.

Meta's LLaMA reference, SAM 2's memory attention and many diffusion transformers rotate q and
k as complex products: ``view_as_complex(x.reshape(..., -1, 2)) * freqs_cis``, then
``view_as_real(...).flatten(3)``, with ``freqs_cis`` a complex constant. Relax has no complex
dtype and TVM 0.27's importer has no converter for these ops. Here a complex tensor of shape
``S`` is the real tensor ``S + (2,)`` of its (real, imaginary) parts, which is exactly what
``view_as_real`` returns, so ``view_as_complex`` and ``view_as_real`` are the identity on it:

* complex constants (lifted by torch.export) are stored as ``view_as_real`` of themselves
  before the import (`store_complex_constants`);
* ``complex(re, im)`` stacks its parts, ``polar(r, θ)`` makes them; products, sums and
  differences are computed on the parts (a real operand scales or shifts them); views,
  slices, selections, gathers, expansions, repeats and permutes act on the leading axes, the
  parts' axis staying last; ``abs`` and ``angle`` are the pair's magnitude and ``atan2``;
* the discrete Fourier transforms (``torch.fft``) are products with constant DFT matrices
  (`fourier_pairs`);
* any other op that reads or makes a complex tensor is refused before the import, by name
  (`unsupported_complex_ops`): a pair it did not know would compute something else.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tvm import relax

from cl_validate.compile.converter_support import default_converter
from cl_validate.compile.fourier_pairs import FOURIER, fourier_converters

#: The meta key marking an fx node whose value is stored as a pair (a complex constant).
PAIRED = "cl_validate_complex_pair"
Converter = Callable[[Any, Any], Any]


def is_complex(arg: Any) -> bool:
    """An fx node whose value is a complex tensor (stored as a pair)."""
    meta = getattr(arg, "meta", None)
    if not isinstance(meta, dict):
        return False
    val = meta.get("val")
    return bool(meta.get(PAIRED)) or bool(getattr(getattr(val, "dtype", None), "is_complex",
                                                   False))


def _shape(node: Any) -> list[int]:
    return [int(d) for d in node.meta["val"].shape]


def _pair(bb: Any, re: Any, im: Any) -> Any:
    """(re, im) on a new last axis (a concat: TVM 0.27's ConvertLayout fails on ``stack``),
    each broadcast to the shape of both (a real added to a complex of fewer axes)."""
    shapes = [tuple(int(d) for d in t.ty.shape) for t in (re, im)]
    full = tuple(int(d) for d in np.broadcast_shapes(*shapes))
    re, im = (t if s == full else bb.emit(relax.op.broadcast_to(t, list(full)))
              for t, s in zip((re, im), shapes, strict=True))
    parts = [bb.emit(relax.op.expand_dims(t, len(full))) for t in (re, im)]
    return bb.emit(relax.op.concat(parts, axis=len(full)))


def _part(bb: Any, pair: Any, i: int) -> Any:
    rank = len(pair.ty.shape)
    return bb.emit(relax.op.take(pair, relax.const(i, "int64"), axis=rank - 1))


def _arithmetic(name: str) -> Converter:
    def convert(node: Any, importer: Any) -> Any:
        bb = importer.block_builder
        a_node, b_node = node.args[0], node.args[1]
        a, b = (importer.env[n] if hasattr(n, "meta") else n for n in (a_node, b_node))
        if not isinstance(a, relax.Expr):
            a = relax.const(a, "float32")
        if not isinstance(b, relax.Expr):
            b = relax.const(b, "float32")
        ca, cb = is_complex(a_node), is_complex(b_node)
        if ca and cb and name == "mul":
            ar, ai, br, bi = _part(bb, a, 0), _part(bb, a, 1), _part(bb, b, 0), _part(bb, b, 1)
            re = bb.emit(relax.op.subtract(bb.emit(relax.op.multiply(ar, br)),
                                           bb.emit(relax.op.multiply(ai, bi))))
            im = bb.emit(relax.op.add(bb.emit(relax.op.multiply(ar, bi)),
                                      bb.emit(relax.op.multiply(ai, br))))
            return _pair(bb, re, im)
        if ca and cb:
            op = relax.op.add if name == "add" else relax.op.subtract
            return bb.emit(op(a, b))
        # one side real: a product scales both parts, a sum shifts the real part
        pair, real = (a, b) if ca else (b, a)
        if name == "mul":
            real = bb.emit(relax.op.expand_dims(real, real.ty.ndim)) if real.ty.ndim > 0 else real
            return bb.emit(relax.op.multiply(pair, real))
        re, im = _part(bb, pair, 0), _part(bb, pair, 1)
        if name == "add":
            re = bb.emit(relax.op.add(re, real))
        elif ca:
            re = bb.emit(relax.op.subtract(re, real))
        else:  # real - complex
            re, im = bb.emit(relax.op.subtract(real, re)), bb.emit(relax.op.negative(im))
        return _pair(bb, re, im)

    return convert


def _axis(dim: int, node: Any) -> int:
    return int(dim) % len(node.meta["val"].shape)


def _pair_op(name: str, node: Any, importer: Any) -> Any:
    """The complex op `name` on the pair of its (first) operand; None when not one of ours."""
    bb = importer.block_builder
    src = node.args[0]
    x = importer.env[src] if hasattr(src, "meta") else None
    if name == "complex":
        re, im = importer.env[node.args[0]], importer.env[node.args[1]]
        return _pair(bb, re, im)
    if name == "polar":  # abs · (cos θ, sin θ)
        mag, angle = importer.env[node.args[0]], importer.env[node.args[1]]
        return _pair(bb, bb.emit(relax.op.multiply(mag, bb.emit(relax.op.cos(angle)))),
                     bb.emit(relax.op.multiply(mag, bb.emit(relax.op.sin(angle)))))
    if name in ("_to_copy", "to") and is_complex(node) and not is_complex(src):
        return _pair(bb, x, bb.emit(relax.op.zeros_like(x)))  # a real made complex
    if name in ("view_as_complex", "view_as_real", "clone", "alias", "contiguous",
                "lift_fresh_copy", "detach", "_to_copy", "to"):
        return x
    if name in ("view", "reshape", "_unsafe_view", "unsqueeze", "squeeze", "flatten"):
        return bb.emit(relax.op.reshape(x, [*_shape(node), 2]))
    if name == "expand":
        return bb.emit(relax.op.broadcast_to(x, [*_shape(node), 2]))
    if name == "repeat":
        return bb.emit(relax.op.tile(x, [*(int(r) for r in node.args[1]), 1]))
    if name == "permute":
        dims = [_axis(d, src) for d in node.args[1]]
        return bb.emit(relax.op.permute_dims(x, [*dims, len(dims)]))
    if name in ("abs", "angle"):
        re, im = _part(bb, x, 0), _part(bb, x, 1)
        if name == "angle":
            return bb.emit(relax.op.atan2(im, re))
        return bb.emit(relax.op.sqrt(bb.emit(relax.op.add(
            bb.emit(relax.op.multiply(re, re)), bb.emit(relax.op.multiply(im, im))))))
    if name == "index_select":
        return bb.emit(relax.op.take(x, importer.env[node.args[2]], axis=_axis(node.args[1], src)))
    if name == "select":
        axis = _axis(node.args[1], src)
        return bb.emit(relax.op.take(x, relax.const(int(node.args[2]), "int64"), axis=axis))
    if name == "slice":
        dim = _axis(node.args[1] if len(node.args) > 1 else 0, src)
        extent = _shape(src)[dim]
        start = node.args[2] if len(node.args) > 2 and node.args[2] is not None else 0
        end = node.args[3] if len(node.args) > 3 and node.args[3] is not None else extent
        step = node.args[4] if len(node.args) > 4 else 1
        return bb.emit(relax.op.strided_slice(x, [dim], [int(start)], [min(int(end), extent)],
                                              [int(step)]))
    return None


#: Ops (``node.target.__name__`` before the overload) that may read or make a complex tensor.
_ARITHMETIC = {"mul": _arithmetic("mul"), "add": _arithmetic("add"), "sub": _arithmetic("sub")}
_PAIR_OPS = frozenset({"complex", "polar", "view_as_complex", "view_as_real", "clone", "alias",
                       "contiguous", "lift_fresh_copy", "detach", "_to_copy", "to", "view",
                       "reshape", "_unsafe_view", "unsqueeze", "squeeze", "flatten", "expand",
                       "repeat", "permute", "select", "slice", "index_select", "abs", "angle"})


def _base(target: Any) -> str:
    name = getattr(target, "__name__", str(target))
    return name.split(".")[0]


def _touches_complex(node: Any) -> bool:
    return is_complex(node) or any(is_complex(a) for a in node.all_input_nodes)


class UnsupportedComplexOps(ValueError):
    """Ops of a program that read or make complex tensors and that the pairs cannot compute."""

    def __init__(self, ops: list[str]) -> None:
        super().__init__(f"no converter for {', '.join(ops)} on complex tensors")
        self.ops = ops


def unsupported_complex_ops(graph: Any) -> list[str]:
    """The ops of `graph` that read or make a complex tensor and that the pairs cannot
    compute (each name once, in graph order)."""
    names: list[str] = []
    for node in graph.nodes:
        if node.op != "call_function" or not _touches_complex(node):
            continue
        if node.target is operator.getitem:
            continue
        base = _base(node.target)
        if base not in _PAIR_OPS and base not in _ARITHMETIC and base not in FOURIER:
            names.append(getattr(node.target, "__name__", str(node.target)))
    return list(dict.fromkeys(names))


def store_complex_constants(exported: Any) -> None:
    """Each complex constant, buffer or parameter of `exported` stored as its pair (in place),
    its placeholder marked `PAIRED`."""
    kinds = torch.export.graph_signature.InputKind
    placeholders = {n.name: n for n in exported.graph.nodes if n.op == "placeholder"}
    for spec in exported.graph_signature.input_specs:
        store = exported.constants if spec.kind is kinds.CONSTANT_TENSOR else (
            exported.state_dict if spec.target in exported.state_dict else exported.constants)
        if spec.kind is kinds.USER_INPUT or spec.target not in store:
            continue
        value = store[spec.target]
        if isinstance(value, torch.Tensor) and value.is_complex():
            store[spec.target] = torch.view_as_real(value.detach()).clone()
            placeholders[spec.arg.name].meta[PAIRED] = True


def has_complex(graph: Any) -> bool:
    return any(_touches_complex(n) for n in graph.nodes if n.op == "call_function")


def complex_aware(convert_map: dict[str, Converter], channels_last: bool = False
                  ) -> dict[str, Converter]:
    """`convert_map` with every op a pair may flow through dispatching on its operands: the
    pair's version where one is complex, else the map's converter or the importer's own;
    with the FFTs (`fourier_pairs`, `channels_last` as the case's convolutions are)."""
    names = [f"{base}.{overload}" for base in (*_PAIR_OPS, *_ARITHMETIC)
             for overload in ("default", "Tensor", "int", "dim", "Scalar", "dims")]

    def wrap(name: str) -> Converter:
        ours = convert_map.get(name)
        base = name.split(".")[0]

        def convert(node: Any, importer: Any) -> Any:
            if _touches_complex(node):
                pair = _ARITHMETIC[base](node, importer) if base in _ARITHMETIC else _pair_op(
                    base, node, importer)
                if pair is not None:
                    return pair
            if ours is not None:
                return ours(node, importer)
            return default_converter(importer, name)(node)

        return convert

    return {**convert_map, **{name: wrap(name) for name in names},
            **fourier_converters(channels_last)}
