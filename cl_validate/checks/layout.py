"""The ``layout`` check: every layout-sensitive op runs in the layout the case declares."""

from __future__ import annotations

from collections.abc import Sequence

from cl_validate.analysis.model import OpLayout
from cl_validate.checks.verdict import CheckResult, Measured, Status
from cl_validate.spec import CaseSpec

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
    measured = Measured(layout_sensitive_ops=checked)
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
