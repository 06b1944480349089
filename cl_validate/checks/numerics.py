"""The ``numerics`` check: TVM's outputs against PyTorch's, within the case's tolerance.

Two rules, chosen per case (and target and output) by ``[tolerance] reference``:

- ``"float32"`` (default): elementwise ``|tvm - torch| <= atol + rtol * |torch|``
  (numpy.isclose) against eager float32.
- ``"float64"``: the model also runs eagerly in float64; TVM's root-mean-square error
  against it must be at most ``multiplier`` × eager float32's own RMSE against it, plus
  ``floor``. A deep network's float32 error is then judged against what float32 can do on
  that network, with no per-model tuning (the rule PyTorch's accuracy CI accepts compiled
  models by).

NaN or Inf in either output always fails: a model that produces them cannot be validated, and
a tolerance must never hide them. `ErrorStats` carries the figures that explain a mismatch;
a failure also names the first pipeline stage that broke them (`cl_validate.checks.bisection`).
"""
# ErrorStats and compare live in error_stats (the bisection judges by them too); they are
# re-exported here, where the check's readers look for them.

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from cl_validate.checks.bisection import Bisection
from cl_validate.checks.error_stats import ErrorStats, compare
from cl_validate.checks.measurement import Sample
from cl_validate.checks.verdict import CheckResult, Measured, Status
from cl_validate.spec import CaseSpec


def compare_all(case: CaseSpec, target: str, actual: Sequence[np.ndarray],
                expected: Sequence[np.ndarray], sample: str = "",
                reference64: Sequence[np.ndarray] | None = None) -> list[ErrorStats]:
    return [compare(a, e, case.tolerance_for(target, i)[0], i, sample,
                    reference64[i] if reference64 is not None else None)
            for i, (a, e) in enumerate(zip(actual, expected, strict=True))]


def sample_stats(case: CaseSpec, target: str, sample: Sample) -> list[ErrorStats]:
    """Every output of one sample, judged by the case's rule for it."""
    return compare_all(case, target, sample.actual, sample.expected, sample.label,
                       sample.reference64)


def severity(s: ErrorStats) -> tuple[bool, float]:
    """How bad a failure is: a NaN or Inf first, then the largest error by its rule."""
    return (bool(s.nonfinite_tvm or s.nonfinite_torch),
            s.ratio if s.tolerance.float64 else s.max_abs)


def worst_failure(stats: Sequence[ErrorStats]) -> ErrorStats | None:
    """The failure a verdict names (`severity`), None when every output is within."""
    bad = [s for s in stats if not s]
    return max(bad, key=severity) if bad else None


def check_numerics(case: CaseSpec, target: str, stats: Sequence[ErrorStats],
                   bisection: Bisection | None = None) -> CheckResult:
    if not stats:
        return CheckResult("numerics", Status.ERROR, f"the model has no outputs ({target})",
                           kind="NoOutputs")
    worst = max(stats, key=lambda s: s.max_abs)
    f64 = [s for s in stats if s.tolerance.float64]
    measured = Measured(max_abs=worst.max_abs, max_rel=max(s.max_rel for s in stats),
                        rmse=max(s.rmse for s in stats),
                        float64_ratio=max(s.ratio for s in f64) if f64 else None)
    body = "\n".join(s.detail() for s in stats)
    samples = list(dict.fromkeys(s.sample for s in stats))
    failed = worst_failure(stats)
    if failed is not None:
        _, line = case.tolerance_for(target, failed.output)
        nonfinite = failed.nonfinite_tvm or failed.nonfinite_torch
        kind = "ShapeMismatch" if failed.shape_mismatch else "NonFinite" if nonfinite else \
            "NumericsMismatch"
        message = f"numerics {failed.summary()} ({target})"
        if bisection is not None:
            message += f"; {bisection.summary()}"
            body = bisection.render() + "\n\n" + body
            measured = replace(measured, first_break=bisection.first_break)
        return CheckResult("numerics", Status.FAILED, message, kind=kind, line=line,
                           body=body, measured=measured)
    _, line = case.tolerance_for(target, 0)
    over = f" over {len(samples)} samples ({'; '.join(samples)})" if len(samples) > 1 else ""
    if f64:
        s = max(f64, key=lambda x: x.ratio)
        head = (f"RMSE {s.rmse:.3g} against float64, {s.ratio:.3g}x eager float32's "
                f"(allowed {s.tolerance.multiplier:g}x + {s.tolerance.floor:g})")
    else:
        head = f"max abs {worst.max_abs:.3g}, max rel {measured.max_rel:.3g}"
    return CheckResult("numerics", Status.PASSED, head + over, line=line, body=body,
                       measured=measured)


__all__ = ["ErrorStats", "check_numerics", "compare", "compare_all", "sample_stats",
           "severity", "worst_failure"]
