"""The ``fallback_kernels`` check: GPU kernels that dlight left to its generic Fallback rule
(a plain thread mapping, slow on a real GPU). Decided at compile time, so a CPU runner
catches the regression; exact, with the ratchet, against an optional budget. Skipped on
targets dlight does not schedule (llvm)."""

from __future__ import annotations

from dataclasses import dataclass

from cl_validate.checks.ratchet import BudgetCheck, budget_verdict, show_command
from cl_validate.checks.registry import FailureKind, Figure, Judging, register
from cl_validate.checks.verdict import CheckResult, Figures, Status
from cl_validate.measurements.kernel_list import FALLBACK, UNRECORDED, KernelList
from cl_validate.measurements.kinds import SkipKind
from cl_validate.spec.budget_keys import BudgetKey

NAME = "fallback_kernels"


class FallbackKind(FailureKind):
    NOT_MEASURED = ("NotMeasured", "the dlight rule of some kernels was not recorded: the "
                    "pipeline schedules them itself")


@dataclass(frozen=True)
class FallbackFigures(Figures):
    budget: float | None = None
    budget_source: str | None = None
    stale: bool = False
    fallback_kernels: int | None = None  # GPU kernels left to dlight's Fallback rule


def schedule_text(kernels: KernelList) -> str:
    """``kernels per dlight rule: Matmul 21, Reduction 1, Fallback 2`` and the kernels left
    to the Fallback."""
    counts = kernels.schedule_counts()
    lines = ["kernels per dlight rule: " + ", ".join(f"{r} {n}" for r, n in counts.items())]
    left = [k for k in kernels if k.schedule == FALLBACK]
    if left:
        lines.append(f"left to {FALLBACK} ({len(left)}):")
        lines += [f"  {k.index:3d}  {k.name}" for k in left]
    return "\n".join(lines)


@register
class FallbackKernels(BudgetCheck):
    name = NAME
    order = 50
    summary = ('GPU kernels that dlight left to its generic Fallback schedule ≤ budget (cuda; when '
               'the case declares one; reported always)')
    declared_by = ("budget", NAME)
    budget = BudgetKey(NAME, "count", minimum=0, label="fallback")
    kinds = (*BudgetCheck.kinds, FallbackKind)
    title = "GPU fallback kernels"
    tracked = (Figure(NAME, "fallback kernels", f"{NAME}.{NAME}", "kernels"),)

    def figure(self, kernels: KernelList) -> int | None:
        """Only where dlight scheduled the target (a GPU): elsewhere the budget does not
        apply."""
        rules = kernels.schedule_counts()
        return rules.get(FALLBACK, 0) if rules else None

    def judge(self, j: Judging) -> CheckResult:
        case, target, kernels = j.case, j.target, j.m.kernels
        assert kernels is not None
        counts = kernels.schedule_counts()
        if not counts:
            return CheckResult(NAME, Status.SKIPPED, f"dlight schedules no kernel on "
                               f"{target}: GPU targets only", kind=SkipKind.NOT_SCHEDULED)
        budget = case.budget_for(target)
        limit = budget.get(NAME)
        n = counts.get(FALLBACK, 0)
        figures = FallbackFigures(fallback_kernels=n)
        body = schedule_text(kernels)
        if limit is None:
            return CheckResult(NAME, Status.SKIPPED, f"no {NAME} budget declared ({n} of "
                               f"{len(kernels)} kernels left to dlight's {FALLBACK})",
                               kind=SkipKind.NOT_DECLARED, body=body, figures=figures)
        if UNRECORDED in counts:
            return CheckResult(NAME, Status.ERROR, f"the dlight rule of {counts[UNRECORDED]} "
                               f"kernels was not recorded ({target}): the pipeline schedules "
                               "them itself", kind=FallbackKind.NOT_MEASURED,
                               line=budget.line(NAME), body=body, figures=figures)
        return budget_verdict(j, NAME, n, int(limit), budget.line(NAME), body, figures,
                              "a kernel no specific dlight rule matched: see which op it fuses "
                              f"(`{show_command(case, target)}`)")

    def cell(self, result: CheckResult, compact: bool = True) -> str | None:
        f = result.figures
        if not isinstance(f, FallbackFigures) or f.fallback_kernels is None:
            return None
        sep = "/" if compact else " / "
        return f"{f.fallback_kernels}" + (f"{sep}{f.budget:g}" if f.budget is not None
                                          else "")
