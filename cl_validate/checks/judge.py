"""Judge a measurement: every check's verdict for one case × target, from the case file as it
is now (so a cached measurement re-judged after a budget or tolerance edit is right)."""

from __future__ import annotations

from dataclasses import replace

from cl_validate.checks.budget import check_kernels, check_layout_transforms
from cl_validate.checks.kernel_list import check_kernel_list
from cl_validate.checks.layout import check_layout
from cl_validate.checks.measurement import Measurement
from cl_validate.checks.numerics import check_numerics, compare_all
from cl_validate.checks.verdict import CHECKS, CaseResult, CheckResult, Status
from cl_validate.errors import ErrorRecord
from cl_validate.spec import CaseSpec
from cl_validate.spec.config import StalePolicy


def error_checks(error: ErrorRecord) -> list[CheckResult]:
    """Every check of a case × target that could not be measured, as `error` verdicts."""
    return [CheckResult(c, Status.ERROR, error.message, kind=error.kind, body=error.detail,
                        line=error.line) for c in CHECKS]


def judge(case: CaseSpec, m: Measurement, stale: StalePolicy = StalePolicy.FAIL) -> CaseResult:
    """The verdicts of one measurement under the case file as it is now."""
    result = CaseResult(case, m.target, seconds=m.seconds, peak_rss_mb=m.peak_rss_mb)
    if m.error is not None:
        result.checks = error_checks(m.error)
        return result
    if m.model_outputs is not None and len(case.outputs) > m.model_outputs:
        # Known only once forward() has run, in the worker: an `error` verdict, not exit 2.
        result.checks = error_checks(ErrorRecord(
            f"case declares {len(case.outputs)} [[outputs]] but the model returns "
            f"{m.model_outputs}", "CaseFileError", "",
            case.line_of("outputs", str(m.model_outputs))))
        return result
    assert m.kernels is not None
    target = m.target
    result.kernels, result.stage_counts = m.kernels, m.stage_counts
    result.checks = [
        check_layout(case, target, m.op_layouts),
        check_layout_transforms(case, target, m.kernels, m.stage_counts, stale=stale),
        check_kernels(case, target, m.kernels, stale=stale),
        check_kernel_list(case, target, m.kernels),
        _numerics(case, m),
    ]
    result.checks = [replace(c, seconds=m.compile_seconds if i == 0 else m.numerics_seconds
                             if c.check == "numerics" else 0.0)
                     for i, c in enumerate(result.checks)]
    return result


def _numerics(case: CaseSpec, m: Measurement) -> CheckResult:
    if m.numerics_skip is not None:
        return CheckResult("numerics", Status.SKIPPED, m.numerics_skip.reason,
                           kind=m.numerics_skip.kind)
    if m.numerics_error is not None:
        return CheckResult("numerics", Status.ERROR, m.numerics_error.message,
                           kind=m.numerics_error.kind, body=m.numerics_error.detail)
    assert m.actual is not None and m.expected is not None
    if len(m.actual) != len(m.expected):
        return CheckResult("numerics", Status.FAILED, f"TVM returned {len(m.actual)} outputs, "
                           f"PyTorch {len(m.expected)} ({m.target})", kind="OutputCountMismatch")
    return check_numerics(case, m.target, compare_all(case, m.target, m.actual, m.expected))
