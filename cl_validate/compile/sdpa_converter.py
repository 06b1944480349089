"""The converter of ``F.scaled_dot_product_attention`` (``custom_convert_map``): Relax's
``nn.attention`` on BSHD operands, with the scale, boolean and broadcast masks, grouped K/V
heads and K/V batches of one that TVM 0.27's converter drops or refuses.

Operands of five or more axes (Hiera's windows and heads: ``(B, heads, windows, L, E)``) have
several batch axes, and Relax's BSHD may take any of them as its B or its H: the grouping
follows where the query's data lies (`_storage_order`: through the model's permute of its head
split, and the takes, slices, squeezes, reductions and splitting views after it), so the
permutes the import adds undo the model's own instead of adding transposes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import relax

from cl_validate.compile.passes.attention_left import sums_over_tokens
from cl_validate.ir import is_tensor_constant, op_name


def static_dims(expr: Any) -> list[int] | None:
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    if shape is None:
        return None
    try:
        return [int(d) for d in shape]
    except (TypeError, ValueError):  # a symbolic dimension
        return None


def _storage_order(bb: Any, x: Any) -> list[int] | None:
    """The order `x`'s axes lie in memory, outermost first, where `x` is a permute (of a
    tensor taken as contiguous) seen through takes of one index, squeezes, splits and
    slices; None where not seen."""
    value: Any = bb.lookup_binding(x) if isinstance(x, relax.Var) else None
    if isinstance(value, relax.TupleGetItem):  # a part of a split keeps its axes
        tup = bb.lookup_binding(value.tuple_value) \
            if isinstance(value.tuple_value, relax.Var) else None
        if isinstance(tup, relax.Tuple):  # a converter's (values, indices)
            return _storage_order(bb, tup.fields[value.index])
        value = tup
    name = op_name(value)
    if name is None:
        return None
    attrs = value.attrs
    if name == "relax.permute_dims" and attrs.axes is not None:
        axes = [int(a) for a in attrs.axes]
        return sorted(range(len(axes)), key=axes.__getitem__)
    if name in ("relax.strided_slice", "relax.split"):
        return _storage_order(bb, value.args[0])
    if name == "relax.reshape":
        return _split_order(bb, value)
    gone: list[int] = []
    if name == "relax.take" and is_tensor_constant(value.args[1]) \
            and value.args[1].ty.ndim == 0 and attrs.axis is not None:
        gone = [int(attrs.axis)]
    elif (name == "relax.squeeze" or (name in _REDUCTIONS and not attrs.keepdims)) \
            and attrs.axis is not None:
        gone = [int(a) for a in attrs.axis]
    inner = _storage_order(bb, value.args[0]) if gone else None
    if inner is None:
        return None
    rank = len(inner)
    gone = [a % rank for a in gone]
    return [t - sum(g < t for g in gone) for t in inner if t not in gone]


_REDUCTIONS = frozenset(f"relax.{n}" for n in ("max", "min", "sum", "mean", "prod"))


def _split_order(bb: Any, value: Any) -> list[int] | None:
    """`_storage_order` through a reshape that only splits axes (Hiera's ``view`` of the
    query into its pooling stride): each part lies where the axis it splits lay."""
    src, out = static_dims(value.args[0]), static_dims(value)
    inner = _storage_order(bb, value.args[0])
    if src is None or out is None or inner is None:
        return None
    parts: list[list[int]] = []
    at = 0
    for d in src:
        group: list[int] = []
        size = 1
        while size < d or (not group and at < len(out) and out[at] == d == 1):
            if at == len(out):
                return None
            group, size = [*group, at], size * out[at]
            at += 1
        if size != d:
            return None
        parts.append(group)
    if at != len(out):
        return None
    return [a for axis in inner for a in parts[axis]]


def _bias(bb: Any, mask: Any, dtype: str, q_rank: int) -> Any:
    """SDPA's mask as Relax's additive 4-D bias: a boolean one (``True`` takes part) as 0 and
    -inf, more than four axes merged into the batch, a 3-D ``(N, L, S)`` beside a 3-D query
    given its one head, fewer axes given leading ones (they broadcast); None for no mask."""
    if mask is None:
        return None
    if str(mask.ty.dtype) == "bool":
        mask = bb.emit(relax.op.where(mask, relax.const(0.0, dtype),
                                      relax.const(float("-inf"), dtype)))
    ms: list[int] = static_dims(mask) or []
    if len(ms) > 4:
        mask = bb.emit(relax.op.reshape(mask, [int(np.prod(ms[:-3])), *ms[-3:]]))
    elif len(ms) == 3 and q_rank == 3:  # (N, L, S): one head
        mask = bb.emit(relax.op.reshape(mask, [ms[0], 1, ms[1], ms[2]]))
    while len(static_dims(mask) or [0, 0, 0, 0]) < 4:
        mask = bb.emit(relax.op.expand_dims(mask, 0))
    return mask


def _attention(bb: Any, q: Any, k: Any, v: Any, *, bias: Any, scale: Any, causal: bool) -> Any:
    return bb.emit(relax.op.nn.attention(q, k, v, bias=bias,
                                         scale=None if scale is None else float(scale),
                                         causal_mask="TopLeft" if causal else None))


def _sdpa_grouped(bb: Any, q: Any, k: Any, v: Any, mask: Any, scale: Any, causal: bool,
                  shapes: list[list[int]]) -> Any:
    """SDPA on operands of five or more axes, ``(b, a1, .., an, L, E)``: every axis before L
    is a batch axis, so Relax's BSHD may take any of them as B or as H. Where the query is a
    permute of a head split (Hiera's windows and heads), B takes the batch axes stored
    before L and H those stored between L and E, each group in storage order: the permutes
    here then undo the model's own. None where that cannot be seen or K/V do not have the
    query's shape."""
    qs = shapes[0]
    rank = len(qs)
    order = _storage_order(bb, q)
    if order is None or any(s[:-2] != qs[:-2] or len(s) != rank for s in shapes[1:]) \
            or order[-1] != rank - 1 or (mask is not None and len(static_dims(mask) or []) > 2):
        return None
    at = order.index(rank - 2)
    outer, inner = order[:at], order[at + 1:-1]
    perm = [*outer, rank - 2, *inner, rank - 1]
    size = lambda axes: int(np.prod([qs[a] for a in axes]))  # noqa: E731

    def bshd(x: Any, s: list[int]) -> Any:
        moved = bb.emit(relax.op.permute_dims(x, perm))
        return bb.emit(relax.op.reshape(moved, [size(outer), s[-2], size(inner), s[-1]]))

    out = _attention(bb, *(bshd(x, s) for x, s in zip((q, k, v), shapes, strict=True)),
                     bias=_bias(bb, mask, str(q.ty.dtype), rank), scale=scale, causal=causal)
    e = shapes[2][-1]
    grouped = bb.emit(relax.op.reshape(out, [*(qs[a] for a in outer), qs[-2],
                                             *(qs[a] for a in inner), e]))
    return bb.emit(relax.op.permute_dims(grouped, [perm.index(i) for i in range(rank)]))


def _products(bb: Any, q: Any, k: Any, v: Any, scale: Any) -> Any:
    """SDPA as PyTorch's math path writes it: ``softmax(q @ kᵀ · scale) @ v``. For attention
    over channels (`sums_over_tokens`: the scores sum over tokens), which as ``nn.attention`` would
    transpose q, k and v whole; the matmuls read the channels-last map in place, and
    RaiseAttention, finding them, leaves them and says why."""
    e = (static_dims(q) or [1])[-1]
    kt = bb.emit(relax.op.permute_dims(k, [0, 1, 3, 2]))
    scores = bb.emit(relax.op.matmul(q, kt))
    factor = 1.0 / float(np.sqrt(e)) if scale is None else float(scale)
    if factor != 1.0:
        scores = bb.emit(relax.op.multiply(scores, relax.const(factor, str(q.ty.dtype))))
    return bb.emit(relax.op.matmul(bb.emit(relax.op.nn.softmax(scores, axis=-1)), v))


def convert_sdpa(node: Any, importer: Any) -> Any:
    """``F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale,
    enable_gqa)`` as Relax's ``nn.attention``, which takes BSHD (batch, sequence, heads, head
    dimension). PyTorch's operands are ``(..., heads, L, E)``; the leading axes are the batch.
    The heads move next to the head dimension (permutes marked as the importer's, which the
    cleanup passes cancel against a model's own head split), a 3-D ``(N, L, E)`` gets a unit
    head axis (a reshape). Unlike TVM's converter this one keeps ``scale`` (TVM's drops it),
    takes a boolean mask (``True`` takes part, as in PyTorch) as an additive one, broadcasts
    a mask of fewer axes, repeats K/V heads for grouped-query attention and broadcasts a K/V
    batch of one (a K/V head of one stays one: the attention kernel broadcasts it).
    Attention over a feature map's channels is imported as PyTorch's math path writes it
    (`_products`): as ``nn.attention`` q, k and v would each be a transpose of the map."""
    args = list(importer.retrieve_args(node))
    kwargs = {k: importer._retrieve_args(v) for k, v in node.kwargs.items()}

    def arg(i: int, name: str, default: Any) -> Any:
        return args[i] if len(args) > i else kwargs.get(name, default)

    q, k, v = args[:3]
    mask, dropout = arg(3, "attn_mask", None), arg(4, "dropout_p", 0.0)
    causal, scale = arg(5, "is_causal", False), kwargs.get("scale")
    gqa = bool(kwargs.get("enable_gqa", False))
    if dropout:
        raise ValueError("scaled_dot_product_attention with dropout_p > 0: export the model "
                         "in eval mode (model.eval()) or with dropout_p=0")
    bb = importer.block_builder
    shapes = [static_dims(x) for x in (q, k, v)]
    if any(s is None or len(s) < 2 for s in shapes):
        return importer._scaled_dot_product_attention(node)  # symbolic: TVM's converter
    qs, ks, vs = (list(s or []) for s in shapes)
    if len(qs) == 4 and mask is None and not causal and qs[:-2] == ks[:-2] == vs[:-2] and \
            sums_over_tokens(lambda e: bb.lookup_binding(e) if isinstance(e, relax.Var)
                             else None, q):
        return _products(bb, q, k, v, scale)
    if len(qs) >= 5 and not gqa:
        grouped = _sdpa_grouped(bb, q, k, v, mask, scale, causal, [qs, ks, vs])
        if grouped is not None:
            return grouped
    lead = qs[:-3] if len(qs) >= 4 else qs[:-2]
    batch = int(np.prod(lead)) if lead else 1

    def bshd(x: Any, s: list[int]) -> Any:
        if len(s) == 2:
            return bb.emit(relax.op.reshape(x, [1, s[0], 1, s[1]]))
        if len(s) == 3:  # (N, L, E): one head
            return bb.emit(relax.op.reshape(x, [s[0], s[1], 1, s[2]]))
        x4 = x if len(s) == 4 else bb.emit(relax.op.reshape(x, [batch, *s[-3:]]))
        return bb.emit(relax.op.permute_dims(x4, [0, 2, 1, 3]))

    q4, k4, v4 = bshd(q, qs), bshd(k, ks), bshd(v, vs)
    # PyTorch broadcasts a K/V batch of one; Relax's attention wants the query's batch
    q_batch = (static_dims(q4) or [1])[0]
    k4, v4 = ((x if (dims := static_dims(x) or [q_batch])[0] == q_batch else
               bb.emit(relax.op.broadcast_to(x, [q_batch, *dims[1:]]))) for x in (k4, v4))
    heads, kv_heads = (qs[-3], ks[-3]) if len(qs) >= 4 else (1, 1)
    if gqa and kv_heads != heads:
        k4 = bb.emit(relax.op.repeat(k4, heads // kv_heads, axis=2))
        v4 = bb.emit(relax.op.repeat(v4, heads // kv_heads, axis=2))
    out = _attention(bb, q4, k4, v4, bias=_bias(bb, mask, str(q.ty.dtype), len(qs)),
                     scale=scale, causal=causal)
    os_: list[int] = static_dims(out) or []
    if len(qs) <= 3:
        return bb.emit(relax.op.reshape(out, [*qs[:-1], os_[-1]]))
    back = bb.emit(relax.op.permute_dims(out, [0, 2, 1, 3]))
    if len(qs) == 4:
        return back
    return bb.emit(relax.op.reshape(back, [*lead, *(static_dims(back) or [])[1:]]))
