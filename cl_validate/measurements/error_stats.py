"""How far one output of TVM is from PyTorch: `ErrorStats` and `compare`, shared by the
``numerics`` check (`cl_validate.checks.numerics`) and the stage bisection
(`cl_validate.measurements.bisection`), which judge by the same rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cl_validate.measurements.quant_steps import OutputStep, steps_text
from cl_validate.spec import Tolerance

#: An error of k steps computed from float32 outputs is k within float32's own rounding of
#: the dequantized values (a relative 6e-8 of them): far below this slack, which no real
#: miss of a step comes near.
STEP_SLACK = 1e-3


@dataclass(frozen=True)
class ErrorStats:
    """How far one TVM output is from the reference; truthy when within tolerance."""

    output: int
    shape: tuple[int, ...]
    tolerance: Tolerance
    max_abs: float
    max_rel: float
    mean_abs: float
    mismatched: int  # elements outside atol + rtol·|ref| (the float32 rule)
    total: int
    nonfinite_tvm: int
    nonfinite_torch: int
    worst_index: tuple[int, ...] | None
    shape_mismatch: str | None = None
    sample: str = ""  # which inputs ("batch=16"); "" for a case's only sample
    rmse: float = 0.0  # TVM against the reference
    eager_rmse: float | None = None  # float64 rule: eager float32 against float64
    step: OutputStep | None = None  # steps rule: the output's quantization step
    label: str = ""  # how reports name the output (``output logits``); "": by its index
    #: a selection output (`measurements.selection`): items TVM has in another order, and
    #: items that are other ones altogether (allowed by the case, taken as PyTorch's)
    reordered: int = 0
    differing: int = 0
    #: steps rule against float64: eager float32's own largest error against it (what the
    #: quantized graph's float32 sensitivity is, before any compiler)
    eager_max_abs: float | None = None
    #: the dtype eager PyTorch computed this output in (`eager_name`): what "eager" means
    #: in the figures (a half model's eager run is in float16, not float32)
    eager: str = "float32"

    def __bool__(self) -> bool:
        if self.shape_mismatch is not None or self.nonfinite_tvm or self.nonfinite_torch:
            return False
        t = self.tolerance
        if t.steps is not None:
            return self.step is not None and self.steps <= t.steps + STEP_SLACK
        if t.float64:
            return self.rmse <= self.bound
        return self.mismatched == 0

    @property
    def steps(self) -> float:
        """The largest error in quantization steps (inf: the output has no step)."""
        if self.step is None or self.step.scale <= 0:
            return math.inf
        return self.max_abs / self.step.scale

    @property
    def eager_steps(self) -> float | None:
        """Eager float32's own largest error against float64, in steps (None: unknown)."""
        if self.eager_max_abs is None or self.step is None or self.step.scale <= 0:
            return None
        return self.eager_max_abs / self.step.scale

    @property
    def sensitive(self) -> bool:
        """A steps failure eager float32 has too: the quantized graph itself is that far
        from float64 (a rounding flip cascading), not a compiler stage."""
        eager, allowed = self.eager_steps, self.tolerance.steps
        return eager is not None and allowed is not None and eager > allowed + STEP_SLACK

    @property
    def bound(self) -> float:
        """The float64 rule's largest allowed RMSE."""
        t = self.tolerance
        return t.multiplier * (self.eager_rmse or 0.0) + t.floor

    @property
    def ratio(self) -> float:
        """TVM's RMSE over eager float32's, both against float64."""
        eager = self.eager_rmse or 0.0
        if eager > 0:
            return self.rmse / eager
        return 0.0 if self.rmse == 0 else math.inf

    @property
    def where(self) -> str:
        """``output 0`` or ``output 0 at batch=16``."""
        return (self.label or f"output {self.output}") + (
            f" at {self.sample}" if self.sample else "")

    def figure(self) -> str:
        """The one figure this rule judges by: ``max abs 3.1e-02`` or ``RMSE 2.2e-06 (1.4x
        eager)``."""
        if self.shape_mismatch:
            return self.shape_mismatch
        if self.tolerance.by_steps:
            return steps_text(self.steps)
        if self.tolerance.float64:
            return f"RMSE {self.rmse:.3g} ({self.ratio:.3g}x eager {self.eager})"
        return f"max abs {self.max_abs:.3g}"

    def summary(self) -> str:
        """One line a reviewer can read alone."""
        if self.shape_mismatch:
            return f"{self.where}: {self.shape_mismatch}"
        t = self.tolerance
        if t.steps is not None:
            against = "float64" if t.float64 else f"eager {self.eager}"
            parts = [f"{self.where}: no quantization step (no quantize before it)"
                     if self.step is None else
                     f"{self.where}: {steps_text(self.steps)} off {against} (allowed "
                     f"{steps_text(t.steps)}; {self.step.describe()}); max abs "
                     f"{self.max_abs:.3g}"]
            if self.eager_steps is not None:
                parts.append(f"eager {self.eager} is {steps_text(self.eager_steps)} off float64 "
                             "itself")
        elif t.float64:
            parts = [f"{self.where}: RMSE {self.rmse:.3g} against float64, {self.ratio:.3g}x "
                     f"eager {self.eager}'s {self.eager_rmse or 0:.3g} (allowed {t.multiplier:g}x "
                     f"+ {t.floor:g}); max abs {self.max_abs:.3g}"]
        else:
            parts = [f"{self.where}: max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g}"]
        if self.step is not None and not t.by_steps:  # a quantized output, under another rule
            parts.append(f"max {steps_text(self.steps)} of its quantization")
        if self.nonfinite_tvm or self.nonfinite_torch:
            parts.append(f"non-finite values: {self.nonfinite_tvm} in TVM, "
                         f"{self.nonfinite_torch} in PyTorch")
        if self.mismatched and not t.float64 and not t.by_steps:
            parts.append(f"{self.mismatched}/{self.total} elements outside "
                         f"rtol {t.rtol:g} atol {t.atol:g}")
        if self.reordered or self.differing:
            parts.append(f"compared as a selection: {self.reordered} items in another order"
                         + (f", {self.differing} other items (allowed)" if self.differing
                            else ""))
        return "; ".join(parts)

    def detail(self) -> str:
        t = self.tolerance
        if t.steps is not None:
            rule = (f"steps={self.steps:.4g} allowed={t.steps:g} reference={t.reference} "
                    + (self.step.describe() if self.step else "no step"))
        elif t.float64:
            rule = (f"reference=float64 rmse={self.rmse:.6g} "
                    f"eager_rmse={self.eager_rmse or 0:.6g} ratio={self.ratio:.4g} "
                    f"allowed={t.multiplier:g}x+{t.floor:g}")
        else:
            rule = f"mismatched={self.mismatched}/{self.total} rtol={t.rtol:g} atol={t.atol:g}"
        if self.step is not None and not t.by_steps:
            rule += f" steps={self.steps:.4g} ({self.step.describe()})"
        return (f"{self.where} shape {list(self.shape)}: max_abs={self.max_abs:.6g} "
                f"max_rel={self.max_rel:.6g} mean_abs={self.mean_abs:.6g} "
                f"nonfinite(tvm/torch)={self.nonfinite_tvm}/{self.nonfinite_torch} "
                f"worst_at={list(self.worst_index) if self.worst_index else '-'} {rule}")


def _rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(a - b)))) if a.size else 0.0


def eager_name(dtype: str) -> str:
    """How the figures name eager PyTorch's run of an output PyTorch computed in `dtype`:
    by its float dtype (``float16``, ``bfloat16``); float32 for anything else (an integer
    output of a float32 model, an unknown dtype)."""
    return dtype if dtype in ("float16", "bfloat16", "float64") else "float32"


def compare(actual: np.ndarray, expected: np.ndarray, tol: Tolerance, output: int = 0,
            sample: str = "", reference64: np.ndarray | None = None,
            step: OutputStep | None = None, eager: str = "float32") -> ErrorStats:
    """Error statistics of `actual` (TVM) against PyTorch: against `expected` (eager
    float32), or with the float64 rule against `reference64`, eager float32's own error
    against it setting the bar; the steps rule counts the error in `step`s."""
    ref = expected
    if tol.float64:
        if reference64 is None:
            raise ValueError("the float64 rule needs the float64 reference run")
        ref = reference64
    if actual.shape != ref.shape:
        return ErrorStats(output, tuple(ref.shape), tol, math.inf, math.inf, math.inf,
                          ref.size, ref.size, 0, 0, None,
                          f"shape {list(actual.shape)} from TVM, {list(ref.shape)} from "
                          "PyTorch", sample, math.inf, step=step)
    a = actual.astype(np.float64)
    e = ref.astype(np.float64)
    fin_a, fin_e = np.isfinite(a), np.isfinite(e)
    both = fin_a & fin_e
    diff = np.where(both, np.abs(a - e), 0.0)
    # relative to the reference, or to atol where the reference is smaller (a zero reference
    # would make any difference infinitely relative)
    floor = max(tol.atol, np.finfo(np.float64).tiny)
    rel = np.where(both, diff / np.maximum(np.abs(e), floor), 0.0)
    rel = np.where(diff == 0, 0.0, rel)
    outside = both & (diff > tol.atol + tol.rtol * np.abs(e))
    worst = None
    if diff.size:
        worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
    eager_rmse = eager_max = None
    if tol.by_ratio or (tol.float64 and step is not None and expected.shape == ref.shape):
        f32 = expected.astype(np.float64)
        eager_rmse = _rmse(np.where(both, f32, 0.0), np.where(both, e, 0.0))
        eager_max = float(np.where(both, np.abs(f32 - e), 0.0).max()) if f32.size else 0.0
    return ErrorStats(
        output=output, shape=tuple(ref.shape), tolerance=tol,
        max_abs=float(diff.max()) if diff.size else 0.0,
        max_rel=float(rel.max()) if rel.size else 0.0,
        mean_abs=float(diff.mean()) if diff.size else 0.0,
        mismatched=int(outside.sum()), total=int(e.size),
        nonfinite_tvm=int((~fin_a).sum()), nonfinite_torch=int((~fin_e).sum()),
        worst_index=worst, sample=sample,
        rmse=_rmse(np.where(both, a, 0.0), np.where(both, e, 0.0)), eager_rmse=eager_rmse,
        step=step, eager_max_abs=eager_max if tol.steps is not None else None, eager=eager,
    )
