"""The attention kernel: Relax's ``nn.attention`` lowered to one PrimFunc that reads Q, K and V
in BSHD as they are, and its GPU schedule.

TVM 0.27 legalizes ``nn.attention`` by transposing Q, K and V to BHSD inside the kernel
(materialized copies), batched matmuls and a softmax; on cuda no dlight rule takes that
PrimFunc and it falls to Fallback (threads bound to loops, nothing shared). Here the kernel
indexes BSHD directly:

    score[b, h, i, j]  = scale · Σ_d q[b, i, h, d] · k[b, j, h, d]  (+ bias, causal mask)
    weight[b, h, i, j] = exp(score − max_j score)       (0 for a row that is masked entirely)
    out[b, i, h, c]    = Σ_j (weight / Σ_j weight) · v[b, j, h, c]

the float math of PyTorch's math path (a row masked entirely gives zeros, as its
``_safe_softmax``). On GPU targets `AttentionRule` schedules it, ahead of dlight's rules: one
thread block per (batch, head, query row); the row's scores, max, weights and sum in shared
memory, computed by the block's threads with cross-thread reductions; each thread then sums
its output channels over the row. A kernel list names the rule ``Attention``.
"""

from __future__ import annotations

import math
from typing import Any

import tvm
from tvm import relax, te, tirx
from tvm.s_tir import dlight as dl

#: PrimFunc attribute marking the attention kernel (what `AttentionRule` schedules): its
#: float type.
ATTENTION_ATTR = "cl_validate.attention"
#: TVM's op pattern kind for an op FuseOps fuses with nothing (``relay.op.OpPattern.OPAQUE``).
_OPAQUE = 8
#: Threads per block at most: the row's keys (and output channels) in strides of this many.
THREADS = 128
#: Shared memory a block may hold without asking for more (48 KiB on every CUDA GPU): a row's
#: scores and weights must fit, else the rule leaves the kernel to the next one.
SHARED_LIMIT = 48 * 1024


def _broadcast_index(bias: te.Tensor, b: Any, h: Any, i: Any, j: Any) -> Any:
    dims = [int(d) for d in bias.shape]
    full = [b, h, i, j][4 - len(dims):]
    return bias[tuple(0 if d == 1 else x for d, x in zip(dims, full, strict=True))]


def threads_for(depth_v: int) -> int:
    """Threads per block on a GPU: the output channels' width rounded up to a power of two,
    one warp at least, `THREADS` at most."""
    return min(THREADS, max(32, 1 << (depth_v - 1).bit_length()))


def attention_te(q: te.Tensor, k: te.Tensor, v: te.Tensor, bias: te.Tensor | None,
                 scale: float | None, causal: str | None, pad_to: int = 1) -> te.Tensor:
    """The kernel's compute (module docstring), BSHD in, BSHD out. `pad_to`: keys and output
    channels are rounded up to a multiple of it (a GPU block's threads each own keys and
    channels, and a thread without one must still take part)."""
    batch, length, heads, depth = (int(d) for d in q.shape)
    real_keys, depth_v = int(k.shape[1]), int(v.shape[3])
    # Padded keys score -inf (weight 0) and padded channels copy the last one: on a GPU no
    # thread skips a step, so none waits for a barrier inside a branch.
    keys = -(-real_keys // pad_to) * pad_to
    padded = -(-depth_v // pad_to) * pad_to
    last_key = real_keys - 1
    dtype = q.dtype
    factor = tirx.const(scale if scale is not None else 1.0 / math.sqrt(depth), dtype)
    d = te.reduce_axis((0, depth), "d")
    dot = te.compute((batch, heads, length, keys), lambda b, h, i, j: te.sum(
        q[b, i, h, d] * k[b, tirx.min(j, last_key), h, d], axis=d), name="score_dot")
    offset = 0 if causal != "BottomRight" else abs(length - real_keys)
    minus_inf = tirx.const(float("-inf"), dtype)

    def scaled(b: Any, h: Any, i: Any, j: Any) -> Any:
        s = dot[b, h, i, j] * factor
        if bias is not None:
            s = s + _broadcast_index(bias, b, h, i, tirx.min(j, last_key)).astype(dtype)
        if causal is not None:
            s = tirx.Select(j > i + offset, minus_inf, s)
        if keys != real_keys:
            s = tirx.Select(j > last_key, minus_inf, s)
        return s

    score = te.compute((batch, heads, length, keys), scaled, name="score")
    j1 = te.reduce_axis((0, keys), "j1")
    row_max = te.compute((batch, heads, length), lambda b, h, i: te.max(
        score[b, h, i, j1], axis=j1), name="row_max")
    weight = te.compute((batch, heads, length, keys), lambda b, h, i, j: tirx.Select(
        row_max[b, h, i] == minus_inf, tirx.const(0, dtype),
        te.exp(score[b, h, i, j] - row_max[b, h, i])), name="weight")
    j2 = te.reduce_axis((0, keys), "j2")
    row_sum = te.compute((batch, heads, length), lambda b, h, i: te.sum(
        weight[b, h, i, j2], axis=j2), name="row_sum")
    j3 = te.reduce_axis((0, keys), "j3")
    zero = tirx.const(0, dtype)
    prob = te.compute((batch, heads, length, keys), lambda b, h, i, j: tirx.Select(
        row_sum[b, h, i] == zero, zero, weight[b, h, i, j] / row_sum[b, h, i]), name="prob")
    last = depth_v - 1
    acc = te.compute((batch, heads, length, padded), lambda b, h, i, c: te.sum(
        prob[b, h, i, j3] * v[b, tirx.min(j3, last_key), h, tirx.min(c, last)].astype(dtype),
        axis=j3),
        name="weighted")
    return te.compute((batch, length, heads, depth_v), lambda b, i, h, c: acc[b, h, i, c],
                      name="attention")


def _legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    scale = call.attrs.scale
    args = list(call.args[:3])
    bias = call.args[3] if len(call.args) > 3 else None
    shapes = [getattr(a.ty, "shape", None) for a in call.args]
    if any(s is None or any(not isinstance(d, tirx.IntImm) for d in s) for s in shapes) or \
            call.attrs.window_size is not None:
        return call  # symbolic shapes, a sliding window: TVM's own lowering (`fallback`)

    target = tvm.target.Target.current(allow_none=True)
    gpu = target is not None and "gpu" in target.keys
    depth_v = int(call.args[2].ty.shape[3])

    def compute(q: te.Tensor, k: te.Tensor, v: te.Tensor, *rest: te.Tensor) -> te.Tensor:
        return attention_te(q, k, v, rest[0] if rest else None,
                            None if scale is None else float(scale),
                            None if call.attrs.causal_mask is None
                            else str(call.attrs.causal_mask),
                            threads_for(depth_v) if gpu else 1)

    out = bb.call_te(compute, *args, *([bias] if bias is not None else []),
                     primfunc_name_hint="attention")
    gvar = out.args[0]
    # Opaque to FuseOps: fused with a neighbour it would be a new PrimFunc that no rule knows
    func = bb.get()[gvar].with_attrs({ATTENTION_ATTR: str(args[0].ty.dtype),
                                      "op_pattern": _OPAQUE})
    if not gpu:
        func = _cpu_loop_order(func)
    bb.update_func(gvar, func)
    return out


def attention_legalizations() -> dict[str, Any]:
    """``customize_legalize_map`` entries for ``nn.attention`` (and its bias form); an op
    they cannot take (symbolic shapes) goes to TVM's own lowering."""
    def with_fallback(op: str) -> Any:
        default = tvm.ir.Op.get(op).get_attr("FLegalize")

        def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
            out = _legalize(bb, call)
            return default(bb, call) if out is call else out

        return legalize

    return {op: with_fallback(op) for op in ("relax.nn.attention", "relax.nn.attention_bias")}


def _cpu_loop_order(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """On a CPU (no schedule is applied there): the weighted sum runs over keys outside the
    output channels, so the innermost loop walks V's and the output's channels contiguously
    (BSHD) rather than striding over the keys; the row's probabilities are computed once
    each, not once per channel."""
    sch = tvm.s_tir.Schedule(func)
    block = sch.get_sblock("weighted")
    *_, c, j = sch.get_loops(block)
    sch.reorder(j, c)
    sch.decompose_reduction(block, j)
    return sch.mod["main"].with_attrs(dict(func.attrs))


class AttentionRule(dl.ScheduleRule):  # type: ignore[misc]
    """Schedules the attention kernel (`ATTENTION_ATTR`) for a GPU: one thread block per
    (batch, head, query row), `THREADS` threads; the row's scores and weights in shared
    memory, its max and sum by cross-thread reductions; each thread sums the output channels
    it owns over the row's keys in a register."""

    def apply(self, func: tirx.PrimFunc, target: Any, _tunable: bool) -> Any:
        if not isinstance(func, tirx.PrimFunc) or func.attrs is None or \
                ATTENTION_ATTR not in func.attrs or "gpu" not in target.keys:
            return None
        sch = tvm.s_tir.Schedule(func)
        weighted = sch.get_sblock("weighted")
        b, h, i, c, j = sch.get_loops(weighted)
        threads = threads_for(int(sch.get(c).extent))
        dtype = str(func.attrs[ATTENTION_ATTR])  # the kernel's float type
        row_bytes = 2 * int(sch.get(j).extent) * tvm.DataType(dtype).bits // 8
        if row_bytes > SHARED_LIMIT:
            return None  # a row's scores and weights do not fit a block's shared memory
        sch.compute_inline(sch.get_sblock("score"))
        sch.compute_inline(sch.get_sblock("prob"))
        row = sch.fuse(b, h, i)
        _, tc = sch.split(c, [None, threads])
        sch.bind(row, "blockIdx.x")
        sch.bind(tc, "threadIdx.x")
        out = sch.get_sblock("attention")
        sch.reverse_compute_at(out, tc)
        sch.set_scope(weighted, 0, "local")
        for name in ("row_sum", "weight", "row_max", "score_dot"):
            block = sch.get_sblock(name)
            sch.compute_at(block, row)
            sch.set_scope(block, 0, "shared")
            loops = sch.get_loops(block)
            axis = loops[1]  # the key axis j, under the row
            _, tx = sch.split(axis, [None, threads])
            sch.bind(tx, "threadIdx.x")
        return sch
