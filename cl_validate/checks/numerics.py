"""The ``numerics`` check: TVM's outputs against PyTorch's, within the case's tolerance.

Two rules, chosen per case (and target and output) by ``[tolerance] reference``:

- ``"float32"`` (default): elementwise ``|tvm - torch| <= atol + rtol * |torch|``
  (numpy.isclose) against eager float32.
- ``"float64"``: the model also runs eagerly in float64; TVM's root-mean-square error
  against it must be at most ``multiplier`` × eager float32's own RMSE against it, plus
  ``floor``. A deep network's float32 error is then judged against what float32 can do on
  that network, with no per-model tuning (the rule PyTorch's accuracy CI accepts compiled
  models by).

A quantized model's outputs are judged in quantization steps with ``[tolerance] steps``:
the largest error against the reference (either of the above), over the output's step
(`cl_validate.measurements.quant_steps`, read off the exported QDQ graph), at most
``steps``. TVM and PyTorch compute the same QDQ graph in float32 in another order: where a
value before a quantize sits within float32 rounding of a rounding boundary, they round it to
neighbouring codes, one step apart; at the output's own quantize that is one step, so
``steps = 1`` is the bound for a graph whose earlier quantizes agree. A flip upstream moves
every value after it; in a deep network enough of them sit near a boundary that flips
cascade, in eager float32 against float64 as in TVM (measured on the bundled MobileNetV2:
up to 24 steps eager, 44 TVM), and no small bound holds there: the rule is for shallow QDQ
graphs. Under any other rule a quantized output's error is still said in steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from cl_validate.checks.registry import Check, FailureKind, Figure, Judging, register
from cl_validate.checks.verdict import CheckResult, Figures, Status
from cl_validate.measurements.bisection import Bisection
from cl_validate.measurements.error_stats import STEP_SLACK, ErrorStats, compare, eager_name
from cl_validate.measurements.measurement import Measurement, Sample
from cl_validate.measurements.quant_steps import OutputStep, steps_text
from cl_validate.measurements.selection import match_items
from cl_validate.spec import CaseSpec

NAME = "numerics"


class NumericsKind(FailureKind):
    """How the numerics check fails (or errors)."""

    MISMATCH = "NumericsMismatch", "an output is outside the tolerance"
    SHAPE_MISMATCH = "ShapeMismatch", "an output of TVM has another shape than PyTorch's"
    NON_FINITE = "NonFinite", "an output holds NaN or Inf (no tolerance may hide them)"
    OUTPUT_COUNT = "OutputCountMismatch", "TVM returned another number of outputs than PyTorch"
    NO_OUTPUTS = "NoOutputs", "the model has no outputs to compare"
    NO_STEP = ("NoQuantizationStep", "the tolerance counts quantization steps, but no quantize "
               "precedes the output (a float model, or a scale computed at run time)")
    CASE_FILE_ERROR = ("CaseFileError", "the case declares more [[outputs]] than the model "
                       "returns")
    FLOAT64_MISSING = ("Float64ReferenceMissing", "the tolerance asks for a float64 reference "
                       "the measurement does not have")
    FLOAT64_ERROR = "Float64ReferenceError", "the model cannot run in float64 for the reference"
    RUNTIME_ERROR = "RuntimeError", "running the compiled program raised"
    BUILD_UNAVAILABLE = ("BuildUnavailable", "this machine cannot build for the target, "
                         "which has a device to run on")
    RPC_ERROR = "RPCError", "running on the remote device failed"
    RPC_UNAVAILABLE = ("RPCUnavailable", "the RPC tracker or a server of the key cannot be "
                       "reached")
    EXPORT_ERROR = "ExportError", "the module could not be linked for the remote device"
    SELECTION_TOO_LARGE = ("SelectionTooLarge", "a selection output holds more items than "
                           "can be matched (each is weighed against every other)")
    INSENSITIVE = ("InsensitiveOutput", "the outputs barely depend on the input: a program "
                   "that ignored its input would pass, so the comparison cannot fail")


@dataclass(frozen=True)
class NumericsFigures(Figures):
    max_abs: float | None = None
    max_rel: float | None = None
    rmse: float | None = None  # root-mean-square error against the reference
    float64_ratio: float | None = None  # TVM's RMSE / eager float32's, both against float64
    first_break: str | None = None  # the first pipeline stage that broke the numerics
    steps: float | None = None  # the largest error in quantization steps (steps rule)

    def figure(self) -> str | None:
        """``1.0e-04`` (max abs error), ``1.3x f64`` (TVM's error over eager float32's,
        against float64), or ``1 step`` (the largest error in quantization steps)."""
        if self.steps is not None:
            return steps_text(self.steps)
        if self.float64_ratio is not None:
            return f"{self.float64_ratio:.2g}x f64"
        return f"{self.max_abs:.1e}" if self.max_abs is not None else None


def match_selections(case: CaseSpec, target: str, sample: Sample) -> Sample:
    """`sample` with every selection output's items in the reference's order (TVM's, and
    eager float32's where float64 is the reference) and what that took: done where the
    outputs are made (the case process, under its limits), so the parent, which judges,
    never does work that grows with the square of a model's output. Raises `TooManyItems`
    for a selection too large to match."""
    if sample.selections is not None:
        return sample
    actual, expected = list(sample.actual), list(sample.expected)
    selections: list[tuple[int, int] | None] = []
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        declared = case.declared_output(i)
        if declared is None or declared.selection is None:
            selections.append(None)
            continue
        tol = case.tolerance_for(target, i)[0]
        ref64 = sample.reference64[i] if sample.reference64 is not None else None
        axis, differing = declared.selection
        against = e
        if tol.float64 and ref64 is not None:  # eager's own order against float64's
            against = ref64
            expected[i] = match_items(e, ref64, axis, tol.atol, tol.rtol, differing).actual
        matched = match_items(a, against, axis, tol.atol, tol.rtol, differing)
        actual[i] = matched.actual
        selections.append((matched.reordered, matched.differing))
    return replace(sample, actual=actual, expected=expected, selections=selections)


def match_decoy(case: CaseSpec, target: str, decoy: list[np.ndarray], first: Sample
                ) -> list[np.ndarray]:
    """The decoy outputs (`Measurement.decoy`) with their selections matched to the first
    sample's as TVM's are: judged the same way, a selection that allows every item to differ
    makes the comparison one that cannot fail, and `insensitive_outputs` sees that."""
    if len(decoy) != len(first.expected) or any(
            d.shape != e.shape for d, e in zip(decoy, first.expected, strict=True)):
        return decoy
    base = replace(first, selections=None)
    return match_selections(case, target, replace(base, actual=list(decoy))).actual


def compare_all(case: CaseSpec, target: str, actual: Sequence[np.ndarray],
                expected: Sequence[np.ndarray], sample: str = "",
                reference64: Sequence[np.ndarray] | None = None,
                steps: Sequence[OutputStep | None] = ()) -> list[ErrorStats]:
    """Every output judged by the case's rule for it (`steps`: each output's quantization
    step, for the steps rule); selection outputs matched first (`match_selections`)."""
    return sample_stats(case, target, Sample(sample, list(actual), list(expected),
                                             None if reference64 is None else list(reference64)),
                        steps)


def sample_stats(case: CaseSpec, target: str, sample: Sample,
                 steps: Sequence[OutputStep | None] = (), match: bool = True
                 ) -> list[ErrorStats]:
    """Every output of one sample, judged by the case's rule for it; selections not
    matched yet are matched here when `match` (where the outputs are made). The parent
    judges with ``match=False``: a measurement whose selections were not matched (a case
    process that did not, or could not) is compared element by element."""
    if match:
        sample = match_selections(case, target, sample)
    out = []
    for i, (a, e) in enumerate(zip(sample.actual, sample.expected, strict=True)):
        tol = case.tolerance_for(target, i)[0]
        ref64 = sample.reference64[i] if sample.reference64 is not None else None
        stats = replace(compare(a, e, tol, i, sample.label, ref64,
                                steps[i] if i < len(steps) else None,
                                eager_name(sample.eager_dtypes[i]
                                           if i < len(sample.eager_dtypes) else "")),
                        label=case.output_label(i))
        matched = sample.selections[i] if sample.selections is not None and \
            i < len(sample.selections) else None
        if matched is not None:
            stats = replace(stats, reordered=matched[0], differing=matched[1])
        out.append(stats)
    return out


def severity(s: ErrorStats) -> tuple[bool, float]:
    """How bad a failure is: a NaN or Inf first, then the largest error by its rule."""
    return (bool(s.nonfinite_tvm or s.nonfinite_torch),
            s.steps if s.tolerance.by_steps else s.ratio if s.tolerance.by_ratio
            else s.max_abs)


def worst_failure(stats: Sequence[ErrorStats]) -> ErrorStats | None:
    """The failure a verdict names (`severity`), None when every output is within."""
    bad = [s for s in stats if not s]
    return max(bad, key=severity) if bad else None


def check_numerics(case: CaseSpec, target: str, stats: Sequence[ErrorStats],
                   bisection: Bisection | None = None,
                   elsewhere: Sequence[tuple[int, float]] = ()) -> CheckResult:
    """The verdict on every sample's `stats`; `elsewhere`: per output, (seed, eager
    float32's largest error against float64) on further input draws
    (`Measurement.eager_elsewhere`)."""
    if not stats:
        return CheckResult(NAME, Status.ERROR, f"the model has no outputs ({target})",
                           kind=NumericsKind.NO_OUTPUTS)
    worst = max(stats, key=lambda s: s.max_abs)
    f64 = [s for s in stats if s.tolerance.by_ratio]
    by_steps = [s for s in stats if s.tolerance.by_steps]
    figures = NumericsFigures(max_abs=worst.max_abs, max_rel=max(s.max_rel for s in stats),
                              rmse=max(s.rmse for s in stats),
                              float64_ratio=max(s.ratio for s in f64) if f64 else None,
                              steps=max(s.steps for s in by_steps) if by_steps else None)
    body = "\n".join(s.detail() for s in stats)
    samples = list(dict.fromkeys(s.sample for s in stats))
    failed = worst_failure(stats)
    if failed is not None:
        _, line = case.tolerance_for(target, failed.output)
        nonfinite = failed.nonfinite_tvm or failed.nonfinite_torch
        kind = NumericsKind.SHAPE_MISMATCH if failed.shape_mismatch else \
            NumericsKind.NON_FINITE if nonfinite else NumericsKind.MISMATCH
        message = f"numerics {failed.summary()} ({target})"
        other = _elsewhere(failed, elsewhere)
        if failed.sensitive:  # no stage to blame: eager float32 is as far off itself
            need = int(failed.eager_steps or 0) + 1
            message += (" — the quantized graph itself is that sensitive in float32, before "
                        f"any compiler (hint: a tolerance of its own, steps = {need}, or "
                        "reference = \"float32\"; not a compiler stage)")
        elif other is not None:  # as far off on another draw: the same, found elsewhere
            seed, steps = other
            message += (f" — eager float32 itself is {steps_text(steps)} off float64 on "
                        f"another input draw (seed {seed}): the quantized graph is that "
                        "sensitive in float32, before any compiler (a value on a quantize's "
                        "rounding boundary takes the neighbouring code and the layers after "
                        f"amplify it) (hint: steps = {int(max(steps, failed.steps)) + 1} "
                        "covers both, or reference = \"float32\"; not a compiler stage)")
        elif (chosen := _chosen_by(case, failed)) is not None:
            message += (f" — the output passes through {chosen}, which picks and orders "
                        "items by value: values that tie, or sit within rounding of each "
                        "other, can be picked or ordered differently, and that moves whole "
                        "items, not a rounding step (hint: `selection = { axis = ... }` on "
                        "this [[outputs]] judges the items it selected; a stage is to blame "
                        "only if the items themselves differ)")
            if bisection is not None:
                message += f"; {bisection.summary()}"
        elif bisection is not None:
            message += f"; {bisection.summary()}"
        if bisection is not None:
            body = bisection.render() + "\n\n" + body
            figures = replace(figures, first_break=bisection.first_break)
        return CheckResult(NAME, Status.FAILED, message, kind=kind, line=line, body=body,
                           figures=figures)
    _, line = case.tolerance_for(target, 0)
    over = f" over {len(samples)} samples ({'; '.join(samples)})" if len(samples) > 1 else ""
    if by_steps:
        s = max(by_steps, key=lambda x: x.steps)
        t = s.tolerance
        head = (f"{steps_text(s.steps)} off {'float64' if t.float64 else 'eager ' + s.eager} "
                f"(allowed {steps_text(t.steps or 0)}; {s.where}: {s.step.describe()})"
                if s.step is not None else "")
    elif f64:
        s = max(f64, key=lambda x: x.ratio)
        head = (f"RMSE {s.rmse:.3g} against float64, {s.ratio:.3g}x eager {s.eager}'s "
                f"(allowed {s.tolerance.multiplier:g}x + {s.tolerance.floor:g})")
    else:
        head = f"max abs {worst.max_abs:.3g}, max rel {figures.max_rel:.3g}"
    stepped = [s for s in stats if s.step is not None]
    if stepped and not by_steps:  # quantized outputs judged by another rule: said in steps too
        head += f"; max {steps_text(max(s.steps for s in stepped))} of its quantization"
    return CheckResult(NAME, Status.PASSED, head + over, line=line, body=body, figures=figures)


def _elsewhere(failed: ErrorStats, elsewhere: Sequence[tuple[int, float]]
               ) -> tuple[int, float] | None:
    """(seed, steps) where eager float32 is off float64 by more than a steps failure
    allows on another input draw; None when it is not (or nothing was measured)."""
    t, step = failed.tolerance, failed.step
    if not t.by_steps or t.steps is None or step is None or step.scale <= 0 or \
            failed.output >= len(elsewhere):
        return None
    seed, err = elsewhere[failed.output]
    steps = err / step.scale
    return (seed, steps) if steps > t.steps + STEP_SLACK else None


def wants_bisection(case: CaseSpec, m: Measurement) -> bool:
    """A cached measurement whose numerics fail under the case file as it is now, with no
    bisection made under the same tolerances: it is measured again, to say where."""
    failing = any(worst_failure(sample_stats(case, m.target, s, m.output_steps,
                                             match=False)) is not None
                  for s in m.samples if len(s.actual) == len(s.expected))
    if not failing:
        return False
    if m.bisection is None:
        return True
    return any(s.tolerance != case.tolerance_for(m.target, s.output)[0]
               for run in m.bisection.stages for s in run.stats)


@register
class Numerics(Check):
    name = NAME
    order = 70
    summary = ('TVM matches PyTorch eager on the same seeded weights and inputs within `atol + '
               'rtol·|ref|`, or with `reference = "float64"` is no more than 3× as far from a '
               'float64 run as eager float32 is, or (a quantized model, `steps`) is off by at '
               'most that many quantization steps of the output; NaN/Inf always fail; a failure '
               'names the first pipeline stage that broke it')
    declared_by = ("tolerance",)
    kinds = (NumericsKind,)
    title = "numerics: max abs err (or TVM × eager vs float64, or quantization steps)"
    tracked = (Figure("numerics_ratio", "numerics (x eager float32's error)",
                      f"{NAME}.float64_ratio", "x", noise_rel=0.1),
               Figure("max_abs", "max abs error", f"{NAME}.max_abs", "error", noise_rel=0.5))

    def seconds(self, m: Measurement) -> float:
        return m.numerics_seconds

    def cell(self, result: CheckResult, compact: bool = True) -> str | None:
        f = result.figures
        return f.figure() if isinstance(f, NumericsFigures) else None

    def judge(self, j: Judging) -> CheckResult:
        case, m = j.case, j.m
        if m.model_outputs is not None and len(case.outputs) > m.model_outputs:
            # Known only once forward() has run (in the case's process), so judged here, not exit 2;
            # the static checks stand.
            return CheckResult(NAME, Status.ERROR,
                               f"case declares {len(case.outputs)} [[outputs]] but the model "
                               f"returns {m.model_outputs}", kind=NumericsKind.CASE_FILE_ERROR,
                               line=case.line_of("outputs", str(m.model_outputs)))
        if m.numerics_skip is not None:
            return CheckResult(NAME, Status.SKIPPED, m.numerics_skip.reason,
                               kind=m.numerics_skip.kind)
        if m.numerics_error is not None:
            return CheckResult(NAME, Status.ERROR, m.numerics_error.message,
                               kind=m.numerics_error.kind, body=m.numerics_error.detail,
                               line=m.numerics_error.line)
        unstepped = _unstepped(case, m)
        if unstepped is not None:
            return unstepped
        stats = []
        for s in m.samples:  # every sample, every output: the verdict is the worst
            if len(s.actual) != len(s.expected):
                at = f" at {s.label}" if s.label else ""
                return CheckResult(NAME, Status.FAILED, f"TVM returned {len(s.actual)} "
                                   f"outputs, PyTorch {len(s.expected)}{at} ({m.target})",
                                   kind=NumericsKind.OUTPUT_COUNT)
            if s.reference64 is None and any(case.tolerance_for(m.target, i)[0].float64
                                             for i in range(len(s.expected))):
                return CheckResult(NAME, Status.ERROR, "this measurement has no float64 "
                                   "reference run, which the tolerance now asks for",
                                   kind=NumericsKind.FLOAT64_MISSING,
                                   line=case.tolerance_for(m.target, None)[1])
            stats.extend(sample_stats(case, m.target, s, m.output_steps, match=False))
        result = check_numerics(case, m.target, stats, m.bisection, m.eager_elsewhere)
        if result.status is Status.PASSED:
            result = _sensitivity(case, m, result)
        if m.ran_on:  # a reviewer must see that the figures come from the device, not the runner
            result = replace(result, message=f"{result.message} (on {m.ran_on})",
                             body=f"ran on {m.ran_on}\n{result.body}")
        return result


def _unstepped(case: CaseSpec, m: Measurement) -> CheckResult | None:
    """An error when the tolerance counts quantization steps on an output that has none."""
    for i in range(m.model_outputs or 0):
        tol, line = case.tolerance_for(m.target, i)
        if tol.by_steps and (i >= len(m.output_steps) or m.output_steps[i] is None):
            return CheckResult(NAME, Status.ERROR, f"{case.output_label(i)} has no "
                               "quantization step to count its error in: no quantize "
                               f"precedes it ({m.target}; hint: judge it with rtol/atol or "
                               "reference = \"float64\" without steps)",
                               kind=NumericsKind.NO_STEP, line=line)
    return None


def _rms(a: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(a.astype(np.float64))))) if a.size else 0.0


def insensitive_outputs(case: CaseSpec, m: Measurement) -> tuple[list[str], bool]:
    """Which outputs the comparison could not fail on: PyTorch's outputs on another input
    (`Measurement.decoy`) judged as if a program had returned them for the first sample, by
    the case's own rule for each output. One line per output that passes although nothing of
    the input reached it; and whether every output is such (constants included)."""
    if not m.decoy or not m.samples:
        return [], False
    first = m.samples[0]
    lines, blind = [], 0
    for i, (other, exp) in enumerate(zip(m.decoy, first.expected, strict=False)):
        if other.shape != exp.shape:
            continue
        if np.array_equal(other, exp):  # a constant output (anchors, a fixed grid): said
            blind += 1                   # only when every output is one
            continue
        ref64 = first.reference64[i] if first.reference64 is not None else None
        stats = compare(other, exp, case.tolerance_for(m.target, i)[0], i, "another input",
                        ref64, m.output_steps[i] if i < len(m.output_steps) else None)
        if stats:  # within tolerance: the output's dependence on the input is below it
            blind += 1
            lines.append(f"{case.output_label(i)} changes by RMS {_rms(other - exp):.2g} "
                         f"under another input (its RMS {_rms(exp):.2g}), within the tolerance")
    every = blind == len(first.expected) > 0
    if every and not lines:
        lines = ["every output is the same under another input"]
    return lines, every or bool(lines)


#: ops that pick or order items by value: a tie or near-tie moves whole items
SELECTING_OPS = frozenset({"topk", "sort", "argsort", "msort", "kthvalue", "argmax", "argmin"})


def _chosen_by(case: CaseSpec, failed: ErrorStats) -> str | None:
    """The selecting op a failing quantized output's value passes through after its last
    quantize (the step's path), where the output has no `selection` of its own."""
    declared = case.declared_output(failed.output)
    if failed.step is None or (declared is not None and declared.selection is not None):
        return None
    return next((op for op in failed.step.after if op in SELECTING_OPS), None)


def _sensitivity_hint(case: CaseSpec, m: Measurement) -> str:
    """What makes this model's outputs depend on its input: BatchNorm statistics
    recomputed where it has BatchNorms and they are not yet, else its projections drawn
    again with the variance that keeps the signal (LayerNorm and norm-free models)."""
    accept = 'input_sensitivity = "warn" accepts the case as it is'
    if m.batchnorms and case.weights == "as-built":
        return ('weights = "calibrated" recomputes its BatchNorm statistics so the signal '
                f"reaches the output; {accept}")
    if case.weights != "signal-preserving":
        what = "it has no BatchNorm to calibrate" if not m.batchnorms else \
            "its BatchNorms are calibrated"
        return (f'{what}: weights = "signal-preserving" draws its projections again with '
                f"the variance that keeps the signal; {accept}")
    return ("its weights keep the signal already: a tolerance tighter than the output's "
            f"change under another input can fail; or {accept}")


def _sensitivity(case: CaseSpec, m: Measurement, passed: CheckResult) -> CheckResult:
    """A passing verdict that could not have failed becomes a failure (or, with
    ``input_sensitivity = "warn"``, says so): comparing outputs that ignore the input would
    pass a wrong kernel."""
    lines, blind = insensitive_outputs(case, m)
    if not blind:
        return passed
    what = (f"numerics cannot fail: {lines[0]}"
            + (f" (+{len(lines) - 1} more)" if len(lines) > 1 else "")
            + " — a program that ignored its input would pass")
    hint = _sensitivity_hint(case, m)
    body = "\n".join(lines) + f"\nhint: {hint}\n\n{passed.body}"
    if case.input_sensitivity == "warn":
        return replace(passed, message=f"{passed.message} (warning: {what})", body=body)
    return CheckResult(NAME, Status.FAILED, f"{what} ({m.target}; hint: {hint})",
                       kind=NumericsKind.INSENSITIVE,
                       line=case.line_of("input_sensitivity") or case.line_of("model"),
                       body=body, figures=passed.figures)


__all__ = ["ErrorStats", "check_numerics", "compare", "compare_all", "insensitive_outputs",
           "match_decoy", "match_selections", "sample_stats", "severity", "wants_bisection",
           "worst_failure"]
