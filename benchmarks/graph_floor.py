"""A model's layout floor derived from its exported graph alone: no pass, no attribution, no
label of cl_validate's takes part.

The question: with the convolutions in NHWC (the goal), how many runtime data movements does
the model's computation itself require, whatever layout every other tensor is stored in? The
graph (``torch.export``, before any decomposition) is cut into *edges*: from a producer that
fixes how its output is stored to a consumer that fixes how it reads its input, through ops
that only move data or do not care about layout. An edge needs a data movement (one
transform kernel) when no storage the producer may write and the consumer may read makes the
consumer's read a pass over the producer's memory in increasing address order — i.e. a view
(reshape, slices, broadcast) rather than a reorder. This is checked by simulation: the
producer's element addresses as a numpy array, carried through the edge's ops (permutes,
views, slices, unbind, roll), read in the consumer's storage order, and tested for
monotonicity.

What fixes a layout (the model of the hardware kernels, stated so it can be argued with):

- convolutions, pooling, batch/group norm, resizes and grid sampling work on NCHW maps
  stored NHWC (the pipeline's goal); a 1-D convolution on (N, C, L) stored NLC (the
  pipeline's Conv1d follows its channels-last conv2d), a norm on (N, C, L) in either order
  (a per-channel affine);
- Linear / ``mm`` / ``addmm``: tokens row-major, each token's features contiguous in any
  order (the weight's rows are permuted once, when it is compiled: a flattened NHWC map
  feeds a classifier as it is);
- batched matmul: any order of the axes with one of the two matrix axes innermost (a
  strided batched GEMM, an operand transposed or not);
- ``scaled_dot_product_attention``: any order of (batch, heads, sequence), the head dimension
  innermost (an attention kernel reads the heads where they are);
- graph inputs and outputs: as the case declares them (4-D maps NCHW unless declared NHWC);
- elementwise ops, softmax, layer norm, reductions, ``roll``: no layout of their own (they
  run in whatever layout they are given); an ``einsum`` of one operand that only reorders
  its axes (DiT's unpatchify, ``'nhwpqc->nchpwq'``) is a permute, and so is an
  ``nn.Unfold`` whose patches tile the map (TNT's pixels: kernel equal to stride, no
  padding); concatenation, overlapping patches (a gather) and
  anything else unknown: cuts the edge without a constraint (this makes the floor a lower
  bound).

    python benchmarks/graph_floor.py [-k NAME]    # the attention zoo's floors
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent)]

#: aten ops that only move data or change the view (their result is simulated exactly)
MOVE = {"view", "reshape", "_unsafe_view", "flatten", "unflatten", "squeeze", "unsqueeze",
        "permute", "transpose", "t", "swapaxes", "movedim", "expand", "clone", "contiguous",
        "alias", "detach", "slice", "select", "narrow", "split", "split_with_sizes", "unbind",
        "chunk", "roll", "getitem", "_to_copy", "to", "lift_fresh_copy", "dropout", "im2col"}
#: aten ops without a layout of their own (elementwise; an axis they are told)
FREE = {"add", "sub", "mul", "div", "relu", "gelu", "silu", "sigmoid", "tanh", "neg", "exp",
        "log", "sqrt", "rsqrt", "pow", "clamp", "hardtanh", "hardswish", "hardsigmoid",
        "leaky_relu", "elu", "abs", "where", "softmax", "_softmax", "log_softmax",
        "layer_norm", "native_layer_norm", "mean", "sum", "amax", "amin", "rsub", "reciprocal",
        "masked_fill", "erf", "sin", "cos", "maximum", "minimum"}
#: aten ops on NCHW maps (stored NHWC): their 4-D tensor arguments and results
MAP = {"conv1d", "conv2d", "convolution", "_convolution", "max_pool2d", "avg_pool2d",
       "adaptive_avg_pool2d", "_native_batch_norm_legit_no_training", "batch_norm",
       "group_norm", "native_group_norm", "instance_norm", "upsample_bilinear2d",
       "upsample_nearest2d", "grid_sampler_2d", "grid_sampler", "pixel_shuffle"}
TOKENS = {"linear", "mm", "addmm"}
BATCHED = {"matmul", "bmm", "baddbmm"}
ATTENTION = {"scaled_dot_product_attention"}


def _name(node: Any) -> str:
    target = getattr(node, "target", None)
    return str(getattr(target, "__name__", target)).split(".")[0]


def _shape(node: Any) -> tuple[int, ...] | None:
    val = node.meta.get("val") if hasattr(node, "meta") else None
    shape = getattr(val, "shape", None)
    try:
        return tuple(int(d) for d in shape) if shape is not None else None
    except (TypeError, ValueError):
        return None


Orders = list[tuple[int, ...]]  # storage orders: axis i of storage is logical axis order[i]


#: MAP ops that are a per-channel affine: on (N, C, L) any order will do
_AFFINE = {"_native_batch_norm_legit_no_training", "batch_norm", "group_norm",
           "native_group_norm", "instance_norm"}


def _orders(kind: str, rank: int, declared: str = "NCHW", op: str = "") -> Orders:
    if kind == "map" and rank == 4:
        return [(0, 2, 3, 1)]
    if kind == "map" and rank == 3:
        return [(0, 1, 2), (0, 2, 1)] if op in _AFFINE else [(0, 2, 1)]
    if kind == "boundary":
        return [(0, 2, 3, 1)] if rank == 4 and declared == "NHWC" else [tuple(range(rank))]
    if kind == "attention" and rank >= 2:
        return [(*p, rank - 1) for p in itertools.permutations(range(rank - 1))]
    if kind == "batched" and rank >= 2:  # a strided batched GEMM: one matrix axis innermost
        return [p for p in itertools.permutations(range(rank)) if p[-1] >= rank - 2]
    return [tuple(range(rank))]


def _role(node: Any) -> str | None:
    """How the node fixes layouts: map, tokens, batched, attention; None: it does not."""
    name = _name(node)
    if name in MAP:
        return "map"
    if name in TOKENS:
        return "tokens"
    if name in BATCHED:
        return "batched"
    if name in ATTENTION:
        return "attention"
    return None


def _simulate(node: Any, args: list[Any]) -> np.ndarray | None:
    """The node applied to address arrays (``args`` in its positions: arrays or constants)."""
    import torch

    name = _name(node)
    if name == "getitem":
        return args[0][args[1]]
    tensors = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
    kwargs = {k: v for k, v in node.kwargs.items() if not hasattr(v, "meta")}
    if name in ("_to_copy", "to", "dropout", "lift_fresh_copy"):
        return args[0]
    if name == "im2col":
        return _patches(*args)
    try:
        out = node.target(*tensors, **kwargs)
    except Exception:
        return None
    if isinstance(out, (list, tuple)):
        return [o.numpy() for o in out]  # type: ignore[return-value]
    return out.numpy() if hasattr(out, "numpy") else None


@dataclass
class Edge:
    producer: str
    consumer: str
    needs_movement: bool
    #: where the movement is: the last of the model's permutes on the way, else the edge
    #: itself (a graph boundary); the floor counts each once
    culprit: str = ""


def edges(ep: Any, declared_in: Sequence[str], declared_out: Sequence[str]) -> list[Edge]:
    """Every producer → consumer edge of the exported program's graph, and whether it needs a
    data movement whatever the free layouts are."""
    graph = ep.graph
    sig = ep.graph_signature
    user_inputs = list(sig.user_inputs)
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    users: dict[Any, list[Any]] = {n: list(n.users) for n in graph.nodes}
    output = next(n for n in graph.nodes if n.op == "output")
    outs = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else [
        output.args[0]]
    found: list[Edge] = []

    def producers() -> Iterator[tuple[Any, str, str]]:
        for i, name in enumerate(user_inputs):
            yield placeholders[name], "boundary", declared_in[i] if i < len(declared_in) \
                else "NCHW"
        for n in graph.nodes:
            role = _role(n)
            if role is not None and n.op == "call_function":
                yield n, role, ""

    for prod, kind, declared in producers():
        shape = _shape(prod)
        if shape is None or 0 in shape:
            continue
        for order in _orders(kind, len(shape), declared, _name(prod)):
            addr = np.arange(int(np.prod(shape))).reshape([shape[a] for a in order])
            addr = addr.transpose(np.argsort(order))  # logical view of the stored addresses
            _walk(prod, addr, users, outs, declared_out, found, prod.name, order)
    # an edge is free if any producer storage made it free
    merged: dict[tuple[str, str], Edge] = {}
    for e in found:
        key = (e.producer, e.consumer)
        if key not in merged or not e.needs_movement:
            merged[key] = e
    return list(merged.values())


_PERMUTING = {"permute", "transpose", "t", "swapaxes", "movedim", "pixel_shuffle", "im2col"}


def _walk(node: Any, addr: Any, users: dict[Any, list[Any]], outs: list[Any],
          declared_out: Sequence[str], found: list[Edge], origin: str,
          order: tuple[int, ...], depth: int = 0, last: str = "") -> None:
    if depth > 64:
        return
    for user in users.get(node, []):
        if user.op == "output":
            i = outs.index(node) if node in outs else 0
            rank = addr.ndim
            _judge(addr, _orders("boundary", rank, declared_out[i] if i < len(declared_out)
                                 else "NCHW"), found, origin, f"output {i}", last)
            continue
        name = _name(user)
        role = _role(user)
        if role is not None:
            position = next(i for i, a in enumerate(user.args) if a is node) \
                if node in user.args else 0
            if role == "map" and position > 0 and name != "grid_sampler_2d":
                continue  # a weight argument
            if role == "tokens":
                _judge_tokens(addr, found, origin, f"{user.name} ({name})", last)
            else:
                _judge(addr, _orders(role, addr.ndim, op=name), found, origin,
                       f"{user.name} ({name})", last)
            continue
        if name == "einsum":
            moved = _reordering_einsum(user, node, addr)
            if moved is not None:
                _walk(user, moved, users, outs, declared_out, found, origin, order,
                      depth + 1, user.name)
            continue
        here = user.name if name in _PERMUTING else last
        if name in MOVE or name in FREE:
            args = [addr if a is node else (None if hasattr(a, "meta") else a)
                    for a in user.args]
            if name in FREE:
                nxt = addr if _shape(user) == addr.shape else None
                if nxt is None and name in ("mean", "sum", "amax", "amin"):
                    continue  # a reduction to another shape: its result has no layout yet
            else:
                if any(a is None for a in args):
                    continue
                nxt = _simulate(user, args)
            if isinstance(nxt, list):  # split / unbind: each part through its getitem
                for g in users.get(user, []):
                    if _name(g) == "getitem":
                        _walk(g, nxt[g.args[1]], users, outs, declared_out, found, origin,
                              order, depth + 1, here)
                continue
            if nxt is not None:
                _walk(user, nxt, users, outs, declared_out, found, origin, order, depth + 1,
                      here)
        # anything else (cat, index, embedding, ...): the edge ends without a constraint


def _patches(addr: np.ndarray, kernel: Sequence[int], dilation: Sequence[int],
             padding: Sequence[int], stride: Sequence[int]) -> np.ndarray | None:
    """`addr` through ``nn.Unfold`` (``im2col``) where the patches tile the map (kernel equal
    to stride, no padding or dilation): a reorder, (N, C, H, W) to (N, C·kh·kw, L); None for
    overlapping or padded patches (a gather, which ends the edge)."""
    kh, kw = kernel
    if tuple(stride) != (kh, kw) or any(padding) or tuple(dilation) != (1, 1) or addr.ndim != 4:
        return None
    n, c, h, w = addr.shape
    if h % kh or w % kw:
        return None
    tiles = addr.reshape(n, c, h // kh, kh, w // kw, kw).transpose(0, 1, 3, 5, 2, 4)
    return tiles.reshape(n, c * kh * kw, (h // kh) * (w // kw))


def _reordering_einsum(user: Any, node: Any, addr: np.ndarray) -> np.ndarray | None:
    """`addr` through ``einsum(eq, node)`` where the equation only reorders the axes (one
    operand, each index once on either side); None for any other einsum (a product, a
    trace, a sum), which ends the edge."""
    eq, operands = (*user.args, None, None)[:2]
    if not isinstance(eq, str) or not isinstance(operands, (list, tuple)) or \
            len(operands) != 1 or operands[0] is not node or "->" not in eq:
        return None
    src, dst = (side.replace(" ", "") for side in eq.split("->"))
    if not (src.isalpha() and len(set(src)) == len(src) == len(dst) == addr.ndim
            and sorted(src) == sorted(dst)):
        return None
    return addr.transpose([src.index(c) for c in dst])


def _judge(addr: np.ndarray, orders: Orders, found: list[Edge], origin: str,
           consumer: str, last: str) -> None:
    """Free if, read in one of the consumer's storage orders, the addresses never go back."""
    free = any(bool(np.all(np.diff(addr.transpose(o).ravel()) >= 0)) for o in orders
               if len(o) == addr.ndim)
    found.append(Edge(origin, consumer, not free, last or f"{origin} -> {consumer}"))


def _judge_tokens(addr: np.ndarray, found: list[Edge], origin: str, consumer: str,
                  last: str) -> None:
    """A Linear reads each token (the last axis) as one contiguous block, in whatever order
    within it its weight's rows are permuted to; the tokens in order."""
    rows = np.sort(addr.reshape(-1, addr.shape[-1]) if addr.ndim else addr.reshape(1, 1),
                   axis=1)
    free = bool(np.all(np.diff(rows, axis=1) == 1)) and bool(np.all(np.diff(rows[:, 0]) >= 0))
    found.append(Edge(origin, consumer, not free, last or f"{origin} -> {consumer}"))


def floor(model: Any, example: Any, declared_in: Sequence[str] = ("NCHW",),
          declared_out: Sequence[str] = ("NCHW",)) -> tuple[int, list[Edge]]:
    """The floor of `model` on `example` (an NCHW image), and the edges that need a movement."""
    import torch

    with torch.no_grad():
        ep = torch.export.export(model.eval(), (example,))
    need = [e for e in edges(ep, declared_in, declared_out) if e.needs_movement]
    return len({e.culprit for e in need}), need


def main(models: dict[str, Callable[[], Any]] | None = None) -> None:
    import warnings

    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", dest="pattern", action="append")
    ap.add_argument("--size", type=int, default=32)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    if models is None:
        from wild_zoo import attention

        models = attention.MODELS
    for name, factory in models.items():
        if args.pattern and not any(p in name for p in args.pattern):
            continue
        torch.manual_seed(0)
        x = torch.randn(1, 3, args.size, args.size)
        n, need = floor(factory(), x)
        why = "; ".join(sorted({e.culprit for e in need}))
        print(f"{name:<20} floor {n}   {why}")


if __name__ == "__main__":
    main()
