"""The ``kernels`` check: how many fused kernels the compiled program runs, against an
optional budget (with the ratchet). A new kernel is usually a fusion that broke."""

from __future__ import annotations

from dataclasses import dataclass

from cl_validate.checks.ratchet import BudgetCheck, budget_verdict, count_cell, show_command
from cl_validate.checks.registry import Figure, Judging, register
from cl_validate.checks.verdict import CheckResult, Figures, Status
from cl_validate.measurements.kernel_list import KernelList
from cl_validate.measurements.kinds import SkipKind
from cl_validate.spec.budget_keys import BudgetKey

NAME = "kernels"


@dataclass(frozen=True)
class KernelFigures(Figures):
    kernels: int | None = None
    budget: float | None = None
    budget_source: str | None = None
    stale: bool = False


@register
class KernelCount(BudgetCheck):
    name = NAME
    order = 40
    summary = "fused kernels ≤ budget (when the case declares one)"
    declared_by = ("budget", NAME)
    budget = BudgetKey(NAME, "count", minimum=1)
    title = "kernels / budget"
    tracked = (Figure("kernels", "kernels", f"{NAME}.{NAME}", "kernels"),)

    def figure(self, kernels: KernelList) -> int | None:
        return len(kernels)

    def judge(self, j: Judging) -> CheckResult:
        case, target, kernels = j.case, j.target, j.m.kernels
        assert kernels is not None
        budget = case.budget_for(target)
        limit = budget.get(NAME)
        n = len(kernels)
        figures = KernelFigures(kernels=n)
        if limit is None:
            return CheckResult(NAME, Status.SKIPPED, f"no kernel budget declared ({n} kernels)",
                               kind=SkipKind.NOT_DECLARED, figures=figures)
        body = kernels.render() if n > limit else ""
        return budget_verdict(j, NAME, n, int(limit), budget.line(NAME), body, figures,
                              f"`{show_command(case, target)}` lists the "
                              "kernels; a new or split one is a fusion that broke")

    def cell(self, result: CheckResult, compact: bool = True) -> str | None:
        f = result.figures
        return count_cell(f.kernels, f.budget, compact) if isinstance(f, KernelFigures) else None
