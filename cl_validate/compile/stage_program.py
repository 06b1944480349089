"""The IR after any pipeline stage, made executable on this machine's CPU: what the stage
bisection runs.

The final IR is legalized, fused and scheduled by the pipeline, and the build only lowers it
(`cl_validate.compile.program`). The IR after an earlier stage still holds high-level Relax
ops, so it gets what the pipeline's remaining stages would have given it, and nothing that
changes arithmetic on purpose: TVM's default legalization of every op (one kernel per op, no
fusion; quantize computed as PyTorch computes it, as in the pipeline), FuseTIR for functions a
fusion stage grouped, then the same backend lowering as the final program of an ``llvm``
target. Stages of any target run here; one already scheduled for a GPU does not build for the
CPU, and the bisection says so.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu_backend

from cl_validate.compile.legalize import quantize_as_pytorch

#: Where every stage runs: the CPU this runs on.
HOST = "llvm"


def build_stage(mod: tvm.IRModule) -> Any:
    """A VM executable of `mod`, the IR after some stage, for this machine's CPU."""
    target = tvm.target.Target({"kind": HOST})
    passes = [
        *cpu_backend.library_dispatch_passes(target),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FuseTIR(),
        relax.transform.DeadCodeElimination(),
        *cpu_backend.dataflow_lower_passes(target),
        *cpu_backend.finalize_passes(target),
    ]
    # quantize computes PyTorch's codes here too, as in the pipeline's own legalize stage: a
    # stage must not differ from the final program by TVM's rounding of x / scale
    mod = quantize_as_pytorch(mod)
    with target:
        return tvm.compile(mod, target=target, relax_pipeline=tvm.transform.Sequential(passes))
