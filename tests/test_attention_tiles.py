"""The GPU's tiled attention kernel (K and V in shared-memory tiles, an online softmax): its
CPU form, the same computation with the threads as serial loops, against PyTorch's SDPA in
float64 over tiles cut unevenly, masks, biases, broadcast heads and batches, half dtypes and
head-major operands; its tiles within a block's shared memory; its cuda build."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import tvm
from tvm import relax

from cl_validate.compile.attention import ATTENTION_ATTR, attention_legalizations
from cl_validate.compile.attention_tiles import (
    SHARED_BYTES,
    THREADS,
    Operands,
    choose_tiles,
    cpu_form,
    shared_bytes,
    tiled_attention,
    tiles_for,
)
from tests.test_attention import _attention_module


def _sdpa(q, k, v, bias, scale, causal) -> np.ndarray:
    """PyTorch's SDPA in float64 on BSHD arrays, K/V heads and batches broadcast; a row masked
    entirely gives zeros (PyTorch's math path gives NaN there; its kernels zeros)."""
    qt, kt, vt = (torch.from_numpy(x.astype(np.float64)).transpose(1, 2) for x in (q, k, v))
    kt, vt = (x.expand(qt.shape[0], qt.shape[1], -1, -1) for x in (kt, vt))
    length, keys = qt.shape[2], kt.shape[2]
    mask = torch.zeros(length, keys, dtype=torch.float64)
    if causal is not None:
        offset = keys - length if causal == "BottomRight" else 0
        mask = mask.masked_fill(torch.ones(length, keys, dtype=torch.bool).tril(offset)
                                .logical_not(), float("-inf"))
    if bias is not None:
        mask = mask + torch.from_numpy(bias.astype(np.float64))
    out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=scale)
    return torch.nan_to_num(out, nan=0.0).transpose(1, 2).numpy()


def _run_cpu_form(func: tvm.tirx.PrimFunc, inputs: list[np.ndarray], out_shape, dtype):
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                      target=tvm.target.Target({"kind": "llvm"}))
    args = [tvm.runtime.tensor(x) for x in inputs]
    out = tvm.runtime.tensor(np.zeros(out_shape, dtype))
    lib["main"](*args, out)
    return out.numpy()


def _legalized_for_a_gpu(q, k, v, bias, scale, causal, dtype) -> tvm.tirx.PrimFunc:
    mod = _attention_module(q, k, v, bias=bias, scale=scale, causal=causal, dtype=dtype)
    with tvm.target.Target({"kind": "cuda", "arch": "sm_90"}):
        legal = relax.transform.LegalizeOps(customize_legalize_map=attention_legalizations())(
            mod)
    funcs = [f for _, f in legal.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert len(funcs) == 1 and funcs[0].attrs[ATTENTION_ATTR] == "tiled"
    return funcs[0]


CASES = {
    # name: (batch, queries, keys, q heads, k/v heads, depth, depth_v, bias, causal, dtype)
    "uneven-tiles": (2, 70, 100, 3, 3, 16, 16, None, None, "float32"),
    "multi-query-bias": (2, 33, 100, 3, 1, 8, 8, (1, 3, 33, 100), None, "float32"),
    "causal": (1, 130, 130, 2, 2, 64, 64, None, "TopLeft", "float32"),
    "bottom-right-bias": (1, 20, 50, 2, 2, 64, 64, (1, 1, 20, 50), "BottomRight", "float32"),
    "head-dims-differ": (2, 40, 70, 2, 2, 40, 24, (2, 1, 1, 70), None, "float32"),
    "wide-heads": (1, 50, 90, 2, 1, 96, 96, None, "TopLeft", "float32"),
    "one-query": (3, 1, 77, 4, 4, 64, 64, None, None, "float32"),
    "half": (1, 70, 70, 2, 2, 64, 64, (1, 2, 70, 70), None, "float16"),
    "masked-rows": (1, 40, 40, 2, 2, 16, 16, (1, 1, 40, 40), None, "float32"),
}


@pytest.mark.parametrize("case", CASES)
def test_the_tiled_kernel_computes_pytorchs_attention(case):
    """Legalized for a GPU, the attention is one tiled kernel; its CPU form gives PyTorch's
    SDPA (float64) to float32's rounding, for tiles cut unevenly, multi-query heads, biases
    of every broadcast shape, both causal masks, differing head dimensions, one query row,
    float16 (summed in float32), and rows masked entirely (zeros)."""
    b, length, keys, hq, hkv, depth, depth_v, bias_shape, causal, dtype = CASES[case]
    rng = np.random.default_rng(3)
    q = rng.standard_normal((b, length, hq, depth)).astype(dtype)
    k = rng.standard_normal((b, keys, hkv, depth)).astype(dtype)
    v = rng.standard_normal((b, keys, hkv, depth_v)).astype(dtype)
    bias = None if bias_shape is None else rng.standard_normal(bias_shape).astype(dtype)
    if case == "masked-rows":
        bias[..., [3, 17], :] = -np.inf
    func = _legalized_for_a_gpu(q.shape, k.shape, v.shape, bias_shape, 0.3, causal, dtype)
    inputs = [q, k, v, *([bias] if bias is not None else [])]
    got = _run_cpu_form(cpu_form(func), inputs, (b, length, hq, depth_v), dtype)
    want = _sdpa(q, k, v, bias, 0.3, causal)
    tol = 2e-3 if dtype == "float16" else 2e-5
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)
    if case == "masked-rows":
        assert not got[:, [3, 17]].any()


def test_head_major_operands_are_read_in_place():
    """Q and V stored (batch, heads, sequence, dim), K BSHD: the kernel indexes each as it
    is stored."""
    rng = np.random.default_rng(4)
    q = rng.standard_normal((2, 3, 45, 16)).astype("float32")
    k = rng.standard_normal((2, 60, 3, 16)).astype("float32")
    v = rng.standard_normal((2, 3, 60, 8)).astype("float32")
    ops = Operands(q.shape, k.shape, v.shape, None, "float32", "float32", (True, False, True),
                   None, None)
    got = _run_cpu_form(tiled_attention(ops, tiles_for(16, 8), threads=False), [q, k, v],
                        (2, 45, 3, 8), "float32")
    want = _sdpa(q.transpose(0, 2, 1, 3), k, v.transpose(0, 2, 1, 3), None, None, None)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_tiles_fit_a_blocks_shared_memory_and_divide_among_its_threads():
    """For every head dimension up to 256: tiles whose shared memory fits 48 KiB, whose scores
    and outputs cut evenly among the block's threads; or none (the three kernels)."""
    for depth in range(1, 257):
        for depth_v in {depth, max(1, depth // 2)}:
            tiles = tiles_for(depth, depth_v)
            if tiles is None:
                continue
            assert shared_bytes(tiles.rows, tiles.keys, depth, depth_v) <= SHARED_BYTES
            assert tiles.row_groups * tiles.score_rows == tiles.rows
            assert tiles.key_groups * 4 == tiles.keys
            assert (THREADS // tiles.col_groups) * tiles.out_rows == tiles.rows
            assert tiles.col_groups * tiles.out_cols == depth_v
    assert tiles_for(64, 64) is not None and tiles_for(96, 96) is not None
    # measured slower than the three kernels on an H200 in the only cut that fits
    assert tiles_for(128, 128) is None and tiles_for(64, 3) is None


def test_a_short_sequence_is_cut_in_blocks_of_fewer_rows():
    """64 query rows per block where that gives a full grid, 32 where it would leave SMs
    idle (197 tokens of 6 heads: 24 blocks of 64 rows)."""
    def rows(shape):  # type: ignore[no-untyped-def]
        ops = Operands(shape, shape, shape, None, "float32", "float32", (False,) * 3, None,
                       None)
        return choose_tiles(ops).rows

    assert rows((1, 197, 6, 64)) == 32
    assert rows((1, 4096, 16, 64)) == 64
    assert rows((8, 197, 6, 64)) == 64  # a batch fills the grid too


def test_the_cpu_form_is_only_the_tiled_kernels():
    """`cpu_form` rebuilds a tiled kernel from its attribute and declines any other."""
    func = _legalized_for_a_gpu((1, 9, 2, 8), (1, 9, 2, 8), (1, 9, 2, 8), None, None, None,
                                "float32")
    serial = cpu_form(func)
    assert serial is not None and "threadIdx" not in serial.script()
    assert "threadIdx.x" in func.script() and cpu_form(serial) is None


def test_the_tiled_kernel_builds_for_a_gpu_at_a_long_length():
    """4096 tokens, 16 heads of 64, causal: the kernel builds for sm_90 (its shared memory
    within the block's 48 KiB)."""
    func = _legalized_for_a_gpu((1, 4096, 16, 64), (1, 4096, 16, 64), (1, 4096, 16, 64),
                                None, None, "TopLeft", "float32")
    tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))


@pytest.mark.parametrize("size", [(64, 32, 128), (32, 32, 128), (64, 32, 64), (32, 16, 128)],
                         ids=lambda s: "x".join(map(str, s)))
def test_every_cut_of_the_tiles_computes_the_same_attention(size):
    """The cuts the code picks (64 or 32 query rows) and the ones the benchmark times, on a
    causal, biased attention with a row masked whole and a partial last tile each way."""
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 75, 3, 16)).astype("float32")
    k = rng.standard_normal((2, 75, 1, 16)).astype("float32")
    v = rng.standard_normal((2, 75, 1, 16)).astype("float32")
    bias = rng.standard_normal((2, 3, 75, 75)).astype("float32")
    bias[:, :, 9] = -np.inf
    ops = Operands(q.shape, k.shape, v.shape, bias.shape, "float32", "float32",
                   (False, False, False), 0.3, "TopLeft")
    tiles = tiles_for(16, 16, (size,))
    assert tiles is not None and (tiles.rows, tiles.keys, tiles.threads) == size
    got = _run_cpu_form(tiled_attention(ops, tiles, threads=False), [q, k, v, bias],
                        (2, 75, 3, 16), "float32")
    np.testing.assert_allclose(got, _sdpa(q, k, v, bias, 0.3, "TopLeft"), rtol=2e-5,
                               atol=2e-5)
    assert not got[:, 9].any()
