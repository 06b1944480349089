"""One case end to end: build the model, export once, compile per target, check → CaseResult.

Validation order is the contract: every case file and every model factory is checked
(`preflight`) before the first compile, so a typo in case 12 does not cost the compile time
of cases 1-11.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cl_validate import checks
from cl_validate.errors import DeviceUnavailableError
from cl_validate.spec import CaseSpec
from cl_validate.verdict import CHECKS, CaseResult, CheckResult, Status


@dataclass(frozen=True)
class RunOptions:
    """Options shared by the CLI and the pytest plugin (defined once)."""

    targets: tuple[str, ...] | None = None  # None: each case's own targets
    require_device: bool = False
    jobs: int = 1  # worker processes
    isolate: bool = True  # each case in a worker process with timeout and memory cap
    timeout: float | None = None  # seconds per case; None: the case's own (or the default)
    max_memory_mb: int | None = None  # resident memory cap per worker; None: the case's own
    stale_budget: str = "fail"  # budget above the measured count: "fail" or "warn"
    static_only: bool = False  # no build, no numerics: counts only (`budget tighten|record`)


def selected_targets(case: CaseSpec, options: RunOptions) -> list[str]:
    if options.targets is None:
        return list(case.targets)
    return [t for t in case.targets if t in options.targets]


def preflight(cases: Sequence[CaseSpec], options: RunOptions) -> None:
    """Resolve every factory and pipeline and build every model once; raise before any compile.

    The models are dropped again: workers rebuild them from the same seed, and holding every
    model of a large suite in the parent would cost gigabytes.
    """
    from cl_validate.factory import build_model
    from cl_validate.pipeline import device_available, resolve_pipeline

    if options.require_device:
        wanted = {t for c in cases for t in selected_targets(c, options)}
        for t in sorted(wanted - {"llvm"}):
            if not device_available(t):
                raise DeviceUnavailableError(
                    f"--require-device: no {t} device on this machine",
                    hint="run on a machine with an NVIDIA GPU, or drop --require-device to "
                    "run the static checks only")
    from cl_validate.baseline import load_baseline

    for case in cases:
        resolve_pipeline(case)
        build_model(case)
        for target in selected_targets(case, options):
            load_baseline(case, target)  # a hand-edited baseline that does not parse: exit 2


def _error_checks(message: str, kind: str, body: str = "", line: int | None = None
                  ) -> list[CheckResult]:
    return [CheckResult(c, Status.ERROR, message, kind=kind, body=body, line=line)
            for c in CHECKS]


def run_case(case: CaseSpec, model: Any, options: RunOptions,
             on_result: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Compile and check one case on each selected target."""
    from cl_validate import analysis, baseline, numerics
    from cl_validate.errors import CompileStageError
    from cl_validate.pipeline import (
        compile_case,
        device_available,
        device_for,
        export_and_import,
    )

    targets = selected_targets(case, options)
    results: list[CaseResult] = []

    def done(r: CaseResult) -> None:
        results.append(r)
        if on_result is not None:
            on_result(r)

    t_case = time.perf_counter()
    arrays = numerics.make_inputs(case)
    tensors = numerics.torch_inputs(case, arrays)
    try:
        expected = numerics.run_torch(model, tensors)
        front = export_and_import(model, case, tensors)
    except CompileStageError as exc:
        for t in targets:
            done(CaseResult(case, t, _error_checks(str(exc), "CompileError", exc.detail,
                                                   case.line_of("model")),
                            time.perf_counter() - t_case))
        return results
    except Exception as exc:  # the model's own forward raised
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        msg = f"PyTorch forward failed: {type(exc).__name__}: {first}".rstrip(": ")
        for t in targets:
            done(CaseResult(case, t, _error_checks(msg, "ModelError", line=case.line_of("model")),
                            0.0))
        return results
    if len(case.outputs) > len(expected):
        # Known only once forward() has run, in the worker: an `error` verdict, not exit 2.
        msg = (f"case declares {len(case.outputs)} [[outputs]] but the model returns "
               f"{len(expected)}")
        for t in targets:
            done(CaseResult(case, t, _error_checks(
                msg, "CaseFileError", line=case.line_of("outputs", str(len(expected)))), 0.0))
        return results
    shared = time.perf_counter() - t_case

    for target in targets:
        t0 = time.perf_counter()
        result = CaseResult(case, target)
        try:
            compiled = compile_case(front, case, target, build=not options.static_only)
        except CompileStageError as exc:
            result.checks = _error_checks(str(exc), "CompileError", exc.detail)
            result.seconds = shared + time.perf_counter() - t0
            done(result)
            continue
        kernels = analysis.kernel_list(compiled)
        counts = analysis.stage_counts(compiled, kernels)
        op_stage = compiled.stage(analysis.op_level_stage(compiled)).mod
        compile_s = time.perf_counter() - t0
        result.kernels, result.stage_counts = kernels, counts
        result.checks = [
            checks.check_layout(case, target, analysis.op_layouts(op_stage)),
            checks.check_layout_transforms(case, target, kernels, counts,
                                           stale=options.stale_budget),
            checks.check_kernels(case, target, kernels, stale=options.stale_budget),
            baseline.check_kernel_list(case, target, kernels),
        ]
        t1 = time.perf_counter()
        if options.static_only:
            result.checks.append(CheckResult("numerics", Status.SKIPPED,
                                             "static checks only: numerics not run",
                                             kind="StaticOnly"))
        elif device_available(target):
            try:
                unbound = [front.params[p.name]
                           for p in compiled.final["main"].params[len(case.inputs):]]
                actual = numerics.run_tvm(compiled.executable, case, arrays, device_for(target),
                                          unbound)
            except Exception as exc:
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                result.checks.append(CheckResult(
                    "numerics", Status.ERROR, f"running the compiled program failed ({target}): "
                    f"{type(exc).__name__}: {first}", kind="RuntimeError", body=str(exc)))
            else:
                if len(actual) != len(expected):
                    result.checks.append(CheckResult(
                        "numerics", Status.FAILED, f"TVM returned {len(actual)} outputs, "
                        f"PyTorch {len(expected)} ({target})", kind="OutputCountMismatch"))
                else:
                    stats = numerics.compare_all(case, target, actual, expected)
                    result.checks.append(checks.check_numerics(case, target, stats))
        else:
            result.checks.append(CheckResult(
                "numerics", Status.SKIPPED,
                f"no {target} device on this machine: static checks only",
                kind="DeviceUnavailable"))
        numerics_s = time.perf_counter() - t1
        result.checks = [_timed(c, compile_s if i == 0 else numerics_s if c.check == "numerics"
                                else 0.0) for i, c in enumerate(result.checks)]
        result.seconds = shared + time.perf_counter() - t0
        done(result)
    return results


def _timed(c: CheckResult, seconds: float) -> CheckResult:
    from dataclasses import replace

    return replace(c, seconds=seconds)


def run_in_process(cases: Iterable[CaseSpec], options: RunOptions,
                   on_result: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Run cases one after another in this process (no isolation: for debugging and tests)."""
    from cl_validate.factory import build_model

    results: list[CaseResult] = []
    for case in cases:
        results.extend(run_case(case, build_model(case), options, on_result))
    return results
