"""The ``nn.attention`` a matched attention chain becomes (RaiseAttention's rewrite).

`Match` is what RaiseAttention read off the model's chain; `raised` builds the op from it:
Q, K and V moved to BSHD (the permutes marked, so they cancel against the model's head split
and merge in the cleanup), the bias reshaped to broadcast against (batch, heads, L, S), and the
result brought back to the shape (and dtype) the chain's last product had.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from tvm import relax

from cl_validate.compile.passes.attention_heads import Fold
from cl_validate.ir import PASS, Part, known_shape, mark_origin, origin_mark

#: The mark of a permute this pass inserts (it cancels against the model's, or says who put it)
_MARK = origin_mark([Part(PASS, None, "attention raised from matmul/softmax/matmul")])


@dataclass
class Match:
    q: relax.Expr  # (..., L, E)
    kt: relax.Expr  # (..., E, S): Kᵀ, as the scores' matmul reads it
    v: relax.Expr  # (..., S, Dv), or (..., Dv, S) when transposed_out
    bias: relax.Expr | None
    scale: float
    transposed_out: bool  # the model computes (P Vᵀ)ᵀ = V' Pᵀ: out is (..., Dv, L)
    #: 3-D operands (N, L, E) taken as N heads of one batch, (1, L, N, E), not N batches of
    #: one head: the model transposed them from (L, N, E), which this form reads as it is
    heads3: bool = False
    consumed: tuple[relax.Var, ...] = ()  # the softmax it raises (not reported as left)
    #: a per-head factor of the scores (SwinV2's ``logit_scale.exp()``, XCiT's temperature:
    #: shape (..., H, 1, 1)), folded into q: (q·kᵀ)·c = (q·c)·kᵀ; and whether it divides
    q_factor: tuple[relax.Expr, bool] | None = None
    #: 3-D operands (B·H, L, E) folded from (B, H, L, E) by the model (`batch_heads`): read
    #: as B batches of H heads, so the model's head permutes cancel against the raised op's;
    #: the folds of q, k and v, where each is in sight (read before the fold)
    split: tuple[int, int] | None = None
    folds: tuple[Fold | None, Fold | None, Fold | None] = (None, None, None)
    #: q's axes as BSHD takes them, where the model stores its heads elsewhere than just
    #: before the rows (`attention_heads.memory_order`): the batch axes, the rows, the head
    #: axes, the features; None: every axis before the last three is batch, that one heads
    order: tuple[int, ...] | None = None


Emit = Callable[[relax.Expr], relax.Expr]


def _bshd(e: relax.Expr, emit: Emit, heads3: bool = False,
          split: tuple[int, int] | None = None) -> relax.Expr:
    """``(..., heads, L, E)`` (or ``(N, L, E)``: one head, N heads when `heads3`, or
    ``(B, H)`` = `split`) as BSHD."""
    shape = known_shape(e) or ()
    if len(shape) == 3 and split is not None:
        e = emit(relax.op.reshape(e, [*split, *shape[1:]]))
        return emit(mark_origin(relax.op.permute_dims(e, [0, 2, 1, 3]), _MARK))
    if len(shape) == 2:
        return emit(relax.op.reshape(e, [1, shape[0], 1, shape[1]]))
    if len(shape) == 3 and not heads3:
        return emit(relax.op.reshape(e, [shape[0], shape[1], 1, shape[2]]))
    if len(shape) == 3:
        e = emit(relax.op.reshape(e, [1, *shape]))
    if len(shape) > 4:
        e = emit(relax.op.reshape(e, [int(np.prod(shape[:-3])), *shape[-3:]]))
    return emit(mark_origin(relax.op.permute_dims(e, [0, 2, 1, 3]), _MARK))


def _swap(e: relax.Expr, emit: Emit) -> relax.Expr:
    n = len(known_shape(e) or ())
    return emit(mark_origin(relax.op.permute_dims(e, [*range(n - 2), n - 1, n - 2]), _MARK))


def _groups(order: Sequence[int]) -> tuple[list[int], list[int]]:
    """`order`'s batch axes (before the rows) and head axes (between the rows and the
    features)."""
    at = list(order).index(len(order) - 2)
    return list(order[:at]), list(order[at + 1:-1])


def _ordered(e: relax.Expr, order: Sequence[int], emit: Emit) -> relax.Expr:
    """``(..., L, E)`` as BSHD by `order` (batch axes, L, head axes, E): one permute, one
    reshape merging the batch axes and the head axes."""
    shape = known_shape(e) or ()
    batch, heads = _groups(order)
    e = emit(mark_origin(relax.op.permute_dims(e, list(order)), _MARK))
    return emit(relax.op.reshape(e, [int(np.prod([shape[a] for a in batch])), shape[-2],
                                     int(np.prod([shape[a] for a in heads])), shape[-1]]))


def _ordered_bias(bias: relax.Expr, order: Sequence[int], emit: Emit) -> relax.Expr:
    """A bias of the scores ``(..., L, S)`` (broadcast to q's batch axes) as (batch, heads,
    L, S) by `order`; `ordered_bias_fits` said it reshapes so."""
    n, given = len(order), known_shape(bias) or ()
    shape = [1] * (n - len(given)) + list(given)
    batch, heads = _groups(order)
    e = emit(relax.op.reshape(bias, shape)) if tuple(shape) != given else bias
    e = emit(relax.op.permute_dims(e, [*batch, *heads, n - 2, n - 1]))
    return emit(relax.op.reshape(e, [int(np.prod([shape[a] for a in batch])),
                                     int(np.prod([shape[a] for a in heads])),
                                     shape[n - 2], shape[n - 1]]))


def ordered_bias_fits(bias_shape: Sequence[int], q_shape: Sequence[int],
                      order: Sequence[int]) -> bool:
    """A bias of this shape broadcasts against (batch, heads, L, S) taken by `order`: its
    batch axes all full or all one, and so its head axes."""
    n = len(order)
    if len(bias_shape) > n:
        return False
    shape = [1] * (n - len(bias_shape)) + list(bias_shape)
    for axes in _groups(order):
        ones = [shape[a] == 1 for a in axes]
        if not (all(ones) or all(shape[a] == q_shape[a] for a in axes)):
            return False
    return True


def _raised_ordered(m: Match, q: relax.Expr, emit: Emit) -> relax.Expr:
    """The attention op over q, k and v taken by `m.order`, back in q's axis order."""
    order = m.order
    assert order is not None
    k = _ordered(_swap(m.kt, emit), order, emit)
    v = _ordered(_swap(m.v, emit) if m.transposed_out else m.v, order, emit)
    bias = None if m.bias is None else _ordered_bias(emit(m.bias), order, emit)
    out = emit(relax.op.nn.attention(_ordered(q, order, emit), k, v, bias=bias,
                                     scale=m.scale))
    qs = known_shape(q) or ()
    dv = (known_shape(out) or (0, 0, 0, 0))[3]
    dims = [qs[a] for a in order[:-1]] + [dv]
    res = emit(relax.op.reshape(out, dims))
    back = [order.index(i) for i in range(len(order))]
    if m.transposed_out:
        back[-2], back[-1] = back[-1], back[-2]
    return emit(mark_origin(relax.op.permute_dims(res, back), _MARK))


def raised(m: Match, out_shape: Sequence[int], emit: Emit,
            unfolded: Sequence[relax.Expr | None] = (None, None, None)) -> relax.Expr:
    """The attention op for `m`; `unfolded`: q, k, v read as (B, H, L, E) before the
    model folded B and H (`Fold.unfolded`), where they were."""
    q = m.q
    if m.q_factor is not None:  # per head: folded into q, before the heads move
        c, divides = m.q_factor
        q = emit((relax.op.divide if divides else relax.op.multiply)(q, c))
    if m.order is not None:
        res = _raised_ordered(m, q, emit)
        return res if known_shape(res) == tuple(out_shape) else \
            relax.op.reshape(res, list(out_shape))
    q = _bshd(unfolded[0] if unfolded[0] is not None else q, emit, m.heads3, m.split)
    k = _bshd(unfolded[1] if unfolded[1] is not None else _swap(m.kt, emit), emit, m.heads3,
              m.split)
    v = _bshd(unfolded[2] if unfolded[2] is not None else
              _swap(m.v, emit) if m.transposed_out else m.v, emit, m.heads3, m.split)
    bias = m.bias
    if bias is not None:  # broadcastable to (batch, heads, L, S), as the scores were
        bias = emit(bias)
        bshape = list(known_shape(bias) or ())
        qrank = len(known_shape(m.q) or ())
        if len(bshape) > 4:
            bshape = [int(np.prod(bshape[:-3])), *bshape[-3:]]
        elif len(bshape) == 3 and qrank == 3:
            lead = list(m.split) if m.split is not None and bshape[0] > 1 else [bshape[0], 1]
            bshape = [*lead, bshape[1], bshape[2]]
        if len(bshape) < 4:
            bshape = [1] * (4 - len(bshape)) + bshape
        if tuple(bshape) != known_shape(bias):
            bias = emit(relax.op.reshape(bias, bshape))
    out = emit(relax.op.nn.attention(q, k, v, bias=bias, scale=m.scale))
    qs = known_shape(m.q) or ()
    if m.heads3 or m.split is not None:  # (B, L, H, Dv) back to (B·H, L, Dv), or (B·H, Dv, L)
        res = emit(mark_origin(relax.op.permute_dims(out, [0, 2, 3, 1] if m.transposed_out
                                                     else [0, 2, 1, 3]), _MARK))
    elif len(qs) <= 3:  # one head: (N, L, 1, Dv) is (N, L, Dv)
        dv = (known_shape(out) or (0, 0, 0, 0))[3]
        res = emit(relax.op.reshape(out, [*qs[:-1], dv]))
        res = _swap(res, emit) if m.transposed_out else res
    else:  # BSHD back to (..., heads, L, Dv), or (..., heads, Dv, L)
        back = [0, 2, 3, 1] if m.transposed_out else [0, 2, 1, 3]
        res = emit(mark_origin(relax.op.permute_dims(out, back), _MARK))
    if known_shape(res) != tuple(out_shape):
        res = relax.op.reshape(res, list(out_shape))
    return res
