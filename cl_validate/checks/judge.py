"""Judge a measurement: every check's verdict for one case × target, from the case file as it
is now (so a cached measurement re-judged after a budget or tolerance edit is right)."""

from __future__ import annotations

from dataclasses import replace

from cl_validate.checks.compile import CompileCheck
from cl_validate.checks.registry import Judging, case_check, checks, get
from cl_validate.checks.verdict import CaseResult, CheckResult
from cl_validate.errors import ErrorRecord
from cl_validate.measurements.measurement import Measurement
from cl_validate.spec import CaseSpec
from cl_validate.spec.config import StalePolicy


def declaring_line(case: CaseSpec, check: str) -> int:
    """The case-file line a check is about: the key that declares it, else its table, else
    the ``model`` line (every case has one), else the first line."""
    return case.line_of(*get(check).declared_by) or case.line_of("model") or 1


def with_lines(case: CaseSpec, results: list[CheckResult]) -> list[CheckResult]:
    """Every verdict with a line: publishers annotate a testcase only where it has one."""
    return [c if c.line else replace(c, line=declaring_line(case, c.check)) for c in results]


def error_checks(error: ErrorRecord, seconds: float = 0.0) -> list[CheckResult]:
    """A case × target that could not be measured: the case's check errors with the reason,
    every other check is skipped as not run."""
    first = case_check()
    assert isinstance(first, CompileCheck)
    return first.errored(error, [c.name for c in checks() if c is not first], seconds)


def judge(case: CaseSpec, m: Measurement, stale: StalePolicy = StalePolicy.FAIL, *,
          wall_seconds: float | None = None, cached: bool = False) -> CaseResult:
    """The verdicts of one measurement under the case file as it is now.

    `wall_seconds` is what this case × target cost the run (the parent's clock; default: the
    case process's own measurement), and every second of it goes to one of the checks: what a check
    spent itself (running the program for numerics, timing the kernels) to it, the rest (a
    zygote's start, the model, export, compile, analysis; reading the cache) to the case's
    own check. A cached measurement ran nothing now.
    """
    seconds = m.seconds if wall_seconds is None else wall_seconds
    result = CaseResult(case, m.target, seconds=seconds, peak_rss_mb=m.peak_rss_mb)
    if m.error is not None:
        result.checks = with_lines(case, error_checks(m.error, seconds))
        return result
    assert m.kernels is not None
    result.kernels, result.stage_counts, result.profile = m.kernels, m.stage_counts, m.profile
    result.bisection = m.bisection
    # the [[outputs]] entries bound to the outputs the model returned, by name where named
    j = Judging(replace(case, output_names=tuple(m.output_names)), m, stale)
    first = case_check()
    spent: dict[str, float] = {}
    left = seconds
    for check in checks():  # each check's own share, never more than is left
        if check is not first:
            spent[check.name] = 0.0 if cached else min(check.seconds(m), left)
            left -= spent[check.name]
    spent[first.name] = left
    result.checks = with_lines(case, [replace(c.judge(j), seconds=spent[c.name])
                                      for c in checks()])
    return result
