"""Attention: Relax's ``nn.attention`` lowered to kernels that read Q, K and V in BSHD as they
are.

TVM 0.27 legalizes ``nn.attention`` by transposing Q, K and V to BHSD inside the kernel
(materialized copies), batched matmuls and a softmax; on cuda no dlight rule takes that
PrimFunc and it falls to Fallback (threads bound to loops, nothing shared). Here the kernels
index BSHD directly:

    score[b, h, i, j]  = scale · Σ_d q[b, i, h, d] · k[b, j, h, d]  (+ bias, causal mask)
    weight[b, h, i, j] = exp(score − max_j score)       (0 for a row that is masked entirely)
    out[b, i, h, c]    = Σ_j (weight / Σ_j weight) · v[b, j, h, c]

the float math of PyTorch's math path (a row masked entirely gives zeros, as its
``_safe_softmax``). Half-precision inputs (float16, bfloat16) are read as they are and summed in
float32, scores and softmax included, the result rounded once to their dtype: as PyTorch's
kernels accumulate (summed in float16, over 256 keys the 99th percentile of the error was 190
half-steps of float16; summed in float32, 2 at most). K and V may have one head (multi-query
attention) or one batch where Q has more: they are broadcast, exactly as TVM's own lowering
broadcasts them; any other mismatch of heads or batch is left to TVM's lowering (which refuses
it), never guessed.

An operand that reaches the op through a transpose from BHSD (the model made its q, k or v
head-major with its own ops: MViTv2 pools each per head and normalizes it as ``(B, H, N,
D)``) is read in place of the transpose (`_in_place`), which is then read by nothing and
goes: the kernels index either layout.

- On a CPU: one PrimFunc (`attention_te`), the weighted sum over keys outside the output
  channels (`_cpu_loop_order`): no schedule is applied there, and one pass over a row's keys
  per query row is the fastest loop nest (BENCHMARKS.md).
- On a GPU: one kernel (`cl_validate.compile.attention_tiles`): K and V in shared-memory
  tiles every query row of a block shares, the softmax computed online, so the scores never
  reach global memory; on an H200 0.63-0.76x the decomposed form's time at 197-4096 tokens
  and 1.0-1.4x PyTorch's SDPA (BENCHMARKS.md). Where its tiles do not fit the head
  dimensions (above 112, or an odd dimension of V), three PrimFuncs:
  the two products and the softmax between them, each a kernel dlight's own rules schedule
  (Matmul, GeneralReduction, Matmul), which write the scores to memory and read them back
  (at 4096 tokens 1.06x the decomposed form). One kernel per query row, before either, re-read
  all of K and V for every row: 15x slower than the decomposed form at 1024 tokens. Both
  read BSHD in place, so no transpose is added.

Every attention PrimFunc carries `ATTENTION_ATTR` (which part it is), and none is fused with
a neighbour (opaque to FuseOps): fused, it would be a new PrimFunc no rule recognizes.
"""

from __future__ import annotations

import math
from typing import Any

import tvm
from tvm import relax, te, tirx

from cl_validate.compile.attention_tiles import (
    TILES_ATTR,
    Operands,
    accumulation,
    choose_tiles,
    describe,
    tiled_attention,
)
from cl_validate.ir import AXES_ATTR, SCHEDULE_ATTR

#: PrimFunc attribute marking an attention kernel: which part it is (`KERNEL` on a CPU; on a
#: GPU `TILED`, or where the tiles do not fit, `SCORES`, `SOFTMAX`, `OUTPUT`).
ATTENTION_ATTR = "cl_validate.attention"
KERNEL, TILED, SCORES, SOFTMAX, OUTPUT = "kernel", "tiled", "scores", "softmax", "output"
#: The schedule the tiled kernel is written with, as the kernel list names it.
TILED_RULE = "Attention"
_TILED_DTYPES = ("float32", "float16", "bfloat16")
#: TVM's op pattern kind for an op FuseOps fuses with nothing (``relay.op.OpPattern.OPAQUE``).
_OPAQUE = 8


def _broadcast_index(bias: te.Tensor, b: Any, h: Any, i: Any, j: Any) -> Any:
    dims = [int(d) for d in bias.shape]
    full = [b, h, i, j][4 - len(dims):]
    return bias[tuple(0 if d == 1 else x for d, x in zip(dims, full, strict=True))]


def bshd(shape: Any, heads_first: bool) -> tuple[int, int, int, int]:
    """An operand's (batch, sequence, heads, dim), read from its BSHD or BHSD `shape`."""
    b, x, y, d = (int(n) for n in shape)
    return (b, y, x, d) if heads_first else (b, x, y, d)


def _at(t: te.Tensor, heads_first: bool, b: Any, s: Any, h: Any, c: Any) -> Any:
    """Q, K or V at batch `b`, position `s`, head `h`, channel `c`, stored BSHD or (read in
    place of a transpose) BHSD; a batch or head of one is broadcast."""
    batch, _, heads, _ = bshd(t.shape, heads_first)
    b, h = 0 if batch == 1 else b, 0 if heads == 1 else h
    return t[b, h, s, c] if heads_first else t[b, s, h, c]


def broadcastable(q: Any, k: Any, v: Any) -> bool:
    """Whether K's and V's batch and heads are Q's, or one (broadcast): what the kernels
    compute exactly. (Grouped heads, 8 query heads on 2 key heads, say, have no broadcast
    meaning in Relax: TVM's own lowering refuses them, and so do these kernels.)"""
    return all(int(t[axis]) in (1, int(q[axis])) for t in (k, v) for axis in (0, 2)) and \
        int(k[1]) == int(v[1])


def _scores(q: te.Tensor, k: te.Tensor, bias: te.Tensor | None, scale: float | None,
            causal: str | None, heads_first: tuple[bool, bool] = (False, False)
            ) -> te.Tensor:
    """The scaled, biased and masked scores, (batch, heads, queries, keys), in the
    accumulation dtype."""
    batch, length, heads, depth = bshd(q.shape, heads_first[0])
    keys = bshd(k.shape, heads_first[1])[1]
    dtype = accumulation(q.dtype)
    factor = tirx.const(scale if scale is not None else 1.0 / math.sqrt(depth), dtype)
    d = te.reduce_axis((0, depth), "d")
    dot = te.compute((batch, heads, length, keys), lambda b, h, i, j: te.sum(
        _at(q, heads_first[0], b, i, h, d).astype(dtype) *
        _at(k, heads_first[1], b, j, h, d).astype(dtype), axis=d), name="score_dot")
    offset = 0 if causal != "BottomRight" else abs(length - keys)
    minus_inf = tirx.const(float("-inf"), dtype)

    def scaled(b: Any, h: Any, i: Any, j: Any) -> Any:
        s = dot[b, h, i, j] * factor
        if bias is not None:
            s = s + _broadcast_index(bias, b, h, i, j).astype(dtype)
        if causal is not None:
            s = tirx.Select(j > i + offset, minus_inf, s)
        return s

    return te.compute((batch, heads, length, keys), scaled, name="score")


def _softmax(score: te.Tensor) -> te.Tensor:
    """Softmax over the keys; a row masked entirely (all -inf) gives zeros."""
    batch, heads, length, keys = (int(d) for d in score.shape)
    dtype = score.dtype
    minus_inf, zero = tirx.const(float("-inf"), dtype), tirx.const(0, dtype)
    j1 = te.reduce_axis((0, keys), "j1")
    row_max = te.compute((batch, heads, length), lambda b, h, i: te.max(
        score[b, h, i, j1], axis=j1), name="row_max")
    weight = te.compute((batch, heads, length, keys), lambda b, h, i, j: tirx.Select(
        row_max[b, h, i] == minus_inf, zero,
        te.exp(score[b, h, i, j] - row_max[b, h, i])), name="weight")
    j2 = te.reduce_axis((0, keys), "j2")
    row_sum = te.compute((batch, heads, length), lambda b, h, i: te.sum(
        weight[b, h, i, j2], axis=j2), name="row_sum")
    return te.compute((batch, heads, length, keys), lambda b, h, i, j: tirx.Select(
        row_sum[b, h, i] == zero, zero, weight[b, h, i, j] / row_sum[b, h, i]), name="prob")


def _weighted(prob: te.Tensor, v: te.Tensor, dtype: str, heads_first: bool = False
              ) -> te.Tensor:
    """The probabilities times V, summed in their dtype, BSHD out in `dtype` (rounded once)."""
    batch, heads, length, keys = (int(d) for d in prob.shape)
    depth_v = int(v.shape[3])
    j3 = te.reduce_axis((0, keys), "j3")
    out = te.compute((batch, length, heads, depth_v), lambda b, i, h, c: te.sum(
        prob[b, h, i, j3] * _at(v, heads_first, b, j3, h, c).astype(prob.dtype), axis=j3),
        name="attention")
    if str(prob.dtype) == dtype:
        return out
    return te.compute(out.shape, lambda *i: out(*i).astype(dtype), name="attention_round")


def attention_te(q: te.Tensor, k: te.Tensor, v: te.Tensor, bias: te.Tensor | None,
                 scale: float | None, causal: str | None,
                 heads_first: tuple[bool, bool, bool] = (False, False, False)) -> te.Tensor:
    """The whole attention in one compute (the CPU's kernel), BSHD in (or BHSD where
    `heads_first`), BSHD out."""
    return _weighted(_softmax(_scores(q, k, bias, scale, causal, heads_first[:2])), v,
                     q.dtype, heads_first[2])


def _in_place(bb: relax.BlockBuilder, arg: relax.Expr) -> tuple[relax.Expr, bool]:
    """`arg`, or the BHSD tensor `arg` is the BSHD transpose of (a permute legalized before
    the attention, tagged `AXES_ATTR` (0, 2, 1, 3)), which the kernels read in place: the
    transpose is then read by nothing and goes."""
    value = bb.lookup_binding(arg) if isinstance(arg, relax.Var) else None
    if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op) or \
            value.op.name != "relax.call_tir" or not isinstance(value.args[1], relax.Tuple):
        return arg, False
    func = bb.get()[value.args[0]]
    axes = func.attrs.get(AXES_ATTR) if func.attrs is not None else None
    if axes is None or [int(a) for a in axes] != [0, 2, 1, 3] or \
            len(value.args[1].fields) != 1:
        return arg, False
    return value.args[1].fields[0], True


def _legalize(bb: relax.BlockBuilder, call: relax.Call, tiled: bool = True) -> relax.Expr:
    scale = call.attrs.scale
    args = list(call.args[:3])
    bias = call.args[3] if len(call.args) > 3 else None
    shapes = [getattr(a.ty, "shape", None) for a in call.args]
    if any(s is None or any(not isinstance(d, tirx.IntImm) for d in s) for s in shapes) or \
            call.attrs.window_size is not None:
        return call  # symbolic shapes, a sliding window: TVM's own lowering (`fallback`)
    if not broadcastable(*shapes[:3]):
        return call  # heads or batches that do not broadcast: not ours to guess
    args, heads_first = (list(x) for x in zip(*(_in_place(bb, a) for a in args), strict=True))

    target = tvm.target.Target.current(allow_none=True)
    gpu = target is not None and "gpu" in target.keys
    factor = None if scale is None else float(scale)
    causal = None if call.attrs.causal_mask is None else str(call.attrs.causal_mask)
    dtype = str(args[0].ty.dtype)
    extra = [bias] if bias is not None else []

    def emit(compute: Any, part: str, *inputs: relax.Expr) -> relax.Expr:
        out = bb.call_te(compute, *inputs, primfunc_name_hint="attention" if part == KERNEL
                         else f"attention_{part}")
        gvar = out.args[0]
        func = bb.get()[gvar].with_attrs({ATTENTION_ATTR: part, "op_pattern": _OPAQUE})
        bb.update_func(gvar, _cpu_loop_order(func) if part == KERNEL else func)
        return out

    first = tuple(heads_first)
    if not gpu:
        return emit(lambda q, k, v, *b: attention_te(q, k, v, b[0] if b else None, factor,
                                                      causal, first), KERNEL, *args, *extra)
    q_shape, k_shape, v_shape = (tuple(int(d) for d in a.ty.shape) for a in args)
    ops = Operands(q_shape, k_shape, v_shape,
                   None if bias is None else tuple(int(d) for d in bias.ty.shape), dtype,
                   dtype if bias is None else str(bias.ty.dtype), first, factor, causal)
    tiles = choose_tiles(ops) if tiled and dtype in _TILED_DTYPES else None
    if tiles is not None:
        gvar = bb.add_func(tiled_attention(ops, tiles).with_attrs(
            {ATTENTION_ATTR: TILED, "op_pattern": _OPAQUE, "tirx.is_scheduled": True,
             SCHEDULE_ATTR: TILED_RULE, TILES_ATTR: describe(ops, tiles)}), "attention_tiled")
        b, length, h, _ = ops.bshd(0)
        out = relax.TensorType((b, length, h, ops.bshd(2)[3]), dtype)
        return relax.call_tir(gvar, relax.Tuple([*args, *extra]), out)
    scores = bb.emit(emit(lambda q, k, *b: _scores(q, k, b[0] if b else None, factor, causal,
                                                   first[:2]), SCORES, args[0], args[1],
                          *extra))
    prob = bb.emit(emit(_softmax, SOFTMAX, scores))
    return emit(lambda p, v: _weighted(p, v, dtype, first[2]), OUTPUT, prob, args[2])


def attention_legalizations(tiled: bool = True) -> dict[str, Any]:
    """``customize_legalize_map`` entries for ``nn.attention`` (and its bias form); an op
    they cannot take (symbolic shapes) goes to TVM's own lowering. On a GPU, ``tiled=False``
    lowers to the two products and the softmax even where tiles fit (the benchmark compares
    the two)."""
    def with_fallback(op: str) -> Any:
        default = tvm.ir.Op.get(op).get_attr("FLegalize")

        def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
            out = _legalize(bb, call, tiled)
            return default(bb, call) if out is call else out

        return legalize

    return {op: with_fallback(op) for op in ("relax.nn.attention", "relax.nn.attention_bias")}


def _cpu_loop_order(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """On a CPU (no schedule is applied there): the weighted sum runs over keys outside the
    output channels, so the innermost loop walks V's and the output's channels contiguously
    (BSHD) rather than striding over the keys; the row's probabilities are computed once
    each, not once per channel."""
    sch = tvm.s_tir.Schedule(func)
    block = sch.get_sblock("attention")
    *_, c, j = sch.get_loops(block)
    sch.reorder(j, c)
    sch.decompose_reduction(block, j)
    return sch.mod["main"].with_attrs(dict(func.attrs))
