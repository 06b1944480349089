"""Which kernel of a target's program computes wrong: each scheduled kernel run on the target's
device against the same kernel unscheduled on this machine's CPU, on the same random buffers.

When every stage's IR is within tolerance on the CPU (`cl_validate.session.first_break`) yet
the target's program is not, the break is in what only the target does: the schedule (dlight's
rules bind loops to threads, stage tiles in shared memory, reduce across threads) and its code
generation. Each kernel of the final module is a PrimFunc with buffers only, so it can be built
and run alone: the scheduled one for the target, the unscheduled one (FuseTIR of the same
fused module, before any schedule) for llvm. Every buffer (inputs and outputs alike) starts
from the same values on both sides; afterwards every buffer is compared, so a kernel that
writes a wrong value, or writes where it should not, is caught whatever its outputs are.

Float buffers start as standard normal draws, integer and bool buffers as zeros (an index
buffer of zeros is in range whatever it indexes: an out-of-range read on a GPU would end the
device's context for the rest of the process).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax, tirx

from cl_validate.compile.attention_tiles import cpu_form
from cl_validate.compile.program import Compiled
from cl_validate.ir import SCHEDULE_ATTR, is_float
from cl_validate.session.device_host import host_for, hosted

#: A kernel is wrong when a buffer differs by more than this share of its largest value.
RELATIVE_LIMIT = 1e-3


@dataclass(frozen=True)
class WrongKernel:
    name: str
    rule: str  # the dlight rule that scheduled it
    error: float  # max abs difference / max abs value of the CPU's buffer

    def text(self, target: str) -> str:
        return (f"kernel `{self.name}` ({self.rule} schedule) computes wrong on {target}: "
                f"{self.error:.2g} of its largest value off the same kernel unscheduled on "
                "the CPU")


def wrong_kernels(compiled: Compiled, device: str, *, deadline: float | None = None,
                  seed: int = 0) -> list[WrongKernel]:
    """The scheduled kernels of `compiled` (a GPU target's) that disagree with their
    unscheduled selves on the CPU, worst first; [] when the pipeline has no `fuse` stage to
    recover them from."""
    try:
        unscheduled = relax.transform.FuseTIR()(compiled.stage("fuse").mod)
    except KeyError:
        return []
    plain = {gv.name_hint: f for gv, f in unscheduled.functions_items()
             if isinstance(f, tirx.PrimFunc)}
    rng = np.random.default_rng(seed)
    wrong = []
    for gv, func in compiled.final.functions_items():
        if deadline is not None and time.perf_counter() > deadline:
            break
        if not isinstance(func, tirx.PrimFunc) or func.attrs is None or \
                SCHEDULE_ATTR not in func.attrs or gv.name_hint not in plain:
            continue
        buffers = _buffers(func, rng)
        if buffers is None:
            continue  # symbolic shapes: no one size to try
        got = _run(func, compiled.target, device, buffers)
        reference = plain[gv.name_hint]  # a kernel written with its threads: their CPU form
        want = _run(cpu_form(reference) or reference, tvm.target.Target({"kind": "llvm"}),
                    "cpu", buffers)
        error = max((_relative(g, w) for g, w in zip(got, want, strict=True)), default=0.0)
        if error > RELATIVE_LIMIT:
            wrong.append(WrongKernel(gv.name_hint, str(func.attrs[SCHEDULE_ATTR]), error))
    return sorted(wrong, key=lambda k: -k.error)


def _buffers(func: tirx.PrimFunc, rng: np.random.Generator) -> list[np.ndarray] | None:
    out = []
    for ty in func.ty.params:
        shape = getattr(ty, "shape", None)
        if shape is None or not all(isinstance(d, tirx.IntImm | int) for d in shape):
            return None
        dims, dtype = [int(d) for d in shape], str(ty.dtype)
        if is_float(dtype):
            out.append(rng.standard_normal(dims).astype(dtype))
        else:
            out.append(np.zeros(dims, dtype))
    return out


def _run(func: tirx.PrimFunc, target: Any, device: str, buffers: list[np.ndarray]
         ) -> list[np.ndarray]:
    with target:  # the arch from the target, not from the device (`compile_case`)
        lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                          target=target)
    if hosted(device):  # a GPU opens in a process of its own (`device_host`)
        return host_for(device).run_kernel(lib, buffers)
    args = [tvm.runtime.tensor(b, tvm.device(device, 0)) for b in buffers]
    lib["main"](*args)
    return [a.numpy() for a in args]


def _relative(got: np.ndarray, want: np.ndarray) -> float:
    if got.dtype.kind not in "fc":
        return 0.0 if np.array_equal(got, want) else 1.0
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    same = (got64 == want64) | (np.isnan(got64) & np.isnan(want64))  # infinities, NaNs
    diff = np.where(same, 0.0, np.abs(got64 - want64))
    if not np.isfinite(diff).all():
        return float("inf")
    finite = np.where(np.isfinite(want64), np.abs(want64), 0.0)
    return float(diff.max(initial=0.0)) / (float(finite.max(initial=0.0)) or 1.0)
