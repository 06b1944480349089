"""The ``numerics`` check: TVM's outputs against PyTorch's, within the case's tolerance.

The bound is elementwise ``|tvm - torch| <= atol + rtol * |torch|`` (numpy.isclose). NaN or
Inf in either output always fails: a model that produces them cannot be validated, and a
tolerance must never hide them. `ErrorStats` carries the figures that explain a mismatch
(max/mean abs and rel error, how many elements are outside, where the worst one is).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cl_validate.checks.verdict import CheckResult, Measured, Status
from cl_validate.spec import CaseSpec, Tolerance


@dataclass(frozen=True)
class ErrorStats:
    """How far one TVM output is from PyTorch; truthy when within tolerance."""

    output: int
    shape: tuple[int, ...]
    tolerance: Tolerance
    max_abs: float
    max_rel: float
    mean_abs: float
    mismatched: int  # elements outside the bound
    total: int
    nonfinite_tvm: int
    nonfinite_torch: int
    worst_index: tuple[int, ...] | None
    shape_mismatch: str | None = None
    sample: str = ""  # which inputs ("batch=16"); "" for a case's only sample

    def __bool__(self) -> bool:
        return (self.shape_mismatch is None and self.mismatched == 0
                and self.nonfinite_tvm == 0 and self.nonfinite_torch == 0)

    @property
    def where(self) -> str:
        """``output 0`` or ``output 0 at batch=16``."""
        return f"output {self.output}" + (f" at {self.sample}" if self.sample else "")

    def summary(self) -> str:
        """One line a reviewer can read alone."""
        if self.shape_mismatch:
            return f"{self.where}: {self.shape_mismatch}"
        parts = [f"{self.where}: max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g}"]
        if self.nonfinite_tvm or self.nonfinite_torch:
            parts.append(f"non-finite values: {self.nonfinite_tvm} in TVM, "
                         f"{self.nonfinite_torch} in PyTorch")
        if self.mismatched:
            parts.append(f"{self.mismatched}/{self.total} elements outside "
                         f"rtol {self.tolerance.rtol:g} atol {self.tolerance.atol:g}")
        return "; ".join(parts)

    def detail(self) -> str:
        return (f"{self.where} shape {list(self.shape)}: max_abs={self.max_abs:.6g} "
                f"max_rel={self.max_rel:.6g} mean_abs={self.mean_abs:.6g} "
                f"mismatched={self.mismatched}/{self.total} "
                f"nonfinite(tvm/torch)={self.nonfinite_tvm}/{self.nonfinite_torch} "
                f"worst_at={list(self.worst_index) if self.worst_index else '-'} "
                f"rtol={self.tolerance.rtol:g} atol={self.tolerance.atol:g}")


def compare(actual: np.ndarray, expected: np.ndarray, tol: Tolerance, output: int = 0,
            sample: str = "") -> ErrorStats:
    """Error statistics of `actual` (TVM) against `expected` (PyTorch)."""
    if actual.shape != expected.shape:
        return ErrorStats(output, tuple(expected.shape), tol, float("inf"), float("inf"),
                          float("inf"), expected.size, expected.size, 0, 0, None,
                          f"shape {list(actual.shape)} from TVM, {list(expected.shape)} from "
                          "PyTorch", sample)
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    fin_a, fin_e = np.isfinite(a), np.isfinite(e)
    both = fin_a & fin_e
    diff = np.where(both, np.abs(a - e), 0.0)
    rel = np.where(both, diff / np.maximum(np.abs(e), np.finfo(np.float64).tiny), 0.0)
    rel = np.where(diff == 0, 0.0, rel)
    bound = tol.atol + tol.rtol * np.abs(e)
    outside = both & (diff > bound)
    worst = None
    if diff.size:
        worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
    return ErrorStats(
        output=output, shape=tuple(expected.shape), tolerance=tol,
        max_abs=float(diff.max()) if diff.size else 0.0,
        max_rel=float(rel.max()) if rel.size else 0.0,
        mean_abs=float(diff.mean()) if diff.size else 0.0,
        mismatched=int(outside.sum()), total=int(e.size),
        nonfinite_tvm=int((~fin_a).sum()), nonfinite_torch=int((~fin_e).sum()),
        worst_index=worst, sample=sample,
    )


def compare_all(case: CaseSpec, target: str, actual: Sequence[np.ndarray],
                expected: Sequence[np.ndarray], sample: str = "") -> list[ErrorStats]:
    return [compare(a, e, case.tolerance_for(target, i)[0], i, sample)
            for i, (a, e) in enumerate(zip(actual, expected, strict=True))]


def check_numerics(case: CaseSpec, target: str, stats: Sequence[ErrorStats]) -> CheckResult:
    if not stats:
        return CheckResult("numerics", Status.ERROR, f"the model has no outputs ({target})",
                           kind="NoOutputs")
    bad = [s for s in stats if not s]
    worst = max(stats, key=lambda s: s.max_abs)
    measured = Measured(max_abs=worst.max_abs, max_rel=max(s.max_rel for s in stats))
    body = "\n".join(s.detail() for s in stats)
    samples = list(dict.fromkeys(s.sample for s in stats))
    if bad:  # the worst failure: a NaN or Inf first, then the largest error
        s = max(bad, key=lambda b: (bool(b.nonfinite_tvm or b.nonfinite_torch), b.max_abs))
        _, line = case.tolerance_for(target, s.output)
        nonfinite = s.nonfinite_tvm or s.nonfinite_torch
        kind = "ShapeMismatch" if s.shape_mismatch else "NonFinite" if nonfinite else \
            "NumericsMismatch"
        return CheckResult("numerics", Status.FAILED, f"numerics {s.summary()} ({target})",
                           kind=kind, line=line, body=body, measured=measured)
    _, line = case.tolerance_for(target, 0)
    over = f" over {len(samples)} samples ({'; '.join(samples)})" if len(samples) > 1 else ""
    return CheckResult("numerics", Status.PASSED,
                       f"max abs {worst.max_abs:.3g}, max rel {measured.max_rel:.3g}{over}",
                       line=line, body=body, measured=measured)
