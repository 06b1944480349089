"""One case end to end: build the model, export once, compile per target, check → CaseResult.

Validation order is the contract: every case file and every model factory is checked
(`preflight`) before the first compile, so a typo in case 12 does not cost the compile time
of cases 1-11.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cl_validate import checks
from cl_validate.errors import CaseFileError, DeviceUnavailableError
from cl_validate.spec import CaseSpec, display_path
from cl_validate.verdict import CHECKS, CaseResult, CheckResult, Status

if TYPE_CHECKING:
    from cl_validate.analysis import KernelList, OpLayout, StageCount
    from cl_validate.cache import Cache
    from cl_validate.workers import WorkerPool


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
    cache_dir: str | None = None  # measurements cache (cl_validate.cache); None: no cache


def selected_targets(case: CaseSpec, options: RunOptions) -> list[str]:
    if options.targets is None:
        return list(case.targets)
    return [t for t in case.targets if t in options.targets]


def preflight(cases: Sequence[CaseSpec], options: RunOptions) -> dict[str, str]:
    """Validate every case (`validated_model`) and raise before any compile.

    Returns each case's weights digest (for the cache key). The models are dropped again:
    workers rebuild them from the same seed, and holding every model of a large suite in the
    parent would cost gigabytes.
    """
    from cl_validate.cache import weights_digest
    from cl_validate.pipeline import device_available

    if options.require_device:
        wanted = {t for c in cases for t in selected_targets(c, options)}
        for t in sorted(wanted - {"llvm"}):
            if not device_available(t):
                raise DeviceUnavailableError(
                    f"--require-device: no {t} device on this machine",
                    hint="run on a machine with an NVIDIA GPU, or drop --require-device to "
                    "run the static checks only")
    digests: dict[str, str] = {}
    for case in cases:
        model = validated_model(case, options)
        digests[case.name] = weights_digest(model)
        del model
    return digests


def validated_model(case: CaseSpec, options: RunOptions) -> Any:
    """Resolve the case's factory and pipeline, build its model, check its [layout_overrides]
    and recorded baselines: every mistake in a case file raises here (exit 2)."""
    from cl_validate.baseline import load_baseline
    from cl_validate.factory import build_model
    from cl_validate.pipeline import resolve_pipeline

    resolve_pipeline(case)
    model = build_model(case)
    modules = dict(model.named_modules())
    for path in case.layout_overrides:
        if path not in modules:
            import difflib

            close = difflib.get_close_matches(path, list(modules), n=1)
            raise CaseFileError(
                f"[layout_overrides] names '{path}', which is not a module of the model",
                file=display_path(case.path), line=case.line_of("layout_overrides", path),
                hint=f"did you mean '{close[0]}'?" if close else "use a path from "
                "model.named_modules(), e.g. 'layer1.0.conv1'")
    for target in selected_targets(case, options):
        load_baseline(case, target)  # a hand-edited baseline that does not parse: exit 2
    return model


def _error_checks(message: str, kind: str, body: str = "", line: int | None = None
                  ) -> list[CheckResult]:
    return [CheckResult(c, Status.ERROR, message, kind=kind, body=body, line=line)
            for c in CHECKS]


@dataclass
class Measurement:
    """What compiling (and running) one case on one target produced — no verdicts.

    Verdicts are a function of a measurement and the *current* case file (`judge`), so a
    cached measurement re-judged after a budget or tolerance edit gives the right answer.
    """

    target: str
    error: tuple[str, str, str, int | None] | None = None  # message, kind, detail, line
    kernels: KernelList | None = None
    stage_counts: list[StageCount] = field(default_factory=list)
    op_layouts: list[OpLayout] = field(default_factory=list)
    actual: list[Any] | None = None  # TVM outputs in PyTorch layout (numpy)
    expected: list[Any] | None = None  # PyTorch outputs (numpy)
    numerics_skip: tuple[str, str] | None = None  # reason, kind
    numerics_error: tuple[str, str] | None = None  # message, detail
    compile_seconds: float = 0.0
    numerics_seconds: float = 0.0
    seconds: float = 0.0
    peak_rss_mb: float | None = None
    model_outputs: int | None = None  # how many outputs the PyTorch model returns


def measure_case(case: CaseSpec, model: Any, options: RunOptions,
                 on_measurement: Callable[[Measurement], None] | None = None
                 ) -> list[Measurement]:
    """Export once, then compile (and run, where the device exists) on each target."""
    from cl_validate import analysis, numerics
    from cl_validate.errors import CompileStageError
    from cl_validate.pipeline import (
        compile_case,
        device_available,
        device_for,
        export_and_import,
    )

    targets = selected_targets(case, options)
    out: list[Measurement] = []

    def done(m: Measurement) -> None:
        out.append(m)
        if on_measurement is not None:
            on_measurement(m)

    t_case = time.perf_counter()
    arrays = numerics.make_inputs(case)
    tensors = numerics.torch_inputs(case, arrays)
    try:
        expected = numerics.run_torch(model, tensors)
        front = export_and_import(model, case, tensors)
    except CompileStageError as exc:
        for t in targets:
            done(Measurement(t, (str(exc), "CompileError", exc.detail, case.line_of("model")),
                             seconds=time.perf_counter() - t_case))
        return out
    except Exception as exc:  # the model's own forward raised
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        msg = f"PyTorch forward failed: {type(exc).__name__}: {first}".rstrip(": ")
        for t in targets:
            done(Measurement(t, (msg, "ModelError", "", case.line_of("model"))))
        return out
    # Too many [[outputs]] is judged (`judge`), not measured: the measurement stays valid, so
    # fixing the case file is answered from the cache.
    shared = time.perf_counter() - t_case

    for target in targets:
        t0 = time.perf_counter()
        m = Measurement(target, model_outputs=len(expected))
        try:
            compiled = compile_case(front, case, target, build=not options.static_only)
        except CompileStageError as exc:
            m.error = (str(exc), "CompileError", exc.detail, None)
            m.seconds = shared + time.perf_counter() - t0
            done(m)
            continue
        m.kernels = analysis.kernel_list(compiled)
        m.stage_counts = analysis.stage_counts(compiled, m.kernels)
        m.op_layouts = analysis.op_layouts(
            compiled.stage(analysis.op_level_stage(compiled)).mod, front.sources)
        m.compile_seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        if options.static_only:
            m.numerics_skip = ("static checks only: numerics not run", "StaticOnly")
        elif device_available(target):
            try:
                unbound = [front.params[p.name]
                           for p in compiled.final["main"].params[len(case.inputs):]]
                m.actual = numerics.run_tvm(compiled.executable, case, arrays,
                                            device_for(target), unbound)
                m.expected = expected
            except Exception as exc:
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                m.numerics_error = (f"running the compiled program failed ({target}): "
                                    f"{type(exc).__name__}: {first}", str(exc))
        else:
            m.numerics_skip = (f"no {target} device on this machine: static checks only",
                               "DeviceUnavailable")
        m.numerics_seconds = time.perf_counter() - t1
        m.seconds = shared + time.perf_counter() - t0
        done(m)
    return out


def judge(case: CaseSpec, m: Measurement, options: RunOptions) -> CaseResult:
    """The verdicts of one measurement under the case file as it is now."""
    from cl_validate import baseline, numerics

    result = CaseResult(case, m.target, seconds=m.seconds, peak_rss_mb=m.peak_rss_mb)
    if m.error is not None:
        message, kind, detail, line = m.error
        result.checks = _error_checks(message, kind, detail, line)
        return result
    if m.model_outputs is not None and len(case.outputs) > m.model_outputs:
        # Known only once forward() has run, in the worker: an `error` verdict, not exit 2.
        result.checks = _error_checks(
            f"case declares {len(case.outputs)} [[outputs]] but the model returns "
            f"{m.model_outputs}", "CaseFileError", "",
            case.line_of("outputs", str(m.model_outputs)))
        return result
    assert m.kernels is not None
    target = m.target
    result.kernels, result.stage_counts = m.kernels, m.stage_counts
    result.checks = [
        checks.check_layout(case, target, m.op_layouts),
        checks.check_layout_transforms(case, target, m.kernels, m.stage_counts,
                                       stale=options.stale_budget),
        checks.check_kernels(case, target, m.kernels, stale=options.stale_budget),
        baseline.check_kernel_list(case, target, m.kernels),
    ]
    if m.numerics_skip is not None:
        reason, kind = m.numerics_skip
        num = CheckResult("numerics", Status.SKIPPED, reason, kind=kind)
    elif m.numerics_error is not None:
        num = CheckResult("numerics", Status.ERROR, m.numerics_error[0], kind="RuntimeError",
                          body=m.numerics_error[1])
    else:
        assert m.actual is not None and m.expected is not None
        if len(m.actual) != len(m.expected):
            num = CheckResult("numerics", Status.FAILED, f"TVM returned {len(m.actual)} "
                              f"outputs, PyTorch {len(m.expected)} ({target})",
                              kind="OutputCountMismatch")
        else:
            stats = numerics.compare_all(case, target, m.actual, m.expected)
            num = checks.check_numerics(case, target, stats)
    result.checks.append(num)
    result.checks = [_timed(c, m.compile_seconds if i == 0 else m.numerics_seconds
                            if c.check == "numerics" else 0.0)
                     for i, c in enumerate(result.checks)]
    return result


def run_case(case: CaseSpec, model: Any, options: RunOptions,
             on_result: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Measure and judge one case on each selected target (in this process)."""
    results: list[CaseResult] = []

    def judged(m: Measurement) -> None:
        r = judge(case, m, options)
        results.append(r)
        if on_result is not None:
            on_result(r)

    measure_case(case, model, options, judged)
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


def run_suite(cases: Sequence[CaseSpec], options: RunOptions,
              on_result: Callable[[CaseResult], None], *, cache: Cache | None = None,
              digests: dict[str, str] | None = None, pool: WorkerPool | None = None) -> None:
    """Judge every case × target: from the cache where the measurement is known, else by
    measuring (in worker processes unless `options.isolate` is off) and storing the result."""
    from cl_validate import cache as cache_mod
    from cl_validate.factory import build_model

    keys: dict[tuple[str, str], str] = {}
    todo: list[CaseSpec] = []
    warned = False  # about a cache that cannot be written: once
    for case in cases:
        if cache is None or digests is None:
            todo.append(case)
            continue
        hits: list[Measurement | None] = []
        for target in selected_targets(case, options):
            numerics, desc = cache_mod.target_description(target, options)
            k = cache_mod.key(case, target, digests[case.name], numerics, desc,
                              options.static_only)
            keys[(case.name, target)] = k
            cache.remember(cache_mod.hint(case, target, options.static_only), k)
            hits.append(cache.get(k))
        if all(m is not None for m in hits):  # every target known: judge without compiling
            for m in hits:
                assert m is not None
                on_result(judge(case, m, options))
        else:  # export is shared by the targets, so a partial hit still runs the case
            cache.unhit(sum(m is not None for m in hits))  # and reuses nothing of it
            todo.append(case)

    def measured(case: CaseSpec, m: Measurement) -> CaseResult:
        nonlocal warned
        k = keys.get((case.name, m.target))
        if cache is not None and k is not None and cache_mod.cacheable(m):
            try:
                cache.put(k, m)
            except OSError as exc:  # the cache is an optimization: the verdict stands without
                if not warned:
                    warned = True
                    print(f"cl-validate: warning: cannot write the cache in {cache.root}: "
                          f"{exc.strerror or exc}; measurements are not kept for the next "
                          "run (hint: check --cache-dir)", file=sys.stderr)
        return judge(case, m, options)

    if not todo:
        return
    if options.isolate:
        from cl_validate.workers import WorkerPool

        if pool is not None:
            pool.run(todo, on_result, on_measurement=measured)
        else:
            with WorkerPool(options) as own:
                own.run(todo, on_result, on_measurement=measured)
    else:
        for case in todo:
            measure_case(case, build_model(case), options,
                         lambda m, case=case: on_result(measured(case, m)))  # type: ignore[misc]
