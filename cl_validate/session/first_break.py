"""Stage bisection, in a target's process: the IR after every pipeline stage, built and run
on the inputs of the worst failing sample, until the first stage whose output leaves the
tolerance.

Run when a case's numerics fail (the time is paid only then) and for ``cl-validate show
--bisect`` (every stage). Works for any pipeline, the user's own included: it runs whatever
stages `compile_case` recorded. A stage whose IR is the same as the one before is not built
again; one that cannot be built or run is listed with the reason and skipped.

The stages run on this machine's CPU whatever the target (`cl_validate.compile.stage_program`):
for a program that failed on a GPU or a board, stages that are still right here put the break
in building for that target or on the device.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from cl_validate.checks.numerics import (
    ErrorStats,
    compare_all,
    sample_stats,
    severity,
    worst_failure,
)
from cl_validate.compile.frontend import Frontend
from cl_validate.compile.program import Compiled
from cl_validate.compile.stage_program import HOST, build_stage
from cl_validate.compile.tvm_targets import device_for
from cl_validate.errors import last_line
from cl_validate.ir import same_ir, weight_params
from cl_validate.measurements.bisection import Bisection, StageResult
from cl_validate.measurements.measurement import Sample
from cl_validate.session.execute import run_tvm
from cl_validate.session.kernel_check import wrong_kernels
from cl_validate.spec import CaseSpec


def bisect(case: CaseSpec, target: str, compiled: Compiled, front: Frontend, *,
           inputs: Sequence[np.ndarray], expected: Sequence[np.ndarray],
           reference64: Sequence[np.ndarray] | None, label: str = "",
           deadline: float | None = None, stop_at_break: bool = True) -> Bisection:
    """Run each stage's IR on this machine's CPU on `inputs` and judge it against the same
    reference as `target`'s final program; stop at the first break (`stop_at_break`) or at
    `deadline` (``time.perf_counter()``)."""
    device = device_for("cpu")
    runs: list[StageResult] = []
    stopped = ""
    previous: tuple[Any, StageResult, str] | None = None  # (IR, its run, the stage that ran it)
    for stage in compiled.stages:
        if deadline is not None and time.perf_counter() > deadline:
            stopped = (f"out of time after {len(runs)} of {len(compiled.stages)} stages; "
                       "raise the case's timeout to bisect further")
            break
        if previous is not None and same_ir(previous[0], stage.mod):
            _, same, ran_as = previous
            runs.append(StageResult(stage.name, same.stats, same.note or f"same IR as `{ran_as}`"))
            continue
        run = _run_stage(case, target, stage.name, stage.mod, front, device, inputs,
                         expected, reference64, label)
        runs.append(run)
        previous = (stage.mod, run, stage.name)
        if stop_at_break and run.ran and not run.ok:
            break
    kernels: tuple[str, ...] = ()
    tdef = case.target_def(target)
    if not stopped and tdef.device != "cpu" and runs and all(r.ok for r in runs if r.ran):
        # every stage holds here: which of the target's own kernels is wrong on its device
        try:
            kernels = tuple(k.text(target) for k in wrong_kernels(
                compiled, tdef.device, deadline=deadline))
        except Exception as exc:  # the stage table stands without it
            kernels = (f"(the kernel-by-kernel check failed: {_reason(exc)})",)
    return Bisection(HOST, label, tuple(runs), stopped, kernels)


def _run_stage(case: CaseSpec, target: str, name: str, mod: Any, front: Frontend,
               device: Any, inputs: Sequence[np.ndarray], expected: Sequence[np.ndarray],
               reference64: Sequence[np.ndarray] | None, label: str) -> StageResult:
    t0 = time.perf_counter()
    missing = [p.name for p in weight_params(mod["main"]) if p.name not in front.params]
    if missing:
        return StageResult(name, note=f"not run: main takes {missing[0]!r}, which is not a "
                        "weight of the model")
    params = [front.params[p.name] for p in weight_params(mod["main"])]
    try:
        executable = build_stage(mod)
    except Exception as exc:
        return StageResult(name, note=f"not run: its IR does not build for {HOST} "
                        f"({_reason(exc)})", seconds=time.perf_counter() - t0)
    try:
        actual = run_tvm(executable, case, inputs, device, params)
    except Exception as exc:
        return StageResult(name, note=f"not run: running it failed ({_reason(exc)})",
                        seconds=time.perf_counter() - t0)
    if len(actual) != len(expected):
        return StageResult(name, note=f"not run: it returns {len(actual)} outputs, PyTorch "
                        f"{len(expected)}", seconds=time.perf_counter() - t0)
    stats = compare_all(case, target, actual, expected, label, reference64, front.output_steps)
    return StageResult(name, tuple(stats), seconds=time.perf_counter() - t0)


def bisect_failure(case: CaseSpec, target: str, compiled: Compiled, front: Frontend,
                   samples: Sequence[Sample], inputs: Sequence[Sequence[np.ndarray]],
                   deadline: float | None) -> Bisection | None:
    """The bisection of the worst failing sample (the one the verdict names), None when
    every sample is within tolerance."""
    failing: list[tuple[ErrorStats, int]] = []
    for i, s in enumerate(samples):
        if len(s.actual) != len(s.expected):
            continue
        worst = worst_failure(sample_stats(case, target, s, front.output_steps))
        if worst is not None:
            failing.append((worst, i))
    if not failing:
        return None
    _, i = max(failing, key=lambda f: severity(f[0]))
    s = samples[i]
    try:
        return bisect(case, target, compiled, front, inputs=inputs[i], expected=s.expected,
                      reference64=s.reference64, label=s.label, deadline=deadline)
    except Exception as exc:  # the verdict stands without it
        return Bisection(HOST, s.label, (), f"the bisection itself failed: {_reason(exc)}")


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {last_line(exc, 200)}".rstrip(": ")
