"""On x86 without AVX2 (plain ``llvm``), an integer convolution's channel sum runs in chunks of
32 with the chunk loop outside the window (`compile/integer_chunks.py`): far less machine code,
the same bits; float sums, 1x1 windows, short or uneven channel counts and other targets are
left as TVM makes them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import s_tir, te, tirx  # noqa: E402

from cl_validate.compile.integer_chunks import CHUNK, chunk_integer_sums  # noqa: E402

LLVM = tvm.target.Target("llvm")


def _conv(channels: int, window: int, dtype: str = "int8") -> Any:
    """An NHWC convolution as TOPI writes it (window and channels summed innermost, the
    channels last), of an already padded input: int8 products summed in int32, or float32."""
    acc = "int32" if dtype == "int8" else "float32"
    x = te.placeholder((1, 4 + window - 1, 4 + window - 1, channels), dtype, name="x")
    w = te.placeholder((8, window, window, channels), dtype, name="w")
    ry = te.reduce_axis((0, window), "ry")
    rx = te.reduce_axis((0, window), "rx")
    rc = te.reduce_axis((0, channels), "rc")
    out = te.compute((1, 4, 4, 8), lambda n, y, x_, f: te.sum(
        x[n, y + ry, x_ + rx, rc].astype(acc) * w[f, ry, rx, rc].astype(acc),
        axis=[ry, rx, rc]), name="conv")
    return tvm.IRModule({"main": te.create_prim_func([x, w, out])})


def _loops(mod: Any) -> list[tuple[str, int]]:
    sch = s_tir.Schedule(mod["main"])
    block = sch.get_sblock("conv")
    return [(str(sch.get(lp).loop_var), int(sch.get(lp).extent)) for lp in sch.get_loops(block)]


def _build(mod: Any) -> tuple[Any, str]:
    lib = tvm.compile(mod, target="llvm")
    return lib, lib.mod.inspect_source("ll")


def _run(lib: Any, channels: int, window: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    side = 4 + window - 1
    args = [rng.integers(-128, 128, (1, side, side, channels), dtype=np.int8),
            rng.integers(-128, 128, (8, window, window, channels), dtype=np.int8),
            np.zeros((1, 4, 4, 8), np.int32)]
    tensors = [tvm.runtime.tensor(a) for a in args]
    lib["main"](*tensors)
    return tensors[-1].numpy()


def test_a_3x3_int8_sum_runs_in_chunks_outside_the_window_with_the_same_bits() -> None:
    mod = _conv(128, 3)
    chunked = chunk_integer_sums(mod, LLVM)
    loops = _loops(chunked)
    # spatial loops, then the chunk loop, the window, and 32 channels innermost
    assert [e for _, e in loops] == [1, 4, 4, 8, 128 // CHUNK, 3, 3, CHUNK], loops
    whole_lib, whole_ll = _build(mod)
    chunked_lib, chunked_ll = _build(chunked)
    assert np.array_equal(_run(whole_lib, 128, 3), _run(chunked_lib, 128, 3))
    # the point of it: LLVM no longer unrolls 3 x 3 x 128 products into straight-line code
    assert chunked_ll.count("\n") < 0.6 * whole_ll.count("\n"), \
        (chunked_ll.count("\n"), whole_ll.count("\n"))


def test_the_bits_are_numpys_integer_sum() -> None:
    lib, _ = _build(chunk_integer_sums(_conv(64, 3), LLVM))
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, 6, 6, 64), dtype=np.int8)
    w = rng.integers(-128, 128, (8, 3, 3, 64), dtype=np.int8)
    want = np.zeros((1, 4, 4, 8), np.int64)
    for y in range(4):
        for x_ in range(4):
            want[0, y, x_] = np.einsum("abc,fabc->f", x[0, y:y + 3, x_:x_ + 3].astype(np.int64),
                                       w.astype(np.int64))
    assert np.array_equal(_run(lib, 64, 3), want.astype(np.int32))


@pytest.mark.parametrize(("channels", "window", "dtype", "why"), [
    (128, 3, "float32", "a float sum's order is its rounding"),
    (128, 1, "int8", "a 1x1 window: nothing to move the chunks out of"),
    (32, 3, "int8", "channels that fit in one chunk"),
    (48, 3, "int8", "channels not a multiple of the chunk"),
])
def test_left_as_tvm_makes_it(channels: int, window: int, dtype: str, why: str) -> None:
    mod = _conv(channels, window, dtype)
    assert chunk_integer_sums(mod, LLVM)["main"].same_as(mod["main"]), why


@pytest.mark.parametrize("target", [
    {"kind": "llvm", "mcpu": "skylake-avx512"},  # wider vectors: 32 ran slower there
    {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]},  # not measured
    {"kind": "c"},
])
def test_other_targets_are_left_as_tvm_makes_them(target: dict[str, Any]) -> None:
    mod = _conv(128, 3)
    assert chunk_integer_sums(mod, tvm.target.Target(target))["main"].same_as(mod["main"])


def test_a_functions_other_blocks_and_attrs_are_kept() -> None:
    mod = _conv(64, 3)
    func = mod["main"].with_attr("global_symbol", "conv_main")
    out = chunk_integer_sums(tvm.IRModule({"main": func}), LLVM)["main"]
    assert out.attrs["global_symbol"] == "conv_main"
    assert isinstance(out, tirx.PrimFunc)


CASE = """
model = "quant_models:wide_convs"
targets = ["llvm"]
[[inputs]]
name = "x"
shape = [1, 3, 16, 16]
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
[budget]
float_qdq_products = 0
[tolerance]
reference = "float64"
steps = 1
"""


@pytest.mark.compile
def test_a_quantized_3x3_conv_of_64_channels_is_chunked_and_within_one_step(write_case) -> None:
    """Through the whole pipeline: the PT2E network's second convolution (int8, 3 x 3 x 64)
    is summed in chunks in the final program, and the program is within one step of the
    quantized reference."""
    pytest.importorskip("torchao")
    from cl_validate.checks.verdict import Status
    from cl_validate.compile.program import compile_case
    from cl_validate.session.case_session import CaseSession
    from cl_validate.session.in_process import judge_in_process
    from cl_validate.spec import load_case
    from cl_validate.spec.options import RunOptions

    case = load_case(write_case(CASE))
    session = CaseSession(case)
    assert session.prepare() is None
    final = compile_case(session.front, session.case, "llvm").final
    chunked = []
    for gv, func in final.functions_items():
        if not isinstance(func, tirx.PrimFunc) or "conv2d" not in gv.name_hint:
            continue
        sch = s_tir.Schedule(func)
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            extents = [int(sch.get(lp).extent) for lp in sch.get_loops(block)]
            if extents[-4:] == [64 // CHUNK, 3, 3, CHUNK]:
                chunked.append(gv.name_hint)
    assert len(chunked) == 1, chunked  # the 64-channel one; the first sums 3 channels
    [result] = judge_in_process([case], RunOptions(isolate=False))
    numerics = result.check("numerics")
    assert numerics.status is Status.PASSED, numerics.message
