"""A suite end to end: judge every case × target, measured (or read from the cache) in worker
processes, or in this process with ``--no-isolation``.

This process only reads case files, judges measurements and writes cache entries and
reports: it never imports torch or TVM and never runs a model's code, so nothing a model does
can take the run down. Everything that runs user code — importing and calling the factory,
the weights digest that keys the cache, export, compile, run — happens in a worker
(`cl_validate.run.measure`), under the case's timeout and memory cap.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from cl_validate.checks.judge import judge
from cl_validate.checks.measurement import Measurement
from cl_validate.checks.verdict import CaseResult
from cl_validate.run.cache import Cache, cacheable
from cl_validate.run.messages import TargetMeasured
from cl_validate.run.options import RunOptions, require_devices, selected_targets
from cl_validate.run.workers import WorkerPool
from cl_validate.spec import CaseSpec


@dataclass
class SuiteStats:
    """What the cache did for a run: measurements reused out of all judged."""

    reused: int = 0
    judged: int = 0


class _Judge:
    """Turns each target's measurement into its verdicts, storing new measurements in the
    cache on the way (warning once if the cache cannot be written: it is an optimization,
    the verdict stands without it)."""

    def __init__(self, options: RunOptions, on_result: Callable[[CaseResult], None]) -> None:
        self.options = options
        self.on_result = on_result
        self.cache = Cache(options.cache_dir) if options.cache_dir else None
        self.stats = SuiteStats()
        self._warned = False

    def __call__(self, case: CaseSpec, msg: TargetMeasured) -> None:
        m = msg.measurement
        self.stats.judged += 1
        self.stats.reused += msg.cached
        if (self.cache is not None and msg.key is not None and not msg.cached
                and cacheable(m)):
            try:
                self.cache.put(msg.key, m)
            except OSError as exc:
                if not self._warned:
                    self._warned = True
                    print(f"cl-validate: warning: cannot write the cache in {self.cache.root}: "
                          f"{exc.strerror or exc}; measurements are not kept for the next "
                          "run (hint: check --cache-dir)", file=sys.stderr)
        self.on_result(judge(case, m, self.options.stale_budget, wall_seconds=msg.wall_seconds,
                             cached=msg.cached))


def run_suite(cases: Sequence[CaseSpec], options: RunOptions,
              on_result: Callable[[CaseResult], None], *,
              pool: WorkerPool | None = None) -> SuiteStats:
    """Judge every case × target: in worker processes (`pool`, or a pool of its own) unless
    `options.isolate` is off. Raises `DeviceUnavailableError` before any case runs when
    ``--require-device`` names a device this machine lacks."""
    judged = _Judge(options, on_result)
    todo = [c for c in cases if selected_targets(c, options)]
    if not options.isolate:
        in_process(todo, options, judged)
        return judged.stats
    own = pool is None
    pool = pool if pool is not None else WorkerPool(options)
    try:
        if options.require_device:
            pool.require_devices(todo)
        pool.run(todo, judged)
    finally:
        if own:
            pool.shutdown()
    return judged.stats


def in_process(cases: Iterable[CaseSpec], options: RunOptions,
               on_target: Callable[[CaseSpec, TargetMeasured], None]) -> None:
    """Measure cases one after another in this process: no isolation, no timeout or memory
    cap (``--no-isolation``, the pytest plugin's default, the tests). Imports torch and TVM."""
    # lazy: torch and TVM (the measurement runs here, in this process)
    from cl_validate.compile.target import device_available
    from cl_validate.run.measure import measure_or_reuse

    cases = list(cases)
    if options.require_device:
        require_devices(cases, options, device_available)
    last = time.perf_counter()
    for case in cases:
        def emit(m: Measurement, key: str | None, cached: bool, case: CaseSpec = case) -> None:
            nonlocal last
            now = time.perf_counter()
            on_target(case, TargetMeasured(m, key, cached, wall_seconds=now - last))
            last = now

        measure_or_reuse(case, options, emit)


def run_in_process(cases: Iterable[CaseSpec], options: RunOptions,
                   on_result: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Judge cases in this process and return the results (for the tests and ``show``-like
    tools; `run_suite` with ``isolate=False`` does the same for the CLI)."""
    results: list[CaseResult] = []

    def keep(case: CaseSpec, msg: TargetMeasured) -> None:
        r = judge(case, msg.measurement, options.stale_budget, wall_seconds=msg.wall_seconds,
                  cached=msg.cached)
        results.append(r)
        if on_result is not None:
            on_result(r)

    in_process(cases, options, keep)
    return results
