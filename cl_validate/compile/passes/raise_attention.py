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
softmax(S, last axis)`` (through a same-dtype ``astype``), ``S = [S0 · c | S0 / c] [+ bias]``
with ``c`` a scalar constant, ``S0 = matmul(A, B)`` with ``A`` possibly ``Q · c`` (the scale
taken out of the operand). ``bias`` may be added through a view that splits the batch axis
(Swin's shifted-window mask, ``attn.view(-1, nw, heads, n, n) + mask``); it becomes one bias
tensor, constant when the mask is. Every intermediate must be read by the chain alone: when
the attention probabilities are read elsewhere (returned as attention weights, or read by more
products, as Nyströmformer's pseudo-inverse reads its kernel) the matmuls stay, and the note
says what else reads them.

The raised op computes the same sums; the scale is applied once to the scores instead of to
Q (rounding differs within float32's, as PyTorch's own SDPA kernels differ from eager).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import relax_function_pass
from cl_validate.compile.passes.attention_heads import Fold, batch_heads
from cl_validate.compile.passes.attention_left import (
    OVER_THE_TOKENS,
    Left,
    other_readers,
    sums_over_tokens,
    unmatched_softmaxes,
)
from cl_validate.ir import (
    PASS,
    Part,
    bindings,
    is_tensor_constant,
    known_shape,
    mark_origin,
    op_name,
    origin_mark,
    tensor_type,
    use_sites,
    weight_derived,
)

_MATMUL, _SOFTMAX = "relax.matmul", "relax.nn.softmax"
#: The mark of a permute this pass inserts (it cancels against the model's, or says who put it)
_MARK = origin_mark([Part(PASS, None, "attention raised from matmul/softmax/matmul")])


@dataclass
class _Match:
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


def _peel(g: _Graph, e: relax.Expr) -> relax.Expr:
    """`e` seen through the views ``aten.matmul`` decomposes into: an identity
    ``broadcast_to`` and a reshape that only merges or splits the batch axes (the last two
    kept), back to the operand of the highest rank."""
    while True:
        value = g.value(e)
        if op_name(value) not in ("relax.broadcast_to", "relax.reshape"):
            return e
        src = value.args[0]  # type: ignore[union-attr]
        a, b = known_shape(src), known_shape(e)
        if a is None or b is None or len(a) < 2 or len(b) < 2 or a[-2:] != b[-2:] or \
                int(np.prod(a[:-2])) != int(np.prod(b[:-2])):
            return e
        if op_name(value) == "relax.broadcast_to" and a != b:
            return e
        e = src


def _scalar(e: relax.Expr) -> float | None:
    if is_tensor_constant(e):
        arr = e.value.numpy()  # type: ignore[attr-defined]
        if arr.size == 1 and arr.dtype.kind == "f":
            return float(arr.reshape(()))
    return None


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


def _probabilities(g: _Graph, p: relax.Expr) -> relax.Expr | None:
    """``S`` when `p` is ``softmax(S)`` over the last axis (through views and a same-dtype
    astype)."""
    p = _peel(g, p)
    value = g.value(p)
    if op_name(value) == "relax.astype" and tensor_type(value.args[0]) is not None and str(  # type: ignore[union-attr]
            tensor_type(value.args[0]).dtype) == str(value.attrs.dtype):  # type: ignore[union-attr]
        if not _only_reader(g, value.args[0]):  # type: ignore[union-attr]
            return None
        p = _peel(g, value.args[0])  # type: ignore[union-attr]
        value = g.value(p)
    if op_name(value) != _SOFTMAX:
        return None
    rank = len(known_shape(value.args[0]) or ())  # type: ignore[union-attr]
    if rank < 2 or int(value.attrs.axis) % rank != rank - 1:  # type: ignore[union-attr]
        return None
    return value.args[0]  # type: ignore[union-attr,no-any-return]


_SCALING = ("relax.multiply", "relax.divide")


_Scores = tuple[relax.Expr, relax.Expr, float, "relax.Expr | None",
                "tuple[relax.Expr, bool] | None"]


def _per_head(c: relax.Expr, scores: tuple[int, ...] | None) -> bool:
    """`c` scales the scores by head (or batch) alone: its last two axes are one and it
    broadcasts into the scores without growing them."""
    cs = known_shape(c)
    if cs is None or scores is None or len(cs) < 2 or cs[-2:] != (1, 1):
        return False
    ty = tensor_type(c)
    if ty is None or not str(ty.dtype).startswith(("float", "bfloat")):
        return False
    try:
        return tuple(np.broadcast_shapes(cs, scores)) == tuple(scores)
    except ValueError:
        return False


def _scores(g: _Graph, s: relax.Expr) -> _Scores | str:
    """``(A, B, scale, bias, q_factor)`` with ``s = matmul(A, B) · scale · q_factor + bias``
    (through views); A's own scalar factor (``(q * scale) @ kᵀ``) taken out into the scale,
    a per-head factor of the scores (`_per_head`) kept to be folded into q. Else what stands
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
        s = _peel(g, s)
        value = g.value(s)
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
        if _scalar(c) is None and not divides and (
                _scalar(x) is not None or _per_head(x, known_shape(s))):
            x, c = c, x
        factor = _scalar(c)
        if not _only_reader(g, x):
            return "the scores before their scale are also read elsewhere"
        if factor is None and _per_head(c, known_shape(s)):
            q_factor = (c, divides)
        elif factor is None or factor == 0.0:
            return _no_scale(c, factor)
        else:
            scale = 1.0 / factor if divides else factor
        s = _peel(g, x)
        value = g.value(s)
    if op_name(value) != _MATMUL:
        return f"{(op_name(value) or 'an input').removeprefix('relax.')} between the product " \
               "and the softmax (not attention's computation)"
    a, b = (_peel(g, x) for x in value.args)  # type: ignore[union-attr]
    av = g.value(a)
    if op_name(av) == "relax.multiply" and g.single_use(a):
        x, c = av.args  # type: ignore[union-attr]
        if _scalar(c) is None:
            x, c = c, x
        factor = _scalar(c)
        if factor is not None:
            scale *= factor
            a = _peel(g, x)
    if any(isinstance(x, relax.Var) and known_shape(x) is None for x in terms):
        return "a bias or mask of unknown shape on the scores"
    if q_factor is not None and not _per_head(q_factor[0], known_shape(a)):
        return "a per-head scale that q cannot carry (q broadcast by the product)"
    return a, b, scale, bias, q_factor


def _no_scale(c: relax.Expr, factor: float | None) -> str:
    """Why a factor of the scores is not attention's scale."""
    shape = known_shape(c)
    if factor is not None:
        return "a scale of zero on the scores"
    if shape is not None and all(d == 1 for d in shape):
        return "a scale computed at run time on the scores (not a constant)"
    text = "unknown" if shape is None else f"({', '.join(map(str, shape))})"
    return f"a scale of shape {text} on the scores (not one number or one per head)"


def _leads_to_scores(g: _Graph, e: relax.Expr) -> bool:
    """`e` is the scores (a matmul, scaled, biased) seen through views: not a bias term."""
    e = _peel(g, e)
    name = op_name(g.value(e))
    if name == "relax.reshape":
        return _leads_to_scores(g, g.value(e).args[0])  # type: ignore[union-attr]
    if name == "relax.add":
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


def _match(g: _Graph, m2: relax.Var, value: relax.Call) -> _Match | None:
    x, y = value.args
    probs, p, transposed, v = x, _probabilities(g, x), False, _peel(g, y)
    if p is None:
        probs = _swapped_last(g.value(_peel(g, y)))
        p = _probabilities(g, probs) if probs is not None else None
        transposed, v = True, _peel(g, x)
    if p is None:
        return None
    softmax = _peel(g, probs)
    if op_name(g.value(softmax)) == "relax.astype":
        softmax = _peel(g, g.value(softmax).args[0])  # type: ignore[union-attr]
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
    if sums_over_tokens(g.value, a):
        g.left.append(Left(name, OVER_THE_TOKENS))
        return None
    qs, ks, vs = known_shape(a), known_shape(b), known_shape(v)
    if qs is None or ks is None or vs is None or not (len(qs) == len(ks) == len(vs) >= 2):
        ranks = ", ".join("?" if x is None else str(len(x)) for x in (qs, ks, vs))
        g.left.append(Left(name, f"q, k and v of unknown or different ranks ({ranks})"))
        return None
    if str(tensor_type(a).dtype) not in ("float32", "float16", "bfloat16"):  # type: ignore[union-attr]
        return None
    k = _swapped_last(g.value(b))
    operands = (a, b if k is None else k, v)
    heads3 = len(qs) == 3 and any(_seq_major(g.value(x)) for x in operands)
    split, folds = None, (None, None, None)
    if len(qs) == 3 and not heads3 and (bias is None or _splits(bias, qs[0])):
        found_folds = [batch_heads(g.value, x) for x in operands]
        split = next((f.split for f in found_folds if f is not None), None)
        folds = tuple(f if f is not None and f.split == split and g.single_use(x) else None
                      for f, x in zip(found_folds, operands, strict=True))  # type: ignore[assignment]
        keep = (q_factor is None, k is not None, not transposed)  # q scaled first; Kᵀ
        folds = tuple(f if ok else None for f, ok in zip(folds, keep, strict=True))  # type: ignore[assignment]
    return _Match(a, b, v, bias, scale, transposed, heads3,
                  (softmax,) if isinstance(softmax, relax.Var) else (), q_factor, split, folds)


def _splits(bias: relax.Expr, batch: int) -> bool:
    """A bias of 3-D scores ``(N, L, S)`` that reads as ``(B, H, L, S)``: of rank 2, or 3
    with N or 1 first."""
    shape = known_shape(bias)
    return shape is not None and (len(shape) == 2 or (len(shape) == 3 and shape[0] in (1, batch)))


def _seq_major(value: relax.Expr | None) -> bool:
    """A transpose of ``(L, N, E)`` into ``(N, L, E)`` (nn.MultiheadAttention's heads)."""
    axes = getattr(getattr(value, "attrs", None), "axes", None)
    return op_name(value) == "relax.permute_dims" and axes is not None and [
        int(a) for a in axes] == [1, 0, 2]


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


def _raised(m: _Match, out_shape: Sequence[int], emit: Emit,
            unfolded: Sequence[relax.Expr | None] = (None, None, None)) -> relax.Expr:
    """The attention op for `m`; `unfolded`: q, k, v read as (B, H, L, E) before the
    model folded B and H (`Fold.unfolded`), where they were."""
    q = m.q
    if m.q_factor is not None:  # per head: folded into q, before the heads move
        c, divides = m.q_factor
        q = emit((relax.op.divide if divides else relax.op.multiply)(q, c))
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


@mutator
class _Raise(PyExprMutator):  # type: ignore[misc]
    def __init__(self, matches: dict[relax.Var, _Match]) -> None:
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
        m = _Match(self.visit_expr(m.q), self.visit_expr(m.kt), self.visit_expr(m.v),
                   None if m.bias is None else self.visit_expr(m.bias), m.scale,
                   m.transposed_out, m.heads3, q_factor=factor, split=m.split)
        new = self.builder_.normalize(_raised(m, known_shape(binding.var) or (), emit,
                                              unfolded))
        self.builder_.emit_normalized(relax.VarBinding(binding.var, new))


def find(func: relax.Function) -> tuple[dict[relax.Var, _Match], list[Left]]:
    """The attention chains of `func` that can be raised (by the var of their last matmul),
    and the softmaxes between matmuls that cannot, with why."""
    values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    g = _Graph(values, use_sites(func))
    matches: dict[relax.Var, _Match] = {}
    for var, value in values.items():
        if op_name(value) == _MATMUL and known_shape(var) is not None:
            found = _match(g, var, value)  # type: ignore[arg-type]
            if found is not None:
                matches[var] = found
    taken = {s for m in matches.values() for s in m.consumed}
    g.left += unmatched_softmaxes(g.values, taken, {left.source for left in g.left},
                                  weight_derived(func), g.reasons)
    return matches, list(dict.fromkeys(g.left))  # a softmax read by k products: said once


def raise_attention(func: relax.Function) -> relax.Function:
    """Every matched ``softmax(Q Kᵀ · scale + bias) V`` chain as one ``nn.attention``."""
    matches, _ = find(func)
    if not matches:
        return func
    new = _Raise(matches).visit_expr(func)
    return relax.analysis.remove_all_unused(new)


RaiseAttention = relax_function_pass("RaiseAttention")(raise_attention)

__all__ = ["Left", "RaiseAttention", "find", "raise_attention"]
