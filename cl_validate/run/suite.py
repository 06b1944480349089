"""A suite end to end: validate every case, then judge every case × target — from the cache
where the measurement is known, else by measuring it (in worker processes unless
``--no-isolation``).

Validation order is the contract: every case file and every model factory is checked
(`preflight`) before the first compile, so a typo in case 12 does not cost the compile time
of cases 1-11.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cl_validate.checks.judge import judge
from cl_validate.checks.kernel_list import load_baseline
from cl_validate.checks.measurement import Measurement
from cl_validate.checks.verdict import CaseResult
from cl_validate.errors import DeviceUnavailableError
from cl_validate.run import cache as cache_mod
from cl_validate.run.cache import Cache
from cl_validate.run.options import RunOptions, selected_targets
from cl_validate.run.workers import WorkerPool
from cl_validate.spec import CaseSpec


def preflight(cases: Sequence[CaseSpec], options: RunOptions) -> dict[str, str]:
    """Validate every case (`validated_model`) and raise before any compile.

    Returns each case's weights digest (for the cache key). The models are dropped again:
    workers rebuild them from the same seed, and holding every model of a large suite in the
    parent would cost gigabytes.
    """
    # lazy: torch and TVM (building models, asking for devices)
    from cl_validate.compile.factory import weights_digest
    from cl_validate.compile.target import device_available

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
    # lazy: torch and TVM (the factory's module, the pipeline's module)
    from cl_validate.compile.factory import build_model, check_layout_overrides
    from cl_validate.compile.pipeline import resolve_pipeline

    resolve_pipeline(case)
    model = build_model(case)
    check_layout_overrides(case, model)
    for target in selected_targets(case, options):
        load_baseline(case, target)  # a hand-edited baseline that does not parse: exit 2
    return model


def run_case(case: CaseSpec, model: Any, options: RunOptions,
             on_result: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Measure and judge one case on each selected target (in this process)."""
    from cl_validate.run.measure import measure_case  # lazy: torch and TVM

    results: list[CaseResult] = []

    def judged(m: Measurement) -> None:
        r = judge(case, m, options.stale_budget)
        results.append(r)
        if on_result is not None:
            on_result(r)

    measure_case(case, model, options, judged)
    return results


def run_in_process(cases: Iterable[CaseSpec], options: RunOptions,
                   on_result: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Run cases one after another in this process (no isolation: for debugging and tests)."""
    from cl_validate.compile.factory import build_model  # lazy: torch

    results: list[CaseResult] = []
    for case in cases:
        results.extend(run_case(case, build_model(case), options, on_result))
    return results


def run_suite(cases: Sequence[CaseSpec], options: RunOptions,
              on_result: Callable[[CaseResult], None], *, cache: Cache | None = None,
              digests: dict[str, str] | None = None, pool: WorkerPool | None = None) -> None:
    """Judge every case × target: from the cache where the measurement is known, else by
    measuring (in worker processes unless `options.isolate` is off) and storing the result."""
    keys: dict[tuple[str, str], str] = {}
    todo: list[CaseSpec] = []
    warned = False  # about a cache that cannot be written: once
    for case in cases:
        if cache is None or digests is None:
            todo.append(case)
            continue
        hits: list[Measurement | None] = []
        for target in selected_targets(case, options):
            numerics, desc = cache_mod.target_description(target, options.static_only)
            k = cache_mod.key(case, target, digests[case.name], numerics, desc,
                              options.static_only)
            keys[(case.name, target)] = k
            cache.remember(cache_mod.hint(case, target, options.static_only), k)
            hits.append(cache.get(k))
        if all(m is not None for m in hits):  # every target known: judge without compiling
            for m in hits:
                assert m is not None
                on_result(judge(case, m, options.stale_budget))
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
        return judge(case, m, options.stale_budget)

    if not todo:
        return
    if options.isolate:
        if pool is not None:
            pool.run(todo, on_result, on_measurement=measured)
        else:
            with WorkerPool(options) as own:
                own.run(todo, on_result, on_measurement=measured)
    else:
        # lazy: torch and TVM (measuring in this process)
        from cl_validate.compile.factory import build_model
        from cl_validate.run.measure import measure_case

        for case in todo:
            measure_case(case, build_model(case), options,
                         lambda m, case=case: on_result(measured(case, m)))  # type: ignore[misc]
