"""The budget checks — ``layout_transforms`` and ``kernels`` — and the ratchet they share.

Over budget fails (`BudgetExceeded`); under budget is a stale budget (`BudgetStale`): it
fails, or passes with a warning under ``stale_budget = "warn"``; exactly on budget passes. A
weight transform that survived to run time always fails ``layout_transforms``. Each check is a
function of the analysis results and the case spec; it never compiles anything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

from cl_validate.analysis.model import KernelList, StageCount
from cl_validate.checks.verdict import CheckResult, Measured, Status
from cl_validate.compile.reasons import Reason
from cl_validate.spec import CaseSpec
from cl_validate.spec.config import StalePolicy


def _body(kernels: KernelList, counts: Sequence[StageCount]) -> str:
    stages = "  ".join(f"{c.stage}={c.runtime}" + (f"+{c.weight}w" if c.weight else "")
                       for c in counts)
    return (f"transforms after each stage (runtime[+weight]): {stages}\n"
            f"kernel list ({len(kernels)} kernels, >> = contains a layout transform):\n"
            f"{kernels.render()}")


def budget_source(case: CaseSpec, target: str, key: str) -> str:
    """Where the budget `key` that applies on `target` is declared, for reports:
    ``targets_override.cuda, line 22``, ``variants.b8, line 30``, ``budget, line 14``, or the
    default."""
    found = case.budget_source(target, key)
    if found is None:
        return "default: no [budget] entry"
    table, line = found
    return f"{table}, line {line}"


def budget_verdict(case: CaseSpec, target: str, key: str, measured_n: int, budget: int,
                   line: int | None, stale: StalePolicy, body: str, measured: Measured,
                   next_step: str = "", show: Callable[[int], str] = str) -> CheckResult:
    """Over budget fails; under budget is a stale budget (the ratchet): fails, or passes with
    a warning when the project sets ``stale_budget = "warn"``; exactly on budget passes.
    `show` writes a figure for the messages (exact: a stale budget may differ by one)."""
    source = budget_source(case, target, key)
    measured = replace(measured, budget=budget, budget_source=source)
    body = f"budget {show(budget)} ({source})" + (f"\n{body}" if body else "")
    got, limit = show(measured_n), show(budget)
    if measured_n > budget:
        nxt = f" — next: {next_step}" if next_step else ""
        return CheckResult(key, Status.FAILED,
                           f"{key} {got} > budget {limit} ({target}){nxt}",
                           kind="BudgetExceeded", line=line, body=body, measured=measured)
    if measured_n < budget:
        measured = replace(measured, stale=True)
        msg = (f"budget stale: {key} {got} < {limit} ({target}) — run cl-validate "
               "budget tighten")
        if stale is StalePolicy.WARN:
            return CheckResult(key, Status.PASSED, msg + " (stale_budget = \"warn\")",
                               line=line, body=body, measured=measured)
        return CheckResult(key, Status.FAILED, msg, kind="BudgetStale", line=line, body=body,
                           measured=measured)
    return CheckResult(key, Status.PASSED, f"{key} {got} <= budget {limit}", line=line,
                       body=body, measured=measured)


def check_layout_transforms(case: CaseSpec, target: str, kernels: KernelList,
                            counts: Sequence[StageCount], *,
                            stale: StalePolicy = StalePolicy.FAIL) -> CheckResult:
    budget = case.budget_for(target)
    runtime = len(kernels.runtime_transforms)
    weights = kernels.weight_transforms
    measured = Measured(layout_transforms=runtime, weight_transforms=len(weights),
                        budget=budget.layout_transforms)
    body = _body(kernels, counts)
    if weights:
        w = weights[0]
        return CheckResult(
            "layout_transforms", Status.FAILED,
            f"{len(weights)} weight transform(s) survived to run time ({target}): "
            f"{w.describe()} in kernel {kernels.kernels[w.kernel].name} — it should have folded",
            kind="WeightTransform", line=budget.layout_transforms_line, body=body,
            measured=measured)
    return budget_verdict(case, target, "layout_transforms", runtime, budget.layout_transforms,
                           budget.layout_transforms_line, stale, body, measured,
                           _transform_next_step(case, target, kernels))


def _transform_next_step(case: CaseSpec, target: str, kernels: KernelList) -> str:
    """The most useful thing to do about the runtime transforms: an op that needs a layout
    rule beats the model's own permutes, which beat the graph boundaries."""
    atts = [t.attribution for t in kernels.runtime_transforms if t.attribution is not None]
    rules = Counter(a.relax_op for a in atts if a.reason is Reason.NO_LAYOUT_RULE and a.relax_op)
    if rules:
        op, n = rules.most_common(1)[0]
        where = next((a.source for a in atts if a.relax_op == op and a.source), None)
        return f"give {op} a layout rule ({n} transform(s){f', e.g. {where}' if where else ''})"
    own = [a for a in atts if a.reason is Reason.OWN_PERMUTE]
    if own:
        return f"the model permutes itself ({len(own)}x, e.g. {own[0].source or 'a permute'})"
    if any(a.reason is Reason.INPUT_BOUNDARY for a in atts):
        return 'declare the input layout = "NHWC" if callers can pass channels-last data'
    if any(a.reason is Reason.OUTPUT_BOUNDARY for a in atts):
        return 'declare [[outputs]] layout = "NHWC" if callers accept channels-last data'
    return f"`cl-validate show {case.name} --target {target}` names each transform's source"


def check_kernels(case: CaseSpec, target: str, kernels: KernelList, *,
                  stale: StalePolicy = StalePolicy.FAIL) -> CheckResult:
    budget = case.budget_for(target)
    n = len(kernels)
    measured = Measured(kernels=n)
    if budget.kernels is None:
        return CheckResult("kernels", Status.SKIPPED, f"no kernel budget declared ({n} kernels)",
                           measured=measured)
    body = kernels.render() if n > budget.kernels else ""
    return budget_verdict(case, target, "kernels", n, budget.kernels, budget.kernels_line,
                           stale, body, measured,
                           f"`cl-validate show {case.name} --target {target}` lists the kernels; "
                           "a new or split one is a fusion that broke")
