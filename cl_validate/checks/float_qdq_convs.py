"""The ``float_qdq_convs`` check: the convolutions of a quantized program that run in float.

A PT2E model holds dequantize → conv2d → quantize; a backend with integer kernels runs that
as one int8 convolution (int8 in, int32 accumulation, int8 out). TVM 0.27 without QNN does
not: left alone it folds the weights' dequantize into float32 constants and runs every
convolution in float32. The nhwc pipeline's ``integer_compute`` stage
(`cl_validate.compile.passes.integer_compute`) rewrites them to integer convolutions, and names
each one it leaves in float with the reason (in this check's body). What a kernel list shows
per convolution is the dtype of its data: a float conv between QDQ ops, or an integer conv.
Counted on every target from the compiled program alone (cuda too, with no GPU), against an
optional budget with the ratchet: a quantized conv that falls back to float where it ran in
integers, or a new float conv, fails.
Skipped on a program with no quantize op (a float model).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cl_validate.checks.ratchet import BudgetCheck, budget_verdict, count_cell
from cl_validate.checks.registry import FailureKind, Judging, register
from cl_validate.checks.verdict import CheckResult, Figures, Status
from cl_validate.measurements.kernel_list import Kernel, KernelList
from cl_validate.measurements.kinds import SkipKind
from cl_validate.spec.budget_keys import BudgetKey

NAME = "float_qdq_convs"
#: a legalized convolution PrimFunc (``conv2d``, ``conv2d3``, ``conv2d_transpose1``)
_CONV = re.compile(r"^conv[123]d(_transpose)?\d*$")
_QDQ = re.compile(r"^(de)?quantize\d*$")


class QdqKind(FailureKind):
    NOT_MEASURED = ("DtypeUnknown", "the dtype of a convolution's data was not recorded (a "
                    "kernel list measured before it was)")


@dataclass(frozen=True)
class QdqFigures(Figures):
    budget: float | None = None
    budget_source: str | None = None
    stale: bool = False
    float_convs: int | None = None  # convolutions computing in float between QDQ ops
    integer_convs: int | None = None  # convolutions on integer data


def conv_dtypes(k: Kernel) -> list[str | None]:
    """The data dtype of each convolution in `k` (None: not recorded)."""
    dtypes = k.dtypes or (None,) * len(k.ops)
    return [d for op, d in zip(k.ops, dtypes, strict=False) if _CONV.match(op)]


def quantized(kernels: KernelList) -> bool:
    """Whether the program quantizes at all (a quantize or dequantize op in some kernel)."""
    return any(_QDQ.match(op) for k in kernels for op in k.ops)


def split_convs(kernels: KernelList) -> tuple[list[Kernel], list[Kernel], list[Kernel]]:
    """The kernels holding a float convolution, an integer one, one of unknown dtype."""
    floats: list[Kernel] = []
    ints: list[Kernel] = []
    unknown: list[Kernel] = []
    for k in kernels:
        for d in conv_dtypes(k):
            (unknown if d is None else floats if d.startswith(("float", "bfloat"))
             else ints).append(k)
    return floats, ints, unknown


def convs_text(kernels: KernelList) -> str:
    floats, ints, _ = split_convs(kernels)
    lines = [f"convolutions: {len(floats)} in float between QDQ ops (dequantize → float conv "
             f"→ quantize), {len(ints)} on integer data"]
    lines += [f"  {k.index:3d}  {k.name}  (float)" for k in floats]
    lines += [f"  {k.index:3d}  {k.name}  (integer)" for k in ints]
    return "\n".join(lines)


@register
class FloatQdqConvs(BudgetCheck):
    name = NAME
    order = 55
    summary = ("convolutions of a quantized program that run in float (dequantize → float conv "
               "→ quantize, not an int8 kernel) ≤ budget (when the case declares one; reported "
               "for every quantized program, on every target, from the compiled program alone)")
    declared_by = ("budget", NAME)
    budget = BudgetKey(NAME, "count", minimum=0, label="float_convs")
    kinds = (*BudgetCheck.kinds, QdqKind)
    title = "float convs between QDQ"

    def figure(self, kernels: KernelList) -> int | None:
        """Only for a quantized program with every conv's dtype known."""
        if not quantized(kernels):
            return None
        floats, _, unknown = split_convs(kernels)
        return None if unknown else len(floats)

    def judge(self, j: Judging) -> CheckResult:
        case, target, kernels = j.case, j.target, j.m.kernels
        assert kernels is not None
        if not quantized(kernels):
            return CheckResult(NAME, Status.SKIPPED, f"no quantize op in the program "
                               f"({target}): quantized models only",
                               kind=SkipKind.NOT_QUANTIZED)
        floats, ints, unknown = split_convs(kernels)
        budget = case.budget_for(target)
        limit = budget.get(NAME)
        figures = QdqFigures(float_convs=len(floats), integer_convs=len(ints))
        body = convs_text(kernels)
        if j.m.float_left:  # what the integer_compute stage left in float, and why
            body += "\nleft in float by the integer_compute stage:\n" + "\n".join(
                f"  {line}" for line in j.m.float_left)
        if unknown:
            return CheckResult(NAME, Status.ERROR, f"the data dtype of {len(unknown)} "
                               f"convolutions was not recorded ({target})",
                               kind=QdqKind.NOT_MEASURED, line=budget.line(NAME), body=body,
                               figures=figures)
        if limit is None:
            return CheckResult(NAME, Status.SKIPPED, f"no {NAME} budget declared "
                               f"({len(floats)} float, {len(ints)} integer convolutions)",
                               kind=SkipKind.NOT_DECLARED, body=body, figures=figures)
        why = f"; first: {j.m.float_left[0]}" if j.m.float_left else ""
        return budget_verdict(j, NAME, len(floats), int(limit), budget.line(NAME), body,
                              figures, "a quantized convolution left to float: see its kernel "
                              f"(`cl-validate show {case.name} --target {target}`){why}")

    def cell(self, result: CheckResult, compact: bool = True) -> str | None:
        """The float convolutions against the budget, and the integer ones beside them:
        ``0/0 +52i`` (console), ``0 / 0, 52 integer`` (Markdown)."""
        f = result.figures
        if not isinstance(f, QdqFigures):
            return None
        cell = count_cell(f.float_convs, f.budget, compact)
        if cell is None or f.integer_convs is None:
            return cell
        return f"{cell} +{f.integer_convs}i" if compact else \
            f"{cell}, {f.integer_convs} integer"
