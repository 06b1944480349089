"""Attention on a GPU in one kernel: K and V read in tiles every query row of a block shares,
the softmax computed online, so the scores never reach global memory.

A thread block takes `Tiles.rows` query rows of one (batch, head). It keeps those rows of Q
in shared memory and walks the keys a tile (`Tiles.keys`) at a time: it loads the tile's K
and V rows into shared memory, computes the tile's scores (scaled, biased, masked), and
folds them into each row's running maximum ``m`` and sum ``l`` — the sum and the output
accumulated so far are rescaled by ``exp(m_old - m_new)`` when the maximum grows — then adds
the tile's probabilities times V to the row's output, held in registers. At the end the
output is divided by ``l`` (a row masked entirely has ``l = 0`` and gives zeros, as the
softmax of `cl_validate.compile.attention` does). Everything is summed in float32 (in the
accumulation dtype); the result is rounded once to the inputs' dtype.

Global-memory traffic per attention is Q, K and V once per block of query rows and the
output once, where the two products and a softmax between them write and read the
(batch, heads, queries, keys) scores and probabilities: at 4096 tokens and 16 heads, 4 GiB.

The same kernel is also built with its threads as serial loops (``threads=False``), each
phase between two barriers a loop over the threads of its own: that form runs on a CPU and
computes exactly what the GPU's threads compute, so a CPU runner can test the kernel's index
arithmetic, masks and online softmax against PyTorch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from tvm import tirx
from tvm.script import tirx as TS
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

#: PrimFunc attribute of a tiled kernel: its operands and tiles (`describe`), from which its
#: CPU form is built again (`cpu_form`: the kernel check compares the two).
TILES_ATTR = "cl_validate.attention_tiles"
#: Threads per block, unless a `Tiles` says otherwise.
THREADS = 128
#: Shared memory a block may use without opting in to more (every CUDA GPU since sm_20).
SHARED_BYTES = 48 * 1024
#: Registers a thread may give its part of the output (floats); more spills to local memory.
_OUTPUT_REGISTERS = 64


@dataclass(frozen=True)
class Tiles:
    """How a block's work is cut: `rows` query rows per block, `keys` keys per tile; in the
    scores phase each thread computes `score_rows` x 4 scores, in the output phase
    `out_rows` x `out_cols` outputs (rows strided by the number of row groups, columns by the
    number of column groups, so a warp's reads of shared memory fall in distinct banks)."""

    rows: int
    keys: int
    score_rows: int
    out_rows: int
    out_cols: int
    threads: int = THREADS

    @property
    def key_groups(self) -> int:
        return self.keys // 4

    @property
    def row_groups(self) -> int:
        return self.threads // self.key_groups

    @property
    def col_groups(self) -> int:
        return self.threads * self.out_rows // self.rows


def shared_bytes(rows: int, keys: int, depth: int, depth_v: int) -> int:
    """Shared memory of a block: Q's rows, K's and V's tile, the tile's scores (rows of Q and
    K padded by one float, so a column's elements fall in distinct banks) and three floats
    per row (maximum, sum, rescale factor)."""
    return 4 * (rows * (depth + 1) + keys * (depth + 1) + keys * depth_v
                + rows * (keys + 1) + 3 * rows)


@dataclass(frozen=True)
class Operands:
    """The shapes and storage of one attention: Q, K and V each BSHD or, read in place of a
    transpose, BHSD (`heads_first`); K and V may have one batch or one head (broadcast);
    `bias` broadcasts to (batch, heads, queries, keys)."""

    q: tuple[int, ...]
    k: tuple[int, ...]
    v: tuple[int, ...]
    bias: tuple[int, ...] | None
    dtype: str
    bias_dtype: str
    heads_first: tuple[bool, bool, bool]
    scale: float | None
    causal: str | None

    def bshd(self, which: int) -> tuple[int, int, int, int]:
        b, x, y, d = ((self.q, self.k, self.v)[which])
        return (b, y, x, d) if self.heads_first[which] else (b, x, y, d)


#: Blocks of 64 query rows below which a grid leaves SMs idle and 32-row blocks are faster:
#: about one block per SM of an H100 or H200 (132). On an H200 (BENCHMARKS.md), 197 tokens of
#: 6 heads (24 blocks of 64 rows) took 0.035 ms in 64-row blocks and 0.025 ms in 32-row ones;
#: 4096 tokens of 16 heads (1024 blocks) 2.89 ms and 3.78 ms.
FULL_GRID = 128


def tiles_for(depth: int, depth_v: int, sizes: tuple[tuple[int, int, int], ...] = (
        (64, 32, THREADS), (32, 32, THREADS))) -> Tiles | None:
    """The first of `sizes` (query rows, keys, threads) whose shared memory fits
    `SHARED_BYTES` and whose phases divide among the threads, or None (the attention is then
    lowered as two products and a softmax). Tiles of 16 keys are not among the default sizes:
    with one score row per thread they were slower on an H200 than the two products and the
    softmax (2048 tokens, 8 heads of 128: 1.21 ms against 1.14 ms)."""
    for rows, keys, threads in sizes:
        if shared_bytes(rows, keys, depth, depth_v) > SHARED_BYTES or \
                threads % (keys // 4) or rows % (threads // (keys // 4)):
            continue
        score_rows = rows * (keys // 4) // threads
        for col_groups in (8, 4, 2):
            if depth_v % col_groups or threads // col_groups > rows or \
                    rows % (threads // col_groups):
                continue
            out_rows = rows * col_groups // threads
            out_cols = depth_v // col_groups
            if out_rows * out_cols <= _OUTPUT_REGISTERS:
                return Tiles(rows, keys, score_rows, out_rows, out_cols, threads)
    return None


def choose_tiles(ops: Operands) -> Tiles | None:
    """The tiles for `ops`: 64 query rows per block where that still gives `FULL_GRID`
    blocks, else 32 (more blocks for a short sequence)."""
    batch, length, heads, depth = ops.bshd(0)
    full = batch * heads * -(-length // 64) >= FULL_GRID
    sizes = ((64, 32, THREADS), (32, 32, THREADS))
    return tiles_for(depth, ops.bshd(2)[3], sizes if full else sizes[::-1])


class _Rows:
    """A buffer of rows `stride` elements apart, stored flat: padded rows stay padded (a
    two-dimensional buffer is compacted to the region its loops touch, which drops the pad and
    puts a column's elements in one bank of shared memory)."""

    def __init__(self, buf: Any, stride: int) -> None:
        self.buf, self.stride = buf, stride

    def at(self, row: Any, col: Any) -> list[Any]:
        return [row * self.stride + col]

    def __getitem__(self, index: tuple[Any, Any]) -> Any:
        return self.buf[self.at(*index)[0]]


def accumulation(dtype: str) -> str:
    """The dtype attention sums in for inputs of `dtype`: float32 for the half types."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def _at(buf: Any, heads_first: bool, shape: tuple[int, int, int, int], b: Any, s: Any,
        h: Any, c: Any) -> Any:
    batch, _, heads, _ = shape
    b, h = (0 if batch == 1 else b), (0 if heads == 1 else h)
    return buf[b, h, s, c] if heads_first else buf[b, s, h, c]


def _bias_at(buf: Any, shape: tuple[int, ...], b: Any, h: Any, i: Any, j: Any) -> Any:
    full = [b, h, i, j][4 - len(shape):]
    return buf[tuple(0 if d == 1 else x for d, x in zip(shape, full, strict=True))]


def tiled_attention(ops: Operands, tiles: Tiles, threads: bool = True) -> tirx.PrimFunc:
    """The kernel for `ops` cut as `tiles`: a GPU kernel, or (``threads=False``) the same
    computation with its threads and blocks as serial loops, for a CPU."""
    batch, length, heads, depth = ops.bshd(0)
    keys_len, depth_v = ops.bshd(1)[1], ops.bshd(2)[3]
    acc = accumulation(ops.dtype)
    factor = ops.scale if ops.scale is not None else 1.0 / math.sqrt(depth)
    offset = abs(length - keys_len) if ops.causal == "BottomRight" else 0
    rows, keys, threads_n = tiles.rows, tiles.keys, tiles.threads
    blocks_q = -(-length // rows)
    minus_inf, zero = tirx.const(float("-inf"), acc), tirx.const(0.0, acc)
    out_shape = (batch, length, heads, depth_v)

    def f(x: Any) -> Any:
        return tirx.const(x, acc) if isinstance(x, float) else x

    with IRBuilder() as builder:
        with T.prim_func():
            T.func_name("attention_tiled")
            q = T.arg("q", T.buffer(ops.q, ops.dtype))
            k = T.arg("k", T.buffer(ops.k, ops.dtype))
            v = T.arg("v", T.buffer(ops.v, ops.dtype))
            bias = T.arg("bias", T.buffer(ops.bias, ops.bias_dtype)) \
                if ops.bias is not None else None
            out = T.arg("out", T.buffer(out_shape, ops.dtype))
            block_loop = T.thread_binding(batch * heads * blocks_q, thread="blockIdx.x") \
                if threads else T.serial(batch * heads * blocks_q)
            with block_loop as bx:
                q0 = (bx % blocks_q) * rows
                h = (bx // blocks_q) % heads
                b = bx // (blocks_q * heads)
                alloc = T.alloc_shared if threads else T.alloc_buffer
                # per-thread scratch: registers on a GPU, a plain buffer on a CPU
                local = T.alloc_local if threads else T.alloc_buffer
                q_s = _Rows(alloc((rows * (depth + 1),), acc), depth + 1)
                k_s = _Rows(alloc((keys * (depth + 1),), acc), depth + 1)
                v_s = _Rows(alloc((keys * depth_v,), acc), depth_v)
                s_s = _Rows(alloc((rows * (keys + 1),), acc), keys + 1)
                m_s, l_s, a_s = (alloc((rows,), acc) for _ in range(3))
                n_out = tiles.out_rows * tiles.out_cols
                # per-thread output: registers on a GPU; one row per thread on a CPU
                acc_all = None if threads else T.alloc_buffer((threads_n, n_out), acc)
                tiles_k = -(-keys_len // keys)
                if ops.causal is not None:  # tiles wholly above the diagonal are skipped
                    last = tirx.min(q0 + rows + offset, keys_len)
                    tiles_k = tirx.min(tiles_k, (last + keys - 1) // keys)

                def each(n: int, body: Callable[[Any], None], tx: Any) -> None:
                    """`body(e)` for this thread's share e of n items (tx, tx + the
                    number of threads, ...)."""
                    with T.serial(-(-n // threads_n)) as it:
                        e = it * threads_n + tx
                        if n % threads_n == 0:
                            body(e)
                        else:
                            with T.If(e < n), T.Then():
                                body(e)

                def load(dst: _Rows, src: Any, which: int, start: Any, limit: int,
                         width: int) -> Callable[[Any], None]:
                    """Element e of a tile: row `start` + e // width of Q, K or V (`which`),
                    zeros past `limit`."""
                    def body(e: Any) -> None:
                        row, col = e // width, e % width
                        T.buffer_store(dst.buf, tirx.if_then_else(
                            start + row < limit,
                            _at(src, ops.heads_first[which], ops.bshd(which), b, start + row, h,
                                col).astype(acc), zero), dst.at(row, col))
                    return body

                def init(tx: Any, out_acc: Any) -> None:
                    def state(r: Any) -> None:
                        T.buffer_store(m_s, minus_inf, [r])
                        T.buffer_store(l_s, zero, [r])

                    each(rows * depth, load(q_s, q, 0, q0, length, depth), tx)
                    each(rows, state, tx)
                    with T.serial(n_out) as n:
                        T.buffer_store(out_acc, zero, acc_index(tx, n))

                def acc_index(tx: Any, n: Any) -> list[Any]:
                    return [n] if threads else [tx, n]

                def load_kv(tx: Any, k0: Any) -> None:
                    each(keys * depth, load(k_s, k, 1, k0, keys_len, depth), tx)
                    each(keys * depth_v, load(v_s, v, 2, k0, keys_len, depth_v), tx)

                def scores(tx: Any, k0: Any) -> None:
                    tr, tk = tx // tiles.key_groups, tx % tiles.key_groups
                    part = local((tiles.score_rows * 4,), acc)
                    with T.unroll(tiles.score_rows * 4) as n:
                        T.buffer_store(part, zero, [n])
                    with T.serial(depth) as d:
                        with T.unroll(tiles.score_rows) as u:
                            with T.unroll(4) as w:
                                T.buffer_store(part, part[u * 4 + w]
                                               + q_s[tr + u * tiles.row_groups, d]
                                               * k_s[tk + w * tiles.key_groups, d], [u * 4 + w])
                    with T.unroll(tiles.score_rows) as u:
                        with T.unroll(4) as w:
                            r, j = tr + u * tiles.row_groups, tk + w * tiles.key_groups
                            i, key = q0 + r, k0 + j
                            s = part[u * 4 + w] * f(factor)
                            if bias is not None:
                                s = s + tirx.if_then_else(
                                    tirx.all(i < length, key < keys_len),
                                    _bias_at(bias, ops.bias or (), b, h, i, key).astype(acc),
                                    zero)
                            masked = key >= keys_len
                            if ops.causal is not None:
                                masked = tirx.Or(masked, key > i + offset)
                            T.buffer_store(s_s.buf, tirx.Select(masked, minus_inf, s), s_s.at(r, j))

                def softmax(tx: Any) -> None:
                    # reads the scores only: each is exponentiated where it is used (the
                    # output phase), so no phase writes what it reads at another index
                    def row(r: Any) -> None:
                        top = local((2,), acc)
                        T.buffer_store(top, m_s[r], [0])
                        with T.serial(keys) as j:
                            T.buffer_store(top, tirx.max(top[0], s_s[r, j]), [0])
                        new = top[0]
                        alpha = tirx.Select(new == minus_inf, zero, tirx.exp(m_s[r] - new))
                        T.buffer_store(top, l_s[r] * alpha, [1])
                        with T.serial(keys) as j:
                            T.buffer_store(top, top[1] + tirx.Select(
                                new == minus_inf, zero, tirx.exp(s_s[r, j] - new)), [1])
                        T.buffer_store(a_s, alpha, [r])
                        T.buffer_store(m_s, new, [r])
                        T.buffer_store(l_s, top[1], [r])

                    each(rows, row, tx)

                def placed(tx: Any) -> tuple[Any, Any, int, int]:
                    """A thread's row and column group in the output phase, and the groups'
                    strides (row groups, column groups)."""
                    groups = tiles.col_groups
                    return tx // groups, tx % groups, threads_n // groups, groups

                def output(tx: Any, out_acc: Any) -> None:
                    tr, tc, row_groups, groups = placed(tx)
                    with T.unroll(tiles.out_rows) as u:
                        with T.unroll(tiles.out_cols) as w:
                            n = u * tiles.out_cols + w
                            T.buffer_store(out_acc, out_acc[tuple(acc_index(tx, n))]
                                           * a_s[tr + u * row_groups], acc_index(tx, n))
                    prob = local((tiles.out_rows,), acc)
                    with T.serial(keys) as j:
                        with T.unroll(tiles.out_rows) as u:
                            r = tr + u * row_groups
                            T.buffer_store(prob, tirx.Select(
                                m_s[r] == minus_inf, zero, tirx.exp(s_s[r, j] - m_s[r])), [u])
                        with T.unroll(tiles.out_rows) as u:
                            with T.unroll(tiles.out_cols) as w:
                                n = u * tiles.out_cols + w
                                T.buffer_store(out_acc, out_acc[tuple(acc_index(tx, n))]
                                               + prob[u] * v_s[j, tc + w * groups],
                                               acc_index(tx, n))

                def store(tx: Any, out_acc: Any) -> None:
                    tr, tc, row_groups, groups = placed(tx)
                    with T.unroll(tiles.out_rows) as u:
                        r = tr + u * row_groups
                        with T.If(q0 + r < length), T.Then():
                            with T.unroll(tiles.out_cols) as w:
                                total = l_s[r]
                                value = tirx.Select(
                                    total == zero, zero,
                                    out_acc[tuple(acc_index(tx, u * tiles.out_cols + w))] / total)
                                T.buffer_store(out, value.astype(ops.dtype),
                                               [b, q0 + r, h, tc + w * groups])

                _emit(threads, threads_n, acc_all, n_out, acc, tiles_k, keys,
                      init, load_kv, scores, softmax, output, store)
            T.func_attr({"tirx.noalias": True})
    return builder.get()


def _sync() -> None:
    T.evaluate(TS.tvm_storage_sync("shared"))


def _emit(threads: bool, threads_n: int, acc_all: Any, n_out: int, acc: str, tiles_k: Any,
          keys: int,
          init: Callable[..., None], load_kv: Callable[..., None],
          scores: Callable[..., None], softmax: Callable[..., None],
          output: Callable[..., None], store: Callable[..., None]) -> None:
    """The phases in order, barriers between them: one loop over the threads with
    barriers (a GPU), or a loop over the threads for each phase (a CPU)."""
    if threads:
        with T.thread_binding(threads_n, thread="threadIdx.x") as tx:
            out_acc = T.alloc_local((n_out,), acc)
            init(tx, out_acc)
            _sync()
            with T.serial(tiles_k) as kt:
                load_kv(tx, kt * keys)
                _sync()
                scores(tx, kt * keys)
                _sync()
                softmax(tx)
                _sync()
                output(tx, out_acc)
                _sync()
            store(tx, out_acc)
        return
    with T.serial(threads_n) as tx:
        init(tx, acc_all)
    with T.serial(tiles_k) as kt:
        for phase in (lambda t: load_kv(t, kt * keys), lambda t: scores(t, kt * keys),
                      softmax, lambda t: output(t, acc_all)):
            with T.serial(threads_n) as tx:
                phase(tx)
    with T.serial(threads_n) as tx:
        store(tx, acc_all)


def describe(ops: Operands, tiles: Tiles) -> str:
    """`ops` and `tiles` as JSON text, for `TILES_ATTR`."""
    return json.dumps({"operands": asdict(ops), "tiles": asdict(tiles)})


def cpu_form(func: tirx.PrimFunc) -> tirx.PrimFunc | None:
    """The CPU form of a tiled kernel `func` (the same computation, threads as serial loops),
    or None for any other PrimFunc."""
    text = func.attrs.get(TILES_ATTR) if func.attrs is not None else None
    if text is None:
        return None
    data = json.loads(str(text))
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                              for k, v in data["operands"].items()}
    return tiled_attention(Operands(**fields), Tiles(**data["tiles"]), threads=False)
