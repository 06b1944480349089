"""The kernel-by-kernel check names the kernel a target's schedule or code generation got
wrong (`cl_validate.session.kernel_check`), and the bisection says it.

A GPU is not needed to test the mechanism: a "scheduled" module whose one kernel was replaced
by a wrong one (x·3 where the model has x·2), run on llvm against the unscheduled kernels,
must be named; the right module must name nothing."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from cl_validate.compile.attention import attention_legalizations
from cl_validate.compile.attention_tiles import cpu_form
from cl_validate.compile.program import Compiled, StageIR
from cl_validate.ir import SCHEDULE_ATTR
from cl_validate.measurements.bisection import Bisection, StageResult
from cl_validate.measurements.error_stats import compare
from cl_validate.session.kernel_check import wrong_kernels
from cl_validate.spec import Tolerance
from tests.test_attention import _attention_module

LLVM = {"kind": "llvm"}


def _fused(factor: float) -> tvm.IRModule:
    """x·factor + 1, ReLU, a sum (one kernel), then a softmax (another), fused for llvm."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(relax.op.add(relax.op.multiply(
                x, relax.const(factor, "float32")), relax.const(1.0, "float32"))))
            s = bb.emit(relax.op.sum(y, axis=[1]))
            z = bb.emit_output(relax.op.nn.softmax(s))
        bb.emit_func_output(z)
    with tvm.target.Target(LLVM):
        mod = relax.transform.LegalizeOps()(bb.get())
    return relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(mod))


def _compiled(planted: float) -> Compiled:
    fused = _fused(2.0)
    wrong = relax.transform.FuseTIR()(_fused(planted))
    funcs = {}
    for gv, f in relax.transform.FuseTIR()(fused).functions_items():
        if isinstance(f, tvm.tirx.PrimFunc):
            f = (wrong[gv.name_hint] if "multiply" in gv.name_hint else f).with_attr(
                SCHEDULE_ATTR, "Planted")
        funcs[gv] = f
    return Compiled("llvm", [StageIR("fuse", fused, 0.0),
                             StageIR("fuse_tir", tvm.IRModule(funcs), 0.0)],
                    target=tvm.target.Target(LLVM))


def test_the_wrong_kernel_is_named_and_only_it():
    kernels = [g.name_hint for g, f in _compiled(2.0).final.functions_items()
               if isinstance(f, tvm.tirx.PrimFunc)]
    assert len(kernels) == 2  # the planted one, and one that stays right
    assert wrong_kernels(_compiled(2.0), "cpu") == []
    (wrong,) = wrong_kernels(_compiled(3.0), "cpu")
    assert "multiply" in wrong.name and wrong.rule == "Planted" and wrong.error > 0.1
    line = wrong.text("cuda")
    assert line.startswith(f"kernel `{wrong.name}` (Planted schedule) computes wrong on cuda")


def test_the_bisection_names_the_kernel_when_every_stage_held():
    ok = StageResult("legalize", (compare(np.zeros(1, np.float32), np.zeros(1, np.float32),
                                          Tolerance(1e-4, 1e-4)),))
    line = "kernel `fused_pool` (GeneralReduction schedule) computes wrong on cuda: 0.8 ..."
    summary = Bisection("llvm", "", (ok,), kernels=(line,)).summary()
    assert "every stage's IR is within tolerance" in summary and "fused_pool" in summary
    assert "fused_pool" in Bisection("llvm", "", (ok,), kernels=(line,)).render()
    assert "fusion, scheduling or code generation" in Bisection("llvm", "", (ok,)).summary()


def _attention(scale: float) -> tvm.IRModule:
    """One attention, legalized for a GPU (the tiled kernel, written with its threads) and
    fused."""
    shape = (1, 9, 2, 8)
    with tvm.target.Target({"kind": "cuda", "arch": "sm_90"}):
        mod = relax.transform.LegalizeOps(customize_legalize_map=attention_legalizations())(
            _attention_module(shape, shape, shape, scale=scale))
    return relax.transform.FuseOps()(mod)


def test_a_kernel_written_with_its_threads_is_checked_against_its_cpu_form():
    """The tiled attention kernel has no unscheduled self to run on the CPU: its CPU form
    (the same computation, threads as serial loops) is the reference. Here the "GPU's"
    program is that CPU form too, run on llvm: right, nothing is named; built for another
    scale, the kernel is named."""
    def compiled(scale: float) -> Compiled:
        fused = _attention(0.5)
        funcs = {}
        for gv, f in relax.transform.FuseTIR()(_attention(scale)).functions_items():
            serial = cpu_form(f) if isinstance(f, tvm.tirx.PrimFunc) else None
            funcs[gv] = f if serial is None else serial.with_attrs(dict(f.attrs))
        return Compiled("llvm", [StageIR("fuse", fused, 0.0),
                                 StageIR("fuse_tir", tvm.IRModule(funcs), 0.0)],
                        target=tvm.target.Target(LLVM))

    assert wrong_kernels(compiled(0.5), "cpu") == []
    (wrong,) = wrong_kernels(compiled(0.9), "cpu")
    assert wrong.name == "attention_tiled" and wrong.rule == "Attention"
