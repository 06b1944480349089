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
    if runtime > budget.layout_transforms:
        return CheckResult(
            "layout_transforms", Status.FAILED,
            f"layout_transforms {runtime} > budget {budget.layout_transforms} ({target})",
            kind="BudgetExceeded", line=budget.layout_transforms_line, body=body,
            measured=measured)
    return CheckResult(
        "layout_transforms", Status.PASSED,
        f"layout_transforms {runtime} <= budget {budget.layout_transforms}",
        line=budget.layout_transforms_line, body=body, measured=measured)


def check_kernels(case: CaseSpec, target: str, kernels: KernelList, *, stale: str = "fail"
                  ) -> CheckResult:
    budget = case.budget_for(target)
    n = len(kernels)
    measured = {"kernels": str(n)}
    if budget.kernels is None:
        return CheckResult("kernels", Status.SKIPPED, f"no kernel budget declared ({n} kernels)",
                           measured=measured)
    measured["budget"] = str(budget.kernels)
    if n > budget.kernels:
        return CheckResult("kernels", Status.FAILED, f"kernels {n} > budget {budget.kernels} "
                           f"({target})", kind="BudgetExceeded", line=budget.kernels_line,
                           body=kernels.render(), measured=measured)
    return CheckResult("kernels", Status.PASSED, f"kernels {n} <= budget {budget.kernels}",
                       line=budget.kernels_line, measured=measured)


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
