"""Judge a measurement: every check's verdict for one case × target, from the case file as it
is now (so a cached measurement re-judged after a budget or tolerance edit is right)."""

from __future__ import annotations

from dataclasses import replace

from cl_validate.checks.budget import check_kernels, check_layout_transforms
from cl_validate.checks.cost import (
    BYTES,
    FALLBACK_KERNELS,
    TIME_SHARE,
    check_fallback_kernels,
    check_transform_bytes,
    check_transform_time_share,
)
from cl_validate.checks.kernel_list import check_kernel_list
from cl_validate.checks.layout import check_layout
from cl_validate.checks.measurement import Measurement
from cl_validate.checks.numerics import check_numerics, sample_stats
from cl_validate.checks.verdict import (
    CHECKS,
    COMPILE,
    NOT_RUN_ERRORED,
    CaseResult,
    CheckResult,
    Status,
)
from cl_validate.errors import ErrorRecord
from cl_validate.spec import CaseSpec
from cl_validate.spec.config import StalePolicy

#: Where a case file declares what each check checks: the line a check's report points at
#: when its verdict names no more specific one (a skip, a pass).
_DECLARED_BY: dict[str, tuple[str, ...]] = {
    COMPILE: ("model",), "layout": ("layout",),
    "layout_transforms": ("budget", "layout_transforms"), "kernels": ("budget", "kernels"),
    "kernel_list": ("model",), "numerics": ("tolerance",),
    BYTES: ("budget", BYTES), FALLBACK_KERNELS: ("budget", FALLBACK_KERNELS),
    TIME_SHARE: ("budget", TIME_SHARE),
}


def declaring_line(case: CaseSpec, check: str) -> int:
    """The case-file line a check is about: the key that declares it, else its table, else
    the ``model`` line (every case has one), else the first line."""
    return case.line_of(*_DECLARED_BY.get(check, ("model",))) or case.line_of("model") or 1


def with_lines(case: CaseSpec, checks: list[CheckResult]) -> list[CheckResult]:
    """Every verdict with a line: publishers annotate a testcase only where it has one."""
    return [c if c.line else replace(c, line=declaring_line(case, c.check)) for c in checks]


def error_checks(error: ErrorRecord, seconds: float = 0.0) -> list[CheckResult]:
    """A case × target that could not be measured: one `error` verdict (``compile``) with the
    reason and the detail (a traceback's or the worker output's tail), the other checks
    skipped as not run. One error, not one per check: the checks did not fail, they never
    ran."""
    return [CheckResult(COMPILE, Status.ERROR, error.message, kind=error.kind,
                        body=error.detail, line=error.line, seconds=seconds),
            *(CheckResult(c, Status.SKIPPED, NOT_RUN_ERRORED, kind="NotRun")
              for c in CHECKS if c != COMPILE)]


def judge(case: CaseSpec, m: Measurement, stale: StalePolicy = StalePolicy.FAIL, *,
          wall_seconds: float | None = None, cached: bool = False) -> CaseResult:
    """The verdicts of one measurement under the case file as it is now.

    `wall_seconds` is what this case × target cost the run (the parent's clock; default: the
    worker's own measurement), and every second of it goes to one of the checks: running
    the program to ``numerics``, the rest (a worker's start, the model, export, compile,
    analysis; reading the cache) to ``compile``. A cached measurement ran nothing now.
    """
    seconds = m.seconds if wall_seconds is None else wall_seconds
    numerics_s = 0.0 if cached else min(m.numerics_seconds, seconds)
    profile_s = 0.0 if cached else min(m.profile_seconds, seconds - numerics_s)
    result = CaseResult(case, m.target, seconds=seconds, peak_rss_mb=m.peak_rss_mb)
    if m.error is not None:
        result.checks = with_lines(case, error_checks(m.error, seconds))
        return result
    assert m.kernels is not None
    target = m.target
    result.kernels, result.stage_counts, result.profile = m.kernels, m.stage_counts, m.profile
    built = f" (IR only: {m.build_skipped})" if m.build_skipped else ""
    result.bisection = m.bisection
    compiled = CheckResult(COMPILE, Status.PASSED, f"compiled for {target} in "
                           f"{m.compile_seconds:.1f} s{built}", line=case.line_of("model"))
    if m.stray_processes:  # the measurement stands; the leak is the model's bug to fix
        n = len(m.stray_processes)
        compiled = CheckResult(
            COMPILE, Status.ERROR, f"the model's code left {n} process{'es' * (n > 1)} "
            f"running ({m.stray_processes[0]}); killed", kind="StrayProcess",
            line=case.line_of("model"), body="\n".join(m.stray_processes))
    result.checks = [
        compiled,
        check_layout(case, target, m.op_layouts),
        check_layout_transforms(case, target, m.kernels, m.stage_counts, stale=stale),
        check_transform_bytes(case, target, m.kernels, stale=stale),
        check_kernels(case, target, m.kernels, stale=stale),
        check_fallback_kernels(case, target, m.kernels, stale=stale),
        check_kernel_list(case, target, m.kernels),
        _numerics(case, m),
        check_transform_time_share(case, target, m.kernels, m.profile, m.profile_skip),
    ]
    spent = {"numerics": numerics_s, TIME_SHARE: profile_s,
             COMPILE: seconds - numerics_s - profile_s}
    result.checks = with_lines(case, [replace(c, seconds=spent.get(c.check, 0.0))
                                      for c in result.checks])
    return result


def _numerics(case: CaseSpec, m: Measurement) -> CheckResult:
    if m.model_outputs is not None and len(case.outputs) > m.model_outputs:
        # Known only once forward() has run (in the worker), so judged here, not exit 2; the
        # static checks stand.
        return CheckResult("numerics", Status.ERROR,
                           f"case declares {len(case.outputs)} [[outputs]] but the model "
                           f"returns {m.model_outputs}", kind="CaseFileError",
                           line=case.line_of("outputs", str(m.model_outputs)))
    if m.numerics_skip is not None:
        return CheckResult("numerics", Status.SKIPPED, m.numerics_skip.reason,
                           kind=m.numerics_skip.kind)
    if m.numerics_error is not None:
        return CheckResult("numerics", Status.ERROR, m.numerics_error.message,
                           kind=m.numerics_error.kind, body=m.numerics_error.detail,
                           line=m.numerics_error.line)
    stats = []
    for s in m.samples:  # every sample, every output: the verdict is the worst
        if len(s.actual) != len(s.expected):
            at = f" at {s.label}" if s.label else ""
            return CheckResult("numerics", Status.FAILED, f"TVM returned {len(s.actual)} "
                               f"outputs, PyTorch {len(s.expected)}{at} ({m.target})",
                               kind="OutputCountMismatch")
        if s.reference64 is None and any(case.tolerance_for(m.target, i)[0].float64
                                         for i in range(len(s.expected))):
            return CheckResult("numerics", Status.ERROR, "this measurement has no float64 "
                               "reference run, which the tolerance now asks for",
                               kind="Float64ReferenceMissing",
                               line=case.tolerance_for(m.target, None)[1])
        stats.extend(sample_stats(case, m.target, s))
    result = check_numerics(case, m.target, stats, m.bisection)
    if m.ran_on:  # a reviewer must see that the figures come from the device, not the runner
        result = replace(result, message=f"{result.message} (on {m.ran_on})",
                         body=f"ran on {m.ran_on}\n{result.body}")
    return result
