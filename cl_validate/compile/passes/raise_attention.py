"""RaiseAttention: hand-written attention, ``softmax(Q Kᵀ · scale + bias) V``, becomes
Relax's ``nn.attention``.

Models write attention out: timm's non-fused path and Swin (``(q * scale) @ k.transpose(-2,
-1)``, a relative-position bias, ``softmax(-1)``, ``@ v``), transformers' eager processors
(``matmul(q, kᵀ) * scaling`` or ``/ sqrt(d)``), ``nn.MultiheadAttention`` asked for its
weights (``bmm`` on ``(B·heads, L, E)``), and channel-major forms on conv outputs (YOLO11's
PSA: ``(qᵀ @ k) * scale``, ``softmax``, ``v @ attnᵀ``). As batched matmuls they need the heads
ahead of the sequence, so a transpose stays before and after every attention whatever the
layout passes do. ``nn.attention`` reads BSHD (batch, sequence, heads, head dimension): the
heads where a projection's output has them, so once raised the permutes around it (the
model's head split and merge, and the ones inserted here) cancel in the cleanup.

Matched, on one dataflow block: ``matmul(P, V)`` or ``matmul(V', Pᵀ)`` where ``P =
softmax(S, last axis)`` (through views and casts between float dtypes: the raised op sums in
float32), ``S = [S0 · c | S0 / c] [+ bias]`` with ``c`` a scalar constant, ``S0 = matmul(A,
B)`` with ``A`` possibly ``Q · c`` (the scale taken out of the operand). ``bias`` may be
added through a view that splits the batch axis (Swin's shifted-window mask, ``attn.view(-1,
nw, heads, n, n) + mask``), or be a ``masked_fill`` with ``-inf`` (a causal ``triu``); it
becomes one bias tensor, constant when the mask is. A softmax written out and einsum's
products are read as these (`_prepared`); q, k and v at one rank (``bmm`` on folded
heads, ``repeat_interleave``'s K/V heads). Every
intermediate must be read by the chain alone: when the attention probabilities are read
elsewhere (returned as attention weights, or read by more products, as Nyströmformer's
pseudo-inverse reads its kernel) the matmuls stay, and the note says what else reads them.

The raised op computes the same sums; the scale is applied once to the scores instead of to
Q (rounding differs within float32's, as PyTorch's own SDPA kernels differ from eager).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tvm import relax, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import relax_function_pass
from cl_validate.compile.passes.attention_heads import batch_heads, channel_heads, memory_order
from cl_validate.compile.passes.attention_left import (
    OVER_THE_TOKENS,
    Left,
    other_readers,
    sums_over_tokens,
    unmatched_softmaxes,
)
from cl_validate.compile.passes.attention_op import Match, ordered_bias_fits, raised
from cl_validate.compile.passes.attention_terms import no_scale, per_head, scalar, where_mask
from cl_validate.compile.passes.product_views import fold_product_views
from cl_validate.compile.passes.spelled_softmax import (
    NO_MAXIMUM,
    bare_softmaxes,
    spelled_softmax,
)
from cl_validate.ir import (
    bindings,
    known_shape,
    op_name,
    tensor_type,
    use_sites,
    weight_derived,
)

_MATMUL, _SOFTMAX = "relax.matmul", "relax.nn.softmax"


@dataclass
class _Graph:
    values: dict[relax.Var, relax.Expr]
    uses: dict[relax.Var, list[relax.Var | None]]
    left: list[Left] = field(default_factory=list)
    #: softmax → where the match of its scores stopped (said if it is between two products)
    reasons: dict[str, str] = field(default_factory=dict)

    def value(self, e: relax.Expr) -> relax.Expr | None:
        return self.values.get(e) if isinstance(e, relax.Var) else None

    def single_use(self, e: relax.Expr) -> bool:
        return isinstance(e, relax.Var) and len(self.uses.get(e, [])) == 1


def _peel(g: _Graph, e: relax.Expr, rank: int | None = None) -> relax.Expr:
    """`e` seen through the views ``aten.matmul`` decomposes into: an identity
    ``broadcast_to`` and a reshape that only merges or splits the batch axes (the last two
    kept), back to the operand of the highest rank; with `rank`, never past a view of that
    rank (q, k and v read at one rank: ``bmm`` on heads folded into the batch, K/V heads
    repeated by ``repeat_interleave``)."""
    while True:
        value = g.value(e)
        if op_name(value) not in ("relax.broadcast_to", "relax.reshape"):
            return e
        src = value.args[0]  # type: ignore[union-attr]
        a, b = known_shape(src), known_shape(e)
        if a is None or b is None or len(a) < 2 or len(b) < 2 or a[-2:] != b[-2:] or \
                int(np.prod(a[:-2])) != int(np.prod(b[:-2])) or \
                (rank is not None and len(b) == rank != len(a)):
            return e
        if op_name(value) == "relax.broadcast_to" and a != b:
            return e
        e = src


def _swapped_last(value: relax.Expr | None) -> relax.Expr | None:
    """The operand of a permute that swaps the last two axes (a transpose of matrices)."""
    if op_name(value) != "relax.permute_dims" or value.attrs.axes is None:  # type: ignore[union-attr]
        return None
    axes = [int(a) for a in value.attrs.axes]  # type: ignore[union-attr]
    n = len(axes)
    if n < 2 or axes != [*range(n - 2), n - 1, n - 2]:
        return None
    return value.args[0]  # type: ignore[union-attr,no-any-return]


def _only_reader(g: _Graph, e: relax.Expr) -> bool:
    """`e` and every view `_peel` sees through from it are read once: by the chain."""
    while True:
        if not g.single_use(e):
            return False
        inner = _peel_one(g, e)
        if inner is None:
            return True
        e = inner


def _peel_one(g: _Graph, e: relax.Expr) -> relax.Expr | None:
    inner = _peel(g, e)
    if inner is e:
        return None
    value = g.value(e)
    return value.args[0]  # type: ignore[union-attr,no-any-return]


#: Float dtypes whose casts on the scores and probabilities the raised op leaves out
_FLOATS = frozenset({"float32", "float16", "bfloat16"})


def _float_cast(value: relax.Expr | None) -> relax.Expr | None:
    """The operand of a cast between float dtypes (a half model's scores are imported in
    float32 and rounded back, its softmax read in float32): the raised op sums in float32
    (`compile.attention`), so leaving the roundings out only drops rounding error."""
    if op_name(value) != "relax.astype":
        return None
    src = value.args[0]  # type: ignore[union-attr]
    ty = tensor_type(src)
    if ty is None or str(ty.dtype) not in _FLOATS or str(value.attrs.dtype) not in _FLOATS:  # type: ignore[union-attr]
        return None
    return src  # type: ignore[no-any-return]


def _through_casts(g: _Graph, e: relax.Expr, read_once: bool = True) -> relax.Expr:
    """`e` seen through views (`_peel`) and float casts (`_float_cast`); with `read_once`,
    only through casts whose operand the chain alone reads."""
    e = _peel(g, e)
    while (src := _float_cast(g.value(e))) is not None and (
            not read_once or _only_reader(g, src)):
        e = _peel(g, src)
    return e


def _probabilities(g: _Graph, p: relax.Expr) -> relax.Expr | None:
    """``S`` when `p` is ``softmax(S)`` over the last axis (through views and float
    casts)."""
    value = g.value(_through_casts(g, p))
    if op_name(value) != _SOFTMAX:
        return None
    rank = len(known_shape(value.args[0]) or ())  # type: ignore[union-attr]
    if rank < 2 or int(value.attrs.axis) % rank != rank - 1:  # type: ignore[union-attr]
        return None
    return value.args[0]  # type: ignore[union-attr,no-any-return]


_SCALING = ("relax.multiply", "relax.divide")


_Scores = tuple[relax.Expr, relax.Expr, float, "relax.Expr | None",
                "tuple[relax.Expr, bool] | None"]


def _scores(g: _Graph, s: relax.Expr, rank: int | None = None) -> _Scores | str:
    """``(A, B, scale, bias, q_factor)`` with ``s = matmul(A, B) · scale · q_factor + bias``
    (through views); A's own scalar factor (``(q * scale) @ kᵀ``) taken out into the scale,
    a per-head factor of the scores (`per_head`) kept to be folded into q. Else what stands
    in the way, as the note says it."""
    scale = 1.0
    q_factor: tuple[relax.Expr, bool] | None = None
    terms: list[relax.Expr] = []  # the additive biases and masks, outermost first
    while True:
        shape = known_shape(s)
        value = g.value(s)
        if op_name(value) == "relax.reshape" and _only_reader(g, value.args[0]):  # type: ignore[union-attr]
            lifted = _lift_batch_split_add(g, g.value(value.args[0]), shape)  # type: ignore[union-attr]
            if lifted is not None:
                s, term = lifted
                terms.append(term)
                continue
        s = _through_casts(g, s)
        value = g.value(s)
        if op_name(value) == "relax.where":
            masked = where_mask(value, known_shape(s),  # type: ignore[arg-type]
                                lambda x: _only_reader(g, x) and _leads_to_scores(g, x),
                                g.value)
            if isinstance(masked, str):
                return masked
            s, term = masked
            terms.append(term)
            continue
        if op_name(value) != "relax.add":
            break
        a, b = value.args  # type: ignore[union-attr]
        if _only_reader(g, a) and _leads_to_scores(g, a):
            s, term = a, b
        elif _only_reader(g, b) and _leads_to_scores(g, b):
            s, term = b, a
        else:
            return "the scores are added to a value that is not a bias or a mask (another " \
                   "product, or the scores themselves read twice)"
        terms.append(term)
    bias = None
    for term in reversed(terms):
        bias = term if bias is None else relax.op.add(bias, term)
    if op_name(value) in _SCALING:
        x, c = value.args  # type: ignore[union-attr]
        divides = op_name(value) == "relax.divide"
        if scalar(c) is None and not divides and (
                scalar(x) is not None or per_head(x, known_shape(s))):
            x, c = c, x
        factor = scalar(c)
        if not _only_reader(g, x):
            return "the scores before their scale are also read elsewhere"
        if factor is None and per_head(c, known_shape(s)):
            q_factor = (c, divides)
        elif factor is None or factor == 0.0:
            return no_scale(c, factor)
        else:
            scale = 1.0 / factor if divides else factor
        s = _through_casts(g, x)
        value = g.value(s)
    if op_name(value) != _MATMUL:
        return f"{(op_name(value) or 'an input').removeprefix('relax.')} between the product " \
               "and the softmax (not attention's computation)"
    a, b = (_peel(g, x, rank) for x in value.args)  # type: ignore[union-attr]
    av = g.value(a)
    if op_name(av) == "relax.multiply" and g.single_use(a):
        x, c = av.args  # type: ignore[union-attr]
        if scalar(c) is None:
            x, c = c, x
        factor = scalar(c)
        if factor is not None:
            scale *= factor
            a = _peel(g, x, rank)
    if any(isinstance(x, relax.Var) and known_shape(x) is None for x in terms):
        return "a bias or mask of unknown shape on the scores"
    if q_factor is not None and not per_head(q_factor[0], known_shape(a)):
        return "a per-head scale that q cannot carry (q broadcast by the product)"
    return a, b, scale, bias, q_factor


def _leads_to_scores(g: _Graph, e: relax.Expr) -> bool:
    """`e` is the scores (a matmul, scaled, biased) seen through views: not a bias term."""
    e = _through_casts(g, e, read_once=False)
    name = op_name(g.value(e))
    if name == "relax.reshape":
        return _leads_to_scores(g, g.value(e).args[0])  # type: ignore[union-attr]
    if name in ("relax.add", "relax.where"):
        return any(_leads_to_scores(g, x) for x in g.value(e).args)  # type: ignore[union-attr]
    return name in (_MATMUL, *_SCALING)


def _lift_batch_split_add(g: _Graph, add: relax.Expr | None, out: tuple[int, ...] | None
                          ) -> tuple[relax.Expr, relax.Expr] | None:
    """``reshape(reshape(s, (B/n, n, ...)) + m, (B, ...))``: the scores `s` and the bias
    ``reshape(broadcast_to(m, (B/n, n, ...)), (B, ...))`` the add stands for."""
    if op_name(add) != "relax.add" or out is None:
        return None
    a, m = add.args  # type: ignore[union-attr]
    if op_name(g.value(a)) != "relax.reshape":
        a, m = m, a
    view = g.value(a)
    if op_name(view) != "relax.reshape" or not g.single_use(a):
        return None
    s = view.args[0]  # type: ignore[union-attr]
    split = known_shape(a)
    tail = len(out) - 1
    if known_shape(s) != out or split is None or split[-tail:] != out[1:] or \
            int(np.prod(split[:-tail])) != out[0]:
        return None
    bias = relax.op.reshape(relax.op.broadcast_to(m, list(split)), list(out))
    return s, bias


def _match(g: _Graph, m2: relax.Var, value: relax.Call) -> Match | None:
    x, y = value.args
    probs, p, transposed, v = x, _probabilities(g, x), False, _peel(g, y)
    if p is None:
        probs = _swapped_last(g.value(_peel(g, y)))
        p = _probabilities(g, probs) if probs is not None else None
        transposed, v = True, _peel(g, x)
    if p is None:
        return None
    softmax = _through_casts(g, probs)
    name = softmax.name if isinstance(softmax, relax.Var) else m2.name
    shared = next((e for e in (x if not transposed else y, probs, p)
                   if not _only_reader(g, e)), None)
    if shared is not None:
        while g.single_use(shared) and (inner := _peel_one(g, shared)) is not None:
            shared = inner
        g.left.append(Left(name, other_readers(g.values, g.uses, shared)))
        return None
    found = _scores(g, p)
    if isinstance(found, str):
        g.reasons.setdefault(name, found)
        return None
    a, b, scale, bias, q_factor = found
    peeled = {len(known_shape(x) or ()) for x in (a, b, v)}
    if len(peeled) > 1:  # peeled to different ranks: read all three at the lowest
        rank = min(peeled)
        found, v = _scores(g, p, rank), _peel(g, x if transposed else y, rank)
        if isinstance(found, str):
            g.reasons.setdefault(name, found)
            return None
        a, b, scale, bias, q_factor = found
    if sums_over_tokens(g.value, a):
        g.left.append(Left(name, OVER_THE_TOKENS))
        return None
    qs, ks, vs = known_shape(a), known_shape(b), known_shape(v)
    if qs is None or ks is None or vs is None or not (len(qs) == len(ks) == len(vs) >= 2):
        ranks = ", ".join("?" if x is None else str(len(x)) for x in (qs, ks, vs))
        g.left.append(Left(name, f"q, k and v of unknown or different ranks ({ranks})"))
        return None
    dtypes = {str(getattr(tensor_type(x), "dtype", "?")) for x in (a, b, v)}
    if len(dtypes) != 1 or not dtypes <= {"float32", "float16", "bfloat16"}:
        g.left.append(Left(name, f"q, k and v of dtypes {', '.join(sorted(dtypes))} (one "
                                 "float dtype for all three is what the op takes)"))
        return None
    k = _swapped_last(g.value(b))
    operands = (a, b if k is None else k, v)
    heads3 = len(qs) == 3 and any(_seq_major(g.value(x)) for x in operands)
    split, folds = None, (None, None, None)
    if len(qs) == 3 and not heads3 and (bias is None or _splits(bias, qs[0])):
        found_folds = [batch_heads(g.value, x) for x in operands]
        split = next((f.split for f in found_folds if f is not None), None) or \
            channel_heads(g.value, a)
        folds = tuple(f if f is not None and f.split == split and g.single_use(x) else None
                      for f, x in zip(found_folds, operands, strict=True))  # type: ignore[assignment]
        keep = (q_factor is None, k is not None, not transposed)  # q scaled first; Kᵀ
        folds = tuple(f if ok else None for f, ok in zip(folds, keep, strict=True))  # type: ignore[assignment]
    order = None if heads3 or split is not None else _heads_order(g, a, (qs, ks, vs), bias)
    return Match(a, b, v, bias, scale, transposed, heads3,
                  (softmax,) if isinstance(softmax, relax.Var) else (), q_factor, split, folds,
                  order)


def _heads_order(g: _Graph, q: relax.Expr, shapes: tuple[tuple[int, ...], ...],
                 bias: relax.Expr | None) -> tuple[int, ...] | None:
    """q's axes as BSHD takes them where the model stores q's heads elsewhere than just
    before the rows (`memory_order`): the batch axes, the rows, the head axes, the
    features, in the order they are stored; None where the default order serves, or where
    k, v or the bias do not share q's batch axes (broadcast heads keep the default)."""
    n = len(shapes[0])
    order = memory_order(g.value, q) if n >= 4 else None
    if order is None or order[-1] != n - 1 or order == (*range(n - 3), n - 2, n - 3, n - 1):
        return None
    if n - 2 not in order[:-1] or order.index(n - 2) == n - 2:
        return None  # no head axis after the rows: nothing to move next to the features
    if any(s[:-2] != shapes[0][:-2] for s in shapes[1:]):
        return None
    bshape = None if bias is None else _shape(bias)
    if bias is not None and (bshape is None or not ordered_bias_fits(bshape, shapes[0], order)):
        return None
    return order


def _shape(e: relax.Expr) -> tuple[int, ...] | None:
    """`e`'s static shape, also for a bias this pass built and has not bound yet (a mask's
    ``where``, a sum of terms, a view of a mask)."""
    shape = known_shape(e)
    if shape is not None or not isinstance(e, relax.Call):
        return shape
    if op_name(e) in ("relax.reshape", "relax.broadcast_to"):
        dims = getattr(e.args[1], "values", None)
        return None if dims is None or not all(isinstance(d, tirx.IntImm) for d in dims) \
            else tuple(int(d) for d in dims)
    parts = [_shape(a) for a in e.args]
    if any(p is None for p in parts):
        return None
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*parts))  # type: ignore[arg-type]
    except ValueError:
        return None


def _splits(bias: relax.Expr, batch: int) -> bool:
    """A bias of 3-D scores ``(N, L, S)`` that reads as ``(B, H, L, S)``: of rank 2, or 3
    with N or 1 first."""
    shape = _shape(bias)
    return shape is not None and (len(shape) == 2 or (len(shape) == 3 and shape[0] in (1, batch)))


def _seq_major(value: relax.Expr | None) -> bool:
    """A transpose of ``(L, N, E)`` into ``(N, L, E)`` (nn.MultiheadAttention's heads)."""
    axes = getattr(getattr(value, "attrs", None), "axes", None)
    return op_name(value) == "relax.permute_dims" and axes is not None and [
        int(a) for a in axes] == [1, 0, 2]


@mutator
class _Raise(PyExprMutator):  # type: ignore[misc]
    def __init__(self, matches: dict[relax.Var, Match]) -> None:
        super().__init__()
        self.matches = matches

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        m = self.matches.get(binding.var)
        if m is None:
            super().visit_var_binding_(binding)
            return
        factor = None if m.q_factor is None else (self.visit_expr(m.q_factor[0]),
                                                  m.q_factor[1])
        emit = self.builder_.emit
        unfolded = [None if f is None else f.unfolded(self.visit_expr(f.source), emit)
                    for f in m.folds]
        m = Match(self.visit_expr(m.q), self.visit_expr(m.kt), self.visit_expr(m.v),
                   None if m.bias is None else self.visit_expr(m.bias), m.scale,
                   m.transposed_out, m.heads3, q_factor=factor, split=m.split,
                   order=m.order)
        new = self.builder_.normalize(raised(m, known_shape(binding.var) or (), emit,
                                             unfolded))
        dtype = tensor_type(binding.var).dtype  # type: ignore[union-attr]
        if str(tensor_type(new).dtype) != str(dtype):  # type: ignore[union-attr]
            new = self.builder_.normalize(relax.op.astype(emit(new), dtype))
        self.builder_.emit_normalized(relax.VarBinding(binding.var, new))


def _prepared(func: relax.Function) -> relax.Function:
    """`func` as the match reads it: a softmax written out as the op (`SpelledSoftmax`),
    einsum's views around a product folded (`FoldProductViews`)."""
    return fold_product_views(spelled_softmax(func))


def find(func: relax.Function) -> tuple[dict[relax.Var, Match], list[Left]]:
    """The attention chains of `func` that can be raised (by the var of their last matmul
    in `_prepared`'s function), and the softmaxes between matmuls that cannot, with why."""
    return _find(_prepared(func))


def _find(func: relax.Function) -> tuple[dict[relax.Var, Match], list[Left]]:
    values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    g = _Graph(values, use_sites(func))
    matches: dict[relax.Var, Match] = {}
    for var, value in values.items():
        if op_name(value) == _MATMUL and known_shape(var) is not None:
            found = _match(g, var, value)  # type: ignore[arg-type]
            if found is not None:
                matches[var] = found
    taken = {s for m in matches.values() for s in m.consumed}
    bare = bare_softmaxes(g.values, g.uses)
    g.reasons.update({v.name: NO_MAXIMUM for v in bare})
    g.left += unmatched_softmaxes(g.values, taken, {left.source for left in g.left},
                                  weight_derived(func), g.reasons, bare)
    return matches, list(dict.fromkeys(g.left))  # a softmax read by k products: said once


def raise_attention(func: relax.Function) -> relax.Function:
    """Every matched ``softmax(Q Kᵀ · scale + bias) V`` chain as one ``nn.attention``."""
    func = _prepared(func)
    matches, _ = _find(func)
    if not matches:
        return func
    new = _Raise(matches).visit_expr(func)
    return relax.analysis.remove_all_unused(new)


RaiseAttention = relax_function_pass("RaiseAttention")(raise_attention)

__all__ = ["Left", "RaiseAttention", "find", "raise_attention"]
