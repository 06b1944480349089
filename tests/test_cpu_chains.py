"""On a CPU, a fused kernel's elementwise steps are one loop nest (`compile/cpu_chains.py`):
inlined only where nothing is computed twice, the outputs bit for bit the unfused nests'."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import s_tir, te, tirx  # noqa: E402

from cl_validate.compile.attention import ATTENTION_ATTR  # noqa: E402
from cl_validate.compile.cpu_chains import inline_chains  # noqa: E402


def _blocks(func: Any) -> list[str]:
    sch = s_tir.Schedule(func)
    return [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]


def _module(*tensors: Any) -> Any:
    return tvm.IRModule({"main": te.create_prim_func(list(tensors))})


def _run(mod: Any, shapes: list[tuple[int, ...]], out_shapes: list[tuple[int, ...]]
         ) -> list[np.ndarray]:
    lib = tvm.compile(mod, target="llvm")
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.standard_normal(s).astype("float32")) for s in shapes]
    outs = [tvm.runtime.tensor(np.zeros(s, "float32")) for s in out_shapes]
    lib["main"](*args, *outs)
    return [o.numpy() for o in outs]


def test_a_chain_of_elementwise_steps_is_one_loop_nest_with_the_same_bits():
    a = te.placeholder((2, 5, 7), name="a")
    bias = te.placeholder((7,), name="bias")
    scaled = te.compute(a.shape, lambda i, j, k: a[i, j, k] * tirx.const(0.37, "float32"),
                        name="scaled")
    shifted = te.compute(a.shape, lambda i, j, k: scaled[i, j, k] + bias[k], name="shifted")
    relu = te.compute(a.shape, lambda i, j, k: tirx.max(shifted[i, j, k], 0.0), name="relu")
    out = te.compute(a.shape, lambda i, j, k: tirx.round(relu[i, j, k] * 11.3), name="out")
    mod = _module(a, bias, out)
    inlined = inline_chains(mod)
    assert _blocks(mod["main"]) == ["scaled", "shifted", "relu", "out"]
    assert _blocks(inlined["main"]) == ["out"]
    shapes = [(2, 5, 7), (7,)]
    before, after = _run(mod, shapes, [(2, 5, 7)]), _run(inlined, shapes, [(2, 5, 7)])
    assert np.array_equal(before[0], after[0])


def test_a_chain_over_a_dynamic_batch_is_inlined_too():
    n = te.var("n", "int64")
    a = te.placeholder((n, 8), name="a")
    step = te.compute(a.shape, lambda i, j: a[i, j] * 2.0, name="step")
    out = te.compute(a.shape, lambda i, j: step[i, j] + 1.0, name="out")
    assert _kept(a, out) == ["out"]
    wide = te.placeholder((n, 2, 8), name="wide")
    broadcast = te.compute((n, 2, 8), lambda i, k, j: step[i, j] + wide[i, k, j],
                           name="broadcast")
    assert _kept(a, wide, broadcast) == ["step", "broadcast"]


def _kept(*tensors: Any) -> list[str]:
    """The blocks left after inlining a function of `tensors`."""
    return _blocks(inline_chains(_module(*tensors))["main"])


def test_a_step_read_by_a_reduction_stays_materialized():
    a = te.placeholder((4, 16), name="a")
    cast = te.compute(a.shape, lambda i, j: a[i, j] * 2.0, name="cast")
    r = te.reduce_axis((0, 16), "r")
    total = te.compute((4,), lambda i: te.sum(cast[i, r], axis=r), name="total")
    assert _kept(a, total) == ["cast", "total"]


def test_a_step_read_twice_or_broadcast_or_by_two_readers_is_not_recomputed():
    a = te.placeholder((8,), name="a")
    x = te.placeholder((3, 8), name="x")
    step = te.compute(a.shape, lambda i: te.exp(a[i]), name="step")
    squared = te.compute(a.shape, lambda i: step[i] * step[i], name="squared")
    assert _kept(a, squared) == ["step", "squared"]
    neighbour = te.compute((7,), lambda i: step[i] + step[i + 1], name="neighbour")
    assert _kept(a, neighbour) == ["step", "neighbour"]
    broadcast = te.compute((3, 8), lambda i, j: step[j] + x[i, j], name="broadcast")
    assert _kept(a, x, broadcast) == ["step", "broadcast"]
    left = te.compute(a.shape, lambda i: step[i] + 1.0, name="left")
    right = te.compute(a.shape, lambda i: step[i] - 1.0, name="right")
    assert _kept(a, left, right) == ["step", "left", "right"]


def test_a_step_that_is_an_output_of_the_function_stays():
    a = te.placeholder((8,), name="a")
    first = te.compute(a.shape, lambda i: a[i] * 2.0, name="first")
    second = te.compute(a.shape, lambda i: first[i] + 1.0, name="second")
    assert _kept(a, first, second) == ["first", "second"]


def test_attention_kernels_keep_their_loop_order():
    a = te.placeholder((8,), name="a")
    step = te.compute(a.shape, lambda i: a[i] + 1.0, name="step")
    out = te.compute(a.shape, lambda i: step[i] * 2.0, name="out")
    func = te.create_prim_func([a, out]).with_attr(ATTENTION_ATTR, "kernel")
    assert _blocks(inline_chains(tvm.IRModule({"main": func}))["main"]) == ["step", "out"]


@pytest.mark.compile
def test_the_llvm_program_has_its_epilogues_inlined_and_computes_the_same_bits(
        write_case, monkeypatch):
    import cl_validate.compile.pipeline as pipeline
    from cl_validate.compile.factory import build_model
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.inputs import make_inputs, program_args, torch_inputs
    from cl_validate.spec import load_case
    from tests.conftest import tiny_case

    case = load_case(write_case(tiny_case(2, model="tiny_models:classifier")))
    samples = make_inputs(case)
    front = export_and_import(build_model(case), case, torch_inputs(case, samples))

    def program(inline: bool) -> tuple[int, np.ndarray]:
        monkeypatch.setattr(pipeline, "inline_chains",
                            inline_chains if inline else (lambda mod: mod))
        compiled = compile_case(front, case, "llvm")
        blocks = sum(len(_blocks(f)) for _, f in compiled.final.functions_items()
                     if isinstance(f, tirx.PrimFunc))
        vm = tvm.relax.VirtualMachine(compiled.executable, tvm.cpu())
        return blocks, vm["main"](*program_args(case, samples, tvm.cpu())).numpy()

    (plain_blocks, plain), (blocks, out) = program(False), program(True)
    assert blocks < plain_blocks
    assert np.array_equal(out, plain)
