"""Where a 3-D attention operand's batch came from: a batch·heads fold seen through.

Models that fold the heads into the batch (transformers' SAM: ``qkv.permute(2, 0, 3, 1,
4).reshape(3, B*H, N, D).unbind(0)``, then ``(attn @ v).view(B, H, ...)``) hand the attention
``(B·H, N, D)`` operands. Raised as B·H batches of one head, the model's head permutes cannot
cancel against anything; raised as B batches of H heads, read from the ``(..., B, H, N, D)``
the fold started from (the same unbind views, taken before the fold), they do. The sums are
the same either way: one (batch, head) slice is one softmax over the same rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tvm import relax

from cl_validate.ir import known_shape, op_name, strided_slice_args

#: Views an operand reaches the attention through from the fold: unbind's slice and squeeze
#: of a leading axis, and reshapes of the leading axes
_THROUGH = frozenset({"relax.squeeze", "relax.strided_slice", "relax.reshape"})
Emit = Callable[[relax.Expr], relax.Expr]


@dataclass(frozen=True)
class Fold:
    """An operand ``(B·H, N, D)`` that is views of ``reshape(source, (..., B·H, N, D))``."""

    split: tuple[int, int]  # (B, H)
    source: relax.Expr  # (..., B, H, N, D)
    views: tuple[relax.Call, ...]  # from the fold down to the operand

    def unfolded(self, source: relax.Expr, emit: Emit) -> relax.Expr:
        """The operand as ``(B, H, N, D)``: the same views of `source` (the fold's source,
        as the caller's rewrite has it), on the leading axes they already took."""
        e = source
        for view in self.views:
            name = op_name(view)
            if name == "relax.strided_slice":
                e = emit(relax.Call(view.op, [e, *view.args[1:]], view.attrs))
            elif name == "relax.squeeze":
                e = emit(relax.op.squeeze(e, [int(a) for a in view.attrs.axis]))
            else:
                out = known_shape(view) or ()
                e = emit(relax.op.reshape(e, [*out[:-3], *self.split, *out[-2:]]))
        return e


def batch_heads(value_of: Callable[[relax.Expr], relax.Expr | None],
                e: relax.Expr) -> Fold | None:
    """The fold behind the 3-D operand `e` ``(B·H, N, D)``: a reshape of ``(..., B, H, N,
    D)`` into ``(..., B·H, N, D)`` with H > 1, reached through views of the leading axes
    alone; None when no such fold is in sight."""
    shape = known_shape(e)
    if shape is None or len(shape) != 3:
        return None
    folded, tail = shape[0], shape[1:]
    views: list[relax.Call] = []
    for _ in range(8):  # unbind is two views, a head split one more: a few steps suffice
        value = value_of(e)
        name = op_name(value)
        if name not in _THROUGH:
            return None
        assert isinstance(value, relax.Call)
        src = value.args[0]
        a, b = known_shape(src), known_shape(e)
        if a is None or b is None or len(a) < 3 or a[-2:] != tail or b[-2:] != tail or \
                b[-3] != folded:
            return None
        if name == "relax.reshape" and len(a) == len(b) + 1 and len(a) >= 4 and \
                a[-4] * a[-3] == folded and a[:-4] == b[:-3]:
            # (B, 1) is B batches of one head, as the operand reads without the fold
            if a[-3] == 1:
                return None
            return Fold((a[-4], a[-3]), src, tuple(reversed(views)))
        if a[-3] != folded:
            return None  # a view that moves the batch axis: not one the fold went through
        if name == "relax.strided_slice":
            args = strided_slice_args(value)
            if args is None or any(int(ax) % len(a) >= len(a) - 3 for ax in args[0]):
                return None  # a slice of the batch, the rows or the features: not unbind's
        if name == "relax.squeeze" and (value.attrs.axis is None or any(
                int(ax) % len(a) >= len(a) - 3 for ax in value.attrs.axis)):
            return None
        views.append(value)
        e = src
    return None


def channel_heads(value_of: Callable[[relax.Expr], relax.Expr | None],
                  e: relax.Expr) -> tuple[int, int] | None:
    """``(B, H)`` for a 3-D operand ``(B·H, ., .)`` whose leading axis a reshape made of a
    map's batch and the heads cut from the front of its channels (timm's BottleneckAttn:
    ``q.reshape(B * heads, dim_head, -1).transpose(-1, -2)`` on an NCHW conv output), reached
    through transposes that keep that axis first; None where no such reshape is in sight.
    The operand read as (B, H, ., .) is a view of it whatever its source: the split only
    says which grouping the attention op gets, heads where the channels put them."""
    shape = known_shape(e)
    if shape is None or len(shape) != 3:
        return None
    folded = shape[0]
    for _ in range(4):
        value = value_of(e)
        name = op_name(value)
        if name == "relax.permute_dims":
            assert isinstance(value, relax.Call)
            if int(value.attrs.axes[0]) != 0:
                return None
            e = value.args[0]
            continue
        if name != "relax.reshape":
            return None
        assert isinstance(value, relax.Call)
        src, out = known_shape(value.args[0]), known_shape(e)
        if src is None or out is None or len(src) < 3 or out[0] != folded or \
                src[0] >= folded or folded % src[0] or src[1] % (folded // src[0]):
            return None
        return (src[0], folded // src[0])
    return None


#: Ops that keep every element where it was, whatever else they read: a scale, a cast
_SAME_PLACE = frozenset({"relax.multiply", "relax.divide", "relax.astype"})


def memory_order(value_of: Callable[[relax.Expr], relax.Expr | None],
                 e: relax.Expr) -> tuple[int, ...] | None:
    """The order `e`'s axes are stored in where the model permuted them: `e` read back
    through a scale or a cast by a scalar and an unbind (a one-index slice, the axis then
    squeezed or reshaped away) to the ``permute_dims`` it is a view of, its axes sorted by
    the axis each is in the permute's source. None where no permute is in sight.

    NesT's heads, ``qkv.reshape(B, T, N, 3, H, D).permute(3, 0, 4, 1, 2, 5).unbind(0)``,
    give q as (B, H, T, N, D) stored (B, T, N, H, D): order (0, 2, 3, 1, 4), the heads
    after the rows, where the attention op wants them."""
    shape = known_shape(e)
    if shape is None:
        return None
    where = list(range(len(shape)))  # e's axis i is axis where[i] of the tensor reached
    for _ in range(8):
        value = value_of(e)
        name = op_name(value)
        if name == "relax.permute_dims":
            axes = [int(a) for a in value.attrs.axes]  # type: ignore[union-attr]
            placed = [axes[w] for w in where]
            return tuple(sorted(range(len(shape)), key=lambda i: placed[i]))
        if name in _SAME_PLACE:
            assert isinstance(value, relax.Call)
            src, other = value.args[0], (value.args[1] if len(value.args) > 1 else None)
            if known_shape(src) != known_shape(e) or (
                    other is not None and int(np.prod(known_shape(other) or (0,))) != 1):
                return None
            e = src
            continue
        if name not in ("relax.squeeze", "relax.reshape"):
            return None
        assert isinstance(value, relax.Call)
        sliced = value.args[0]
        cut = value_of(sliced)
        if op_name(cut) != "relax.strided_slice":
            return None
        assert isinstance(cut, relax.Call)
        args = strided_slice_args(cut)
        src_shape, now = known_shape(cut.args[0]), known_shape(e)
        if args is None or len(args[0]) != 1 or src_shape is None or now is None:
            return None
        axis = int(args[0][0]) % len(src_shape)
        if known_shape(sliced) != (*src_shape[:axis], 1, *src_shape[axis + 1:]) or \
                (*src_shape[:axis], *src_shape[axis + 1:]) != now:
            return None  # not unbind's one index with that axis dropped
        where = [w + (w >= axis) for w in where]
        e = cut.args[0]
    return None
