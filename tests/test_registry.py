"""A check is one object: adding one is writing its module. The registry drives judging, the
console, Markdown, JUnit, the pytest items, budget tighten and the reference's check table."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from cl_validate.checks import registry
from cl_validate.checks.judge import judge
from cl_validate.checks.ratchet import BudgetCheck, budget_verdict
from cl_validate.checks.registry import FailureKind, Judging, checks, names, register
from cl_validate.checks.verdict import CheckResult, Figures, Status
from cl_validate.measurements.kernel_list import Kernel, KernelList
from cl_validate.measurements.measurement import Measurement
from cl_validate.report import reference
from cl_validate.report.console import summary_table
from cl_validate.report.junit import build_junit
from cl_validate.report.markdown import render_markdown
from cl_validate.spec import load_case
from cl_validate.spec.budget_keys import BudgetKey, budget_keys
from tests.conftest import MINIMAL

ROOT = Path(__file__).resolve().parents[1]


class ToyKind(FailureKind):
    TOO_MANY = "TooManyConvKernels", "more convolution kernels than the budget"


@dataclass(frozen=True)
class ConvFigures(Figures):
    conv_kernels: int | None = None
    budget: float | None = None
    budget_source: str | None = None
    stale: bool = False


class ConvKernels(BudgetCheck):
    """A toy check, written as a new check's module would be: kernels that run a
    convolution, against a [budget] entry of its own."""

    name = "conv_kernels"
    order = 45
    summary = "kernels that run a convolution ≤ budget (a toy)"
    declared_by = ("budget", "conv_kernels")
    budget = BudgetKey("conv_kernels", "count", minimum=0, label="convs")
    kinds = (*BudgetCheck.kinds, ToyKind)
    title = "conv kernels / budget"

    def figure(self, kernels: KernelList) -> int | None:
        return sum(1 for k in kernels if "conv2d" in k.name)

    def judge(self, j: Judging) -> CheckResult:
        assert j.m.kernels is not None
        n = self.figure(j.m.kernels) or 0
        limit = j.case.budget_for(j.target).get(self.name)
        if limit is None:
            return CheckResult(self.name, Status.SKIPPED, f"no budget ({n} conv kernels)",
                               figures=ConvFigures(conv_kernels=n))
        return budget_verdict(j, self.name, n, int(limit),
                              j.case.budget_for(j.target).line(self.name), "",
                              ConvFigures(conv_kernels=n))

    def cell(self, result: CheckResult, compact: bool = True) -> str | None:
        f = result.figures
        if not isinstance(f, ConvFigures) or f.conv_kernels is None:
            return None
        return f"{f.conv_kernels}{'/' if compact else ' / '}{f.budget:g}" \
            if f.budget is not None else str(f.conv_kernels)


@pytest.fixture
def toy():
    register(ConvKernels)
    yield registry.get("conv_kernels")
    registry.unregister("conv_kernels")


def _measurement() -> Measurement:
    kernels = KernelList([Kernel(0, "fused_conv2d_add_relu", ("conv2d", "add", "relu")),
                          Kernel(1, "fused_conv2d1_add1", ("conv2d", "add")),
                          Kernel(2, "mean", ("mean",))])
    return Measurement("llvm", kernels=kernels, compile_seconds=0.5, seconds=1.0)


def test_a_registered_check_is_judged_and_reported_everywhere(toy, write_case):
    assert names().index("conv_kernels") == names().index("kernels") + 1  # by its order
    # its budget key is a case-file key now: validated, line-numbered, listed
    assert "conv_kernels" in [k.name for k in budget_keys()]
    case = load_case(write_case(MINIMAL + "conv_kernels = 1\n"))
    result = judge(case, _measurement())
    toy_result = result.check("conv_kernels")
    assert toy_result.status is Status.FAILED and toy_result.kind == "BudgetExceeded"
    assert toy_result.message.startswith("conv_kernels 2 > budget 1 (llvm)")
    assert toy_result.line == case.line_of("budget", "conv_kernels")

    junit = build_junit([result])._elem
    (tc,) = [t for t in junit.iter("testcase") if t.get("name") == "conv_kernels[llvm]"]
    assert tc.find("failure").get("type") == "BudgetExceeded"
    assert tc.get("line") == str(case.line_of("budget", "conv_kernels"))
    props = {p.get("name"): p.get("value") for p in tc.iter("property")}
    assert props["conv_kernels"] == "2" and props["budget"] == "1"

    console = summary_table([result])
    head = next(line for line in console.splitlines() if line.startswith("case"))
    assert re.search(r"kernels\s+conv_kernels\s+fallback_kernels", head)
    assert "FAIL 2/1" in console and "conv_kernels: conv_kernels 2 > budget 1" in console

    md = render_markdown([result])
    assert "| conv kernels / budget |" in md and "❌ 2 / 1" in md

    assert "| `conv_kernels` | kernels that run a convolution ≤ budget (a toy) | " \
        "`[budget] conv_kernels` | `BudgetExceeded`, `BudgetStale`, `TooManyConvKernels` |" \
        in reference.checks_table()


def test_a_case_declaring_an_unknown_budget_fails_without_the_check(write_case):
    from cl_validate.errors import CaseFileError

    with pytest.raises(CaseFileError, match="unknown key 'conv_kernels' in \\[budget\\]"):
        load_case(write_case(MINIMAL + "conv_kernels = 1\n"))


def test_the_pytest_items_follow_the_registry(toy, tmp_path):
    from cl_validate import pytest_plugin

    assert "conv_kernels" in pytest_plugin.names()


def test_every_check_name_is_written_in_its_own_module_only():
    """A check's name is a string in one place: its module (the issue's grep)."""
    package = ROOT / "cl_validate"
    for check in checks():
        module = Path(type(check).__module__.replace(".", "/") + ".py")
        if check.name in ("compile", "layout", "kernels", "numerics"):
            continue  # also ordinary words and case-file keys (the [layout] table, ...)
        found = sorted(str(p.relative_to(ROOT)) for p in package.rglob("*.py")
                       if f'"{check.name}"' in p.read_text(encoding="utf-8"))
        assert found == [str(module)], (check.name, found)


def test_every_failure_kind_is_documented():
    for check in checks():
        for group in check.kinds:
            for kind in group:
                assert kind.doc, (check.name, kind.value)


def test_the_check_reference_is_generated_from_the_registry():
    text = (ROOT / "docs" / "reference" / "checks.md").read_text(encoding="utf-8")
    assert {"checks", "failure-kinds"} <= set(reference.blocks_in(text))
    assert reference.replace_blocks(text) == text, \
        f"docs/reference/checks.md is stale: {reference.COMMAND}"


def test_the_pipelines_a_case_may_name_are_the_registered_ones():
    """The case-file check (no TVM) and the compile layer's registry name the same set."""
    from cl_validate.compile.pipeline import pipeline_names
    from cl_validate.spec import BUILTIN_PIPELINES

    assert sorted(BUILTIN_PIPELINES) == pipeline_names()
