"""Softmaxes between two matmuls that RaiseAttention left as they are, and why: what the
kernel list says about attention-like code the pass did not raise."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from tvm import relax

from cl_validate.ir import known_shape, op_name, strided_slice_args

_MATMUL, _SOFTMAX = "relax.matmul", "relax.nn.softmax"
_LINEAR = "a Linear on the scores"


@dataclass(frozen=True)
class Left:
    """A softmax between two matmuls that stayed as it is, and why."""

    source: str  # the softmax's binding name
    why: str


def unmatched_softmaxes(values: dict[relax.Var, relax.Expr], taken: set[relax.Var],
                        reported: set[str], weights: set[relax.Var] | None = None,
                        reasons: dict[str, str] | None = None,
                        spelled: set[relax.Var] | None = None) -> list[Left]:
    """Softmaxes between two matmuls (within a few ops) that no match took, each with where
    the match of its scores stopped (`reasons`, by softmax; said only here, where the softmax
    is between two products: a softmax over a convolution's map is no attention), else with
    what stands between it and the matmuls: ops that are not attention's computation
    (EfficientFormerV2's talking heads: a conv on the heads), a Linear on the scores (CaiT's
    talking heads: the matmul next to the softmax multiplies by a weight), or, when neither,
    that the chain does not read as attention. Computations on weights alone (SwinV2's
    ``logit_scale.exp()``) are not named: they are the model's constants, not in between.
    `spelled`: softmaxes written out that were left as written (said with their reason)."""
    weights, spelled, reasons = weights or set(), spelled or set(), reasons or {}
    users: dict[relax.Var, list[relax.Var]] = {}
    for var, value in values.items():
        for arg in getattr(value, "args", []):
            if isinstance(arg, relax.Var):
                users.setdefault(arg, []).append(var)

    def path(start: relax.Var, step: Callable[[relax.Var], list[relax.Var]]
             ) -> list[str] | None:
        """The ops between `start` and the nearest matmul of two run-time values (a Linear,
        a matmul by a weight, is one of the ops: CaiT's talking heads); None when no such
        matmul is near."""
        seen: list[str] = []
        frontier = [start]
        for _ in range(_NEAR):
            frontier = [n for v in frontier for n in step(v) if n not in weights]
            for v in frontier:
                name = op_name(values.get(v)) or ""
                if name == _MATMUL and any(isinstance(a, relax.Var) and a in weights
                                           for a in values[v].args):  # type: ignore[attr-defined]
                    seen.append(_LINEAR)
                elif name == _MATMUL:
                    return seen
                elif name and name not in _QUIET:
                    seen.append(name)
        return None

    def up(v: relax.Var) -> list[relax.Var]:
        return [a for a in getattr(values.get(v), "args", []) if isinstance(a, relax.Var)]

    out = []
    for var, value in values.items():
        if (op_name(value) != _SOFTMAX and var not in spelled) or var in taken or \
                var.name in reported:
            continue
        before, after = path(var, up), path(var, lambda v: users.get(v, []))
        if before is None or after is None:
            continue  # not between two matmuls of run-time values: not attention
        ops = sorted({o.removeprefix("relax.") for o in before + after})
        if reasons.get(var.name):
            out.append(Left(var.name, reasons[var.name]))
            continue
        rank, axis = len(known_shape(value.args[0]) or ()), int(value.attrs.axis)  # type: ignore[union-attr]
        if ops:
            out.append(Left(var.name, f"{', '.join(ops)} between the matmuls and the softmax "
                                      "(not attention's computation)"))
        elif rank and axis % rank != rank - 1:
            out.append(Left(var.name, f"a softmax over axis {axis % rank} of {rank}, not over "
                                      "the keys (the last)"))
        else:
            out.append(Left(var.name, "the matmuls and the softmax do not read as "
                                      "softmax(q·kᵀ·scale + bias)·v"))
    return out


#: How many bindings away a matmul may be for a softmax to count as attention's
#: (a Linear on the scores with the views its import adds is five)
_NEAR = 12
#: Ops that do not change what a chain computes (views, casts): not named as in between
_QUIET = frozenset({"relax.reshape", "relax.broadcast_to", "relax.permute_dims",
                    "relax.astype", "relax.multiply", "relax.divide", "relax.add",
                    "relax.squeeze", "relax.expand_dims", "relax.nn.softmax", "relax.take"})

#: The reason a chain whose scores sum over the tokens is left as matmuls
OVER_THE_TOKENS = ("the scores sum over the tokens, not the channels (attention across "
                   "channels: XCiT, Restormer, DANet, EdgeNeXt): left as matmuls, which read "
                   "q, k and v where they are, where the attention op would transpose each "
                   "whole (its head dimension, the tokens, innermost)")
#: Ops that keep every axis where it is (their output has the shape of the operand followed)
_SAME_PLACE = frozenset({"relax.multiply", "relax.divide", "relax.add", "relax.subtract",
                         "relax.astype", "relax.nn.layer_norm", "relax.nn.group_norm",
                         "relax.nn.batch_norm", "relax.nn.relu", "relax.nn.gelu",
                         "relax.nn.silu", "relax.sigmoid", "relax.tanh"})


def _source_axes(src: Sequence[int], dst: Sequence[int], axes: set[int]) -> set[int] | None:
    """The axes of a reshape's input (shape `src`) that hold `axes` (a run of its output's,
    shape `dst`): whole input axes merged, or one input axis split; None when the run
    straddles an input axis."""
    lo, hi = min(axes), max(axes)
    inner, outer = int(np.prod(dst[hi + 1:])), int(np.prod(dst[lo:]))
    held, whole = set(), True
    for j in range(len(src)):
        j_in, j_out = int(np.prod(src[j + 1:])), int(np.prod(src[j:]))
        if src[j] == 1 or j_out <= inner or j_in >= outer:
            continue
        held.add(j)
        whole = whole and inner <= j_in and j_out <= outer
    return held if held and (whole or len(held) == 1) else None


def sums_over_tokens(value_of: Callable[[relax.Expr], relax.Expr | None], e: relax.Expr
                     ) -> bool:
    """`e`, a score product's left operand ``(..., L, E)``, sums over tokens: its last axis
    traces (through views, permutes, slices, a split and ops that keep every axis in place)
    to the rows of a matmul (a Linear's tokens) or to the H and W of a convolution's NCHW
    output, not to channels. Attention across channels (XCiT's cross-covariance attention,
    Restormer's transposed attention, DANet's channel attention): raised, q, k and v would
    each be transposed whole, the tokens innermost; as matmuls they are read in place."""
    axes = {len(known_shape(e) or (0,)) - 1}
    for _ in range(3 * _NEAR):
        value = value_of(e) if isinstance(e, relax.Var) else None
        if isinstance(value, relax.TupleGetItem):  # a part of a split: axes stay put
            value = value_of(value.tuple_value) if isinstance(value.tuple_value, relax.Var) \
                else None
            if op_name(value) != "relax.split" or int(value.attrs.axis) in axes:  # type: ignore[union-attr]
                return False
            e = value.args[0]  # type: ignore[union-attr]
            continue
        name, shape = op_name(value), known_shape(e)
        if value is None or shape is None:
            return False
        if name == _MATMUL:
            return max(axes) == len(shape) - 2  # the rows (tokens), not the batch axes
        if name == "relax.nn.conv2d":
            return str(value.attrs.data_layout) == "NCHW" and axes <= {2, 3}  # type: ignore[union-attr]
        arg = value.args[0]  # type: ignore[union-attr]
        if name == "relax.permute_dims":
            order = [int(a) for a in value.attrs.axes]  # type: ignore[union-attr]
            axes = {order[a] for a in axes}
        elif name in ("relax.reshape", "relax.squeeze", "relax.expand_dims",
                      "relax.broadcast_to"):
            src = known_shape(arg)
            if src is None or (name == "relax.broadcast_to" and tuple(src) != tuple(shape)):
                return False
            found = _source_axes(src, shape, axes)
            if found is None:
                return False
            axes = found
        elif name == "relax.strided_slice":
            sliced = strided_slice_args(value)  # type: ignore[arg-type]
            if sliced is None or any(int(a) % len(shape) in axes for a in sliced[0]):
                return False
        elif name in _SAME_PLACE:
            same = [a for a in value.args if known_shape(a) == shape]  # type: ignore[union-attr]
            if not same:
                return False
            arg = same[0]
        else:
            return False
        if max(axes) - min(axes) + 1 != len(axes):
            return False
        e = arg
    return False


_Uses = dict[relax.Var, list[relax.Var | None]]


def other_readers(values: dict[relax.Var, relax.Expr], uses: _Uses, e: relax.Expr) -> str:
    """Why attention probabilities `e` are not the chain's alone, as the note says it: the
    model returns them (attention weights), or which ops read them (Nyströmformer's
    pseudo-inverse reads its softmax in six products)."""
    users = uses.get(e, []) if isinstance(e, relax.Var) else []
    if any(u is None or (isinstance(values.get(u), relax.Tuple) and None in uses.get(u, []))
           for u in users):
        return "its attention probabilities are also returned by the model (attention weights)"
    ops = Counter(_reader(values, uses, u) for u in users if u is not None)
    read = ", ".join(("" if n == 1 else f"{n}x ") + op.removeprefix("relax.")
                     for op, n in ops.most_common())
    return f"its attention probabilities are read by {len(users)} ops ({read}), not by one " \
           "product with v alone"


def _reader(values: dict[relax.Var, relax.Expr], uses: _Uses, u: relax.Var) -> str:
    """The op that reads a value through `u`: `u`'s own, or past the views ``aten.matmul``
    decomposes into (a broadcast, a reshape) that only one op reads."""
    while op_name(values.get(u)) in ("relax.broadcast_to", "relax.reshape"):
        after = uses.get(u, [])
        if len(after) != 1 or after[0] is None:
            break
        u = after[0]
    return op_name(values.get(u)) or "a tuple"
