"""The ratchet every budget of an exact figure shares (transforms, their bytes, kernels, GPU
fallback kernels): over budget fails (``BudgetExceeded``); under budget is a stale budget
(``BudgetStale``), which fails, or passes with a warning under ``stale_budget = "warn"``;
exactly on budget passes. A budget that was improved must come down in the same pull request
(`cl-validate budget tighten`), so budgets only ever go down.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import replace
from typing import ClassVar, TypeVar

from cl_validate.checks.registry import Check, FailureKind, Judging
from cl_validate.checks.verdict import CheckResult, Figures, Status
from cl_validate.measurements.kernel_list import KernelList
from cl_validate.paths import repo_path
from cl_validate.spec import CaseSpec
from cl_validate.spec.budget_keys import BudgetKey
from cl_validate.spec.config import StalePolicy


class RatchetKind(FailureKind):
    """How a budget check of an exact figure fails."""

    EXCEEDED = "BudgetExceeded", "the measured figure is above its budget"
    STALE = ("BudgetStale", "the measured figure is below its budget: lower it with "
             "`cl-validate budget tighten` (passes with a warning under stale_budget = "
             "\"warn\")")


F = TypeVar("F", bound=Figures)


def budget_source(case: CaseSpec, target: str, key: str) -> str:
    """Where the budget `key` that applies on `target` is declared, for reports:
    ``targets_override.cuda, line 22``, ``variants.b8, line 30``, ``budget, line 14``, or the
    default."""
    found = case.budget_source(target, key)
    if found is None:
        return "default: no [budget] entry"
    table, line = found
    return f"{table}, line {line}"


def case_command(case: CaseSpec, command: str, *options: str) -> str:
    """The ``cl-validate`` command line that acts on `case`'s file, runnable from the
    repository root wherever the file lies (a name would only be found under model_cases/):
    ``cl-validate show model_cases/x.toml --target llvm``."""
    return " ".join(["cl-validate", command, shlex.quote(repo_path(case.path)), *options])


def show_command(case: CaseSpec, target: str) -> str:
    """``cl-validate show FILE --target T`` (with ``--variant`` for a variant's run)."""
    variant = ("--variant", case.variant.name) if case.variant is not None else ()
    return case_command(case, "show", "--target", target, *variant)


def budget_verdict(j: Judging, key: str, measured_n: int, budget: int, line: int | None,
                   body: str, figures: F, next_step: str = "",
                   show: Callable[[int], str] = str) -> CheckResult:
    """Over budget fails; under budget is a stale budget (the ratchet): fails, or passes with
    a warning when the project sets ``stale_budget = "warn"``; exactly on budget passes.
    `show` writes a figure for the messages (exact: a stale budget may differ by one)."""
    case, target = j.case, j.target
    source = budget_source(case, target, key)
    figures = replace(figures, budget=budget, budget_source=source)  # type: ignore[call-arg]
    body = f"budget {show(budget)} ({source})" + (f"\n{body}" if body else "")
    got, limit = show(measured_n), show(budget)
    tighten = case_command(case, "budget tighten")
    if measured_n > budget:
        nxt = f" — next: {next_step}" if next_step else ""
        raise_it = f" (if intended: {tighten} --allow-increase --reason TEXT)"
        return CheckResult(key, Status.FAILED,
                           f"{key} {got} > budget {limit} ({target}){nxt}{raise_it}",
                           kind=RatchetKind.EXCEEDED, line=line, body=body, figures=figures)
    if measured_n < budget:
        figures = replace(figures, stale=True)  # type: ignore[call-arg]
        msg = f"budget stale: {key} {got} < {limit} ({target}) — run {tighten}"
        if j.stale is StalePolicy.WARN:
            return CheckResult(key, Status.PASSED, msg + " (stale_budget = \"warn\")",
                               line=line, body=body, figures=figures)
        return CheckResult(key, Status.FAILED, msg, kind=RatchetKind.STALE, line=line,
                           body=body, figures=figures)
    return CheckResult(key, Status.PASSED, f"{key} {got} <= budget {limit}", line=line,
                       body=body, figures=figures)


def count_cell(value: int | None, budget: float | None, compact: bool) -> str | None:
    """``57/58`` (console) or ``57 / 58`` (Markdown), ``57 (no budget)`` without one."""
    if value is None:
        return None
    limit = None if budget is None else f"{budget:g}" if isinstance(budget, float) else \
        str(budget)
    if compact:
        return f"{value}" + (f"/{limit}" if limit is not None else "")
    return f"{value} / {limit}" if limit is not None else f"{value} (no budget)"


class BudgetCheck(Check):
    """A check of an exact figure of the compiled program against its ``[budget]`` entry,
    with the ratchet. `figure` is what ``budget tighten`` writes."""

    budget: ClassVar[BudgetKey]
    kinds: ClassVar[tuple[type[FailureKind], ...]] = (RatchetKind,)

    def figure(self, kernels: KernelList) -> int | None:
        """The exact figure this check judges, read off the compiled program's kernel list
        (None: it does not apply there); what ``budget tighten`` writes."""
        raise NotImplementedError
