"""The four checks — layout, layout_transforms, kernels, numerics — each its own verdict.

Each check is a small function of the analysis results and the case spec; it never compiles
anything itself, so each can be tested on its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from cl_validate.analysis import KernelList, OpLayout, StageCount
from cl_validate.numerics import ErrorStats
from cl_validate.spec import CaseSpec
from cl_validate.verdict import CheckResult, Status

_LAYOUT_KEYS = ("data_layout", "kernel_layout")


def expected_layouts(case: CaseSpec, op: OpLayout) -> dict[str, str]:
    """What the case declares for `op`: its own [layout] entry, else the declared data layout
    of the same rank (pooling, resize, … follow the convolutions' layout)."""
    declared = case.layout.get(op.op)
    if op.module is not None and op.module in case.layout_overrides:
        declared = case.layout_overrides[op.module]
    if declared:
        exp = {"data_layout": declared[0]}
        if len(declared) > 1 and "kernel_layout" in op.layouts:
            exp["kernel_layout"] = declared[1]
        return exp
    data = op.layouts.get("data_layout") or op.layouts.get("layout")
    if data is None:
        return {}
    for lay in case.layout.values():
        if len(lay[0]) == len(data) and lay[0].isalpha():
            key = "data_layout" if "data_layout" in op.layouts else "layout"
            return {key: lay[0]}
    return {}


def check_layout(case: CaseSpec, target: str, ops: Sequence[OpLayout]) -> CheckResult:
    line = case.line_of("layout")
    if not case.layout:
        return CheckResult("layout", Status.SKIPPED, "no [layout] declared for this case",
                           line=line)
    wrong: list[str] = []
    checked = 0
    for op in ops:
        exp = expected_layouts(case, op)
        if not exp:
            continue
        checked += 1
        diffs = [f"{key} {op.layouts.get(key)}, expected {want}"
                 for key, want in exp.items() if op.layouts.get(key) != want]
        if diffs:
            wrong.append(f"{op.op} ({op.var}) " + ", ".join(diffs))
    measured = {"layout_sensitive_ops": str(checked)}
    if not checked:
        return CheckResult("layout", Status.FAILED,
                           f"no op of the declared layouts found in the final IR ({target})",
                           kind="LayoutMissing", line=line, measured=measured,
                           body="declared: " + ", ".join(case.layout))
    if wrong:
        first_line = case.line_of("layout", wrong[0].split(" ", 1)[0]) or line
        return CheckResult(
            "layout", Status.FAILED,
            f"{len(wrong)} of {checked} layout-sensitive ops not in the declared layout "
            f"({target}): {wrong[0]}",
            kind="LayoutMismatch", line=first_line, body="\n".join(wrong), measured=measured)
    return CheckResult("layout", Status.PASSED,
                       f"{checked} layout-sensitive ops in the declared layout", line=line,
                       measured=measured)


def _body(kernels: KernelList, counts: Sequence[StageCount]) -> str:
    stages = "  ".join(f"{c.stage}={c.runtime}" + (f"+{c.weight}w" if c.weight else "")
                       for c in counts)
    return (f"transforms after each stage (runtime[+weight]): {stages}\n"
            f"kernel list ({len(kernels)} kernels, >> = contains a layout transform):\n"
            f"{kernels.render()}")


def budget_source(case: CaseSpec, target: str, key: str) -> str:
    """Where the budget `key` that applies on `target` is declared, for reports:
    ``targets_override.cuda, line 22``, ``budget, line 14``, or the default."""
    over = case.overrides.get(target, {}).get("budget") or {}
    if key in over:
        line = case.line_of("targets_override", target, "budget", key)
        return f"targets_override.{target}, line {line}"
    if ("budget", key) in case.lines:
        return f"budget, line {case.lines[('budget', key)]}"
    return "default: no [budget] entry"


def _budget_verdict(case: CaseSpec, target: str, key: str, measured_n: int, budget: int,
                    line: int | None, stale: str, body: str, measured: dict[str, str],
                    next_step: str = "") -> CheckResult:
    """Over budget fails; under budget is a stale budget (the ratchet): fails, or passes with
    a warning when the project sets ``stale_budget = "warn"``; exactly on budget passes."""
    source = budget_source(case, target, key)
    measured["budget_source"] = source
    body = f"budget {budget} ({source})" + (f"\n{body}" if body else "")
    if measured_n > budget:
        nxt = f" — next: {next_step}" if next_step else ""
        return CheckResult(key, Status.FAILED,
                           f"{key} {measured_n} > budget {budget} ({target}){nxt}",
                           kind="BudgetExceeded", line=line, body=body, measured=measured)
    if measured_n < budget:
        measured["stale"] = "true"
        msg = (f"budget stale: {key} {measured_n} < {budget} ({target}) — run cl-validate "
               "budget tighten")
        if stale == "warn":
            return CheckResult(key, Status.PASSED, msg + " (stale_budget = \"warn\")",
                               line=line, body=body, measured=measured)
        return CheckResult(key, Status.FAILED, msg, kind="BudgetStale", line=line, body=body,
                           measured=measured)
    return CheckResult(key, Status.PASSED, f"{key} {measured_n} <= budget {budget}", line=line,
                       body=body, measured=measured)


def check_layout_transforms(case: CaseSpec, target: str, kernels: KernelList,
                            counts: Sequence[StageCount], *, stale: str = "fail"
                            ) -> CheckResult:
    budget = case.budget_for(target)
    runtime = len(kernels.runtime_transforms)
    weights = kernels.weight_transforms
    measured = {"layout_transforms": str(runtime), "weight_transforms": str(len(weights)),
                "budget": str(budget.layout_transforms)}
    body = _body(kernels, counts)
    if weights:
        w = weights[0]
        return CheckResult(
            "layout_transforms", Status.FAILED,
            f"{len(weights)} weight transform(s) survived to run time ({target}): "
            f"{w.describe()} in kernel {kernels.kernels[w.kernel].name} — it should have folded",
            kind="WeightTransform", line=budget.layout_transforms_line, body=body,
            measured=measured)
    return _budget_verdict(case, target, "layout_transforms", runtime, budget.layout_transforms,
                           budget.layout_transforms_line, stale, body, measured,
                           _transform_next_step(case, target, kernels))


def _transform_next_step(case: CaseSpec, target: str, kernels: KernelList) -> str:
    """The most useful thing to do about the runtime transforms: an op that needs a layout
    rule beats the model's own permutes, which beat the graph boundaries."""
    from collections import Counter

    from cl_validate.attribution import (
        INPUT_BOUNDARY,
        NO_LAYOUT_RULE,
        OUTPUT_BOUNDARY,
        OWN_PERMUTE,
    )

    atts = [t.attribution for t in kernels.runtime_transforms if t.attribution is not None]
    rules = Counter(a.relax_op for a in atts if a.reason == NO_LAYOUT_RULE and a.relax_op)
    if rules:
        op, n = rules.most_common(1)[0]
        where = next((a.source for a in atts if a.relax_op == op and a.source), None)
        return f"give {op} a layout rule ({n} transform(s){f', e.g. {where}' if where else ''})"
    own = [a for a in atts if a.reason == OWN_PERMUTE]
    if own:
        return f"the model permutes itself ({len(own)}x, e.g. {own[0].source or 'a permute'})"
    if any(a.reason == INPUT_BOUNDARY for a in atts):
        return 'declare the input layout = "NHWC" if callers can pass channels-last data'
    if any(a.reason == OUTPUT_BOUNDARY for a in atts):
        return 'declare [[outputs]] layout = "NHWC" if callers accept channels-last data'
    return f"`cl-validate show {case.name} --target {target}` names each transform's source"


def check_kernels(case: CaseSpec, target: str, kernels: KernelList, *, stale: str = "fail"
                  ) -> CheckResult:
    budget = case.budget_for(target)
    n = len(kernels)
    measured = {"kernels": str(n)}
    if budget.kernels is None:
        return CheckResult("kernels", Status.SKIPPED, f"no kernel budget declared ({n} kernels)",
                           measured=measured)
    measured["budget"] = str(budget.kernels)
    body = kernels.render() if n > budget.kernels else ""
    return _budget_verdict(case, target, "kernels", n, budget.kernels, budget.kernels_line,
                           stale, body, measured,
                           f"`cl-validate show {case.name} --target {target}` lists the kernels; "
                           "a new or split one is a fusion that broke")


def check_numerics(case: CaseSpec, target: str, stats: Sequence[ErrorStats]) -> CheckResult:
    if not stats:
        return CheckResult("numerics", Status.ERROR, f"the model has no outputs ({target})",
                           kind="NoOutputs")
    bad = [s for s in stats if not s]
    worst = max(stats, key=lambda s: s.max_abs)
    measured = {"max_abs": f"{worst.max_abs:.6g}",
                "max_rel": f"{max(s.max_rel for s in stats):.6g}"}
    body = "\n".join(s.detail() for s in stats)
    if bad:
        s = bad[0]
        _, line = case.tolerance_for(target, s.output)
        nonfinite = s.nonfinite_tvm or s.nonfinite_torch
        kind = "ShapeMismatch" if s.shape_mismatch else "NonFinite" if nonfinite else \
            "NumericsMismatch"
        return CheckResult("numerics", Status.FAILED, f"numerics {s.summary()} ({target})",
                           kind=kind, line=line, body=body, measured=measured)
    _, line = case.tolerance_for(target, 0)
    return CheckResult("numerics", Status.PASSED,
                       f"max abs {worst.max_abs:.3g}, max rel {float(measured['max_rel']):.3g}",
                       line=line, body=body, measured=measured)
