"""Measuring cases in this process, one after another: no isolation, no timeout or memory cap
(``--no-isolation``, ``show``-like tools, the pytest plugin's default, the tests). Imports
torch and TVM; a `Measurer` for `cl_validate.suite.driver.run_suite`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

from cl_validate.checks.judge import judge
from cl_validate.checks.verdict import CaseResult
from cl_validate.compile.tvm_targets import device_available
from cl_validate.measurements.measurement import Measurement
from cl_validate.measurements.messages import TargetMeasured
from cl_validate.session.case_session import CaseSession
from cl_validate.spec import CaseSpec
from cl_validate.spec.options import RunOptions, require_devices


class InProcess:
    """Measure each case in a `CaseSession` of this process."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options

    def require_devices(self, cases: Sequence[CaseSpec]) -> None:
        require_devices(cases, self.options, device_available)

    def run(self, cases: Sequence[CaseSpec],
            report: Callable[[CaseSpec, TargetMeasured], None],
            on_inputs: object = None) -> None:
        """Measure each case here (what it read is not recorded: this process is not the
        case's own, so the cache answers it only by its full key)."""
        last = time.perf_counter()
        for case in cases:
            def emit(m: Measurement, key: str | None, cached: bool,
                     case: CaseSpec = case) -> None:
                nonlocal last
                now = time.perf_counter()
                report(case, TargetMeasured(m, key, cached, wall_seconds=now - last))
                last = now

            CaseSession(case, self.options).measure_or_reuse(emit)

    def shutdown(self) -> None:
        pass


def judge_in_process(cases: Iterable[CaseSpec], options: RunOptions,
                     on_result: Callable[[CaseResult], None] | None = None
                     ) -> list[CaseResult]:
    """Measure and judge cases in this process and return the results (the tests, and tools
    that look at a few cases)."""
    results: list[CaseResult] = []

    def keep(case: CaseSpec, msg: TargetMeasured) -> None:
        r = judge(case, msg.measurement, options.stale_budget, wall_seconds=msg.wall_seconds,
                  cached=msg.cached)
        results.append(r)
        if on_result is not None:
            on_result(r)

    InProcess(options).run(list(cases), keep)
    return results
