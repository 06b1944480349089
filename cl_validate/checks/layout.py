"""The ``layout`` check: every layout-sensitive op runs in the layout the case declares."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cl_validate.checks.registry import Check, FailureKind, Judging, register
from cl_validate.checks.verdict import CheckResult, Figures, Status
from cl_validate.measurements.kernel_list import OpLayout
from cl_validate.measurements.kinds import SkipKind
from cl_validate.spec import CaseSpec
from cl_validate.spec.layouts import SINGLE_LAYOUT_OPS, implied_layouts, moves_only_unit_axes

NAME = "layout"
_LAYOUT_KEYS = ("data_layout", "kernel_layout")


class LayoutKind(FailureKind):
    MISMATCH = "LayoutMismatch", "a layout-sensitive op runs in another layout than declared"
    MISSING = "LayoutMissing", "no op of the declared layouts is in the final IR"


@dataclass(frozen=True)
class LayoutFigures(Figures):
    layout_sensitive_ops: int | None = None


def expected_layouts(case: CaseSpec, op: OpLayout) -> dict[str, str]:
    """What the case declares for `op`: its own [layout] entry (or, for a 1-D convolution,
    the one conv2d's implies), else, for an op TVM lowers in one layout only, that one, else
    the declared data layout of the same rank (pooling, resize, … follow the convolutions'
    layout)."""
    declared = case.layout.get(op.op) or implied_layouts(case.layout).get(op.op)
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
    if op.op in SINGLE_LAYOUT_OPS:  # the one layout TVM lowers it in
        return {"data_layout" if "data_layout" in op.layouts else "layout":
                SINGLE_LAYOUT_OPS[op.op]}
    for lay in case.layout.values():
        if len(lay[0]) == len(data) and lay[0].isalpha():
            key = "data_layout" if "data_layout" in op.layouts else "layout"
            return {key: lay[0]}
    return {}


def same_in_memory(actual: str, want: str, shape: Sequence[int] | None) -> bool:
    """Whether data of `shape` stored in `actual` lies in memory as in `want`: the two orders
    differ only in axes of size one (a one-channel map is NCHW and NHWC at once)."""
    if shape is None or len(shape) != len(actual) or not actual.isalpha() or \
            sorted(actual) != sorted(want):
        return False
    return moves_only_unit_axes(shape, [actual.index(axis) for axis in want])


def check_layout(case: CaseSpec, target: str, ops: Sequence[OpLayout]) -> CheckResult:
    line = case.line_of(NAME)
    if not case.layout:
        return CheckResult(NAME, Status.SKIPPED, "no [layout] declared for this case",
                           kind=SkipKind.NOT_DECLARED, line=line)
    wrong: list[str] = []
    checked = 0
    for op in ops:
        exp = expected_layouts(case, op)
        if not exp:
            continue
        checked += 1
        diffs = [f"{key} {op.layouts.get(key)}, expected {want}" for key, want in exp.items()
                 if op.layouts.get(key) != want
                 and not same_in_memory(op.layouts.get(key, ""), want, op.shapes.get(key))]
        if diffs:
            wrong.append(f"{op.op} ({op.var}) " + ", ".join(diffs))
    figures = LayoutFigures(layout_sensitive_ops=checked)
    if not checked:
        return CheckResult(NAME, Status.FAILED,
                           f"no op of the declared layouts found in the final IR ({target})",
                           kind=LayoutKind.MISSING, line=line, figures=figures,
                           body="declared: " + ", ".join(case.layout))
    if wrong:
        first_line = case.line_of(NAME, wrong[0].split(" ", 1)[0]) or line
        return CheckResult(
            NAME, Status.FAILED,
            f"{len(wrong)} of {checked} layout-sensitive ops not in the declared layout "
            f"({target}): {wrong[0]}",
            kind=LayoutKind.MISMATCH, line=first_line, body="\n".join(wrong), figures=figures)
    return CheckResult(NAME, Status.PASSED,
                       f"{checked} layout-sensitive ops in the declared layout", line=line,
                       figures=figures)


@register
class Layout(Check):
    name = NAME
    order = 10
    summary = ('every layout-sensitive op (convolutions, pooling, resize, …) runs in the declared '
               'layout')
    declared_by = (NAME,)
    kinds = (LayoutKind,)

    def judge(self, j: Judging) -> CheckResult:
        return check_layout(j.case, j.target, j.m.op_layouts)
