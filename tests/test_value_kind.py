"""A check with a new kind of value is its module and its test (issue #38, item 1).

The toy check below is written as a new check's module would be: it brings its own kind of
value (milliseconds, a `ValueKind`: how a case file writes it, how reports show it, its unit
and its reference text) and its own figure for ``cl-validate diff`` and ``trend``
(`Check.tracked`). Registered here, and nowhere else, it is seen by the case-file parser (a
valid value read, a wrong one a one-line error at its file and line), ``cl-validate list``,
the reference docs, the console, JUnit, Markdown, ``diff`` and ``trend``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cl_validate.checks import registry
from cl_validate.checks.judge import judge
from cl_validate.checks.registry import Check, FailureKind, Figure, Judging, register
from cl_validate.checks.verdict import CaseResult, CheckResult, Figures, Status
from cl_validate.errors import CaseFileError, ExitCode
from cl_validate.measurements.kernel_list import Kernel, KernelList
from cl_validate.measurements.kinds import SkipKind
from cl_validate.measurements.measurement import Measurement
from cl_validate.measurements.profile import Profile
from cl_validate.report import reference
from cl_validate.report.console import summary_table
from cl_validate.report.junit import build_junit, write_junit
from cl_validate.report.markdown import render_markdown
from cl_validate.spec import load_case
from cl_validate.spec.budget_keys import BudgetKey, Reader, ValueKind, budget_key, value_kind
from tests.conftest import MINIMAL, run_cli

KEY = "max_kernel_ms"


# --------------------------------------------------------------------------------------------
# the toy check's module
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Milliseconds(ValueKind):
    """A time in milliseconds: a number > 0."""

    def parse(self, value: Any, reader: Reader, where: tuple[str, ...],
              key: BudgetKey) -> float:
        ms = reader.number(value, where, key.name)
        if ms <= 0:
            raise reader.fail(where, f"{key.name} must be milliseconds > 0, got {ms:g}",
                              "12.5 is 12.5 ms")
        return ms

    def format(self, value: float) -> str:
        return f"{value:.3g} {self.unit}"


MS = Milliseconds("milliseconds", "ms", "milliseconds, a number > 0 (`12.5`)")


class KernelTimeKind(FailureKind):
    TOO_SLOW = "KernelTooSlow", "the slowest kernel's median time is above its budget"


@dataclass(frozen=True)
class KernelTimeFigures(Figures):
    max_kernel_ms: float | None = None  # the slowest kernel's median time
    budget: float | None = None


class MaxKernelTime(Check):
    """The slowest kernel's median time against a ceiling in milliseconds (a toy)."""

    name = "max_kernel_time"
    order = 85
    summary = "the slowest kernel's median time ≤ budget in ms (a toy)"
    declared_by = ("budget", KEY)
    budget = BudgetKey(KEY, MS, exact=False, label="kernel time", needs_profile=True)
    kinds = (KernelTimeKind,)
    title = "max kernel time / budget"
    tracked = (Figure(KEY, "max kernel time", f"max_kernel_time.{KEY}", MS.unit, noise_rel=0.1,
                      kind=MS),)

    def judge(self, j: Judging) -> CheckResult:
        profile, kernels = j.m.profile, j.m.kernels
        if profile is None or kernels is None:
            return CheckResult(self.name, Status.SKIPPED, "not profiled",
                               kind=SkipKind.NOT_PROFILED)
        slowest = max(s.median for i in range(len(kernels)) if (s := profile.kernel(i)))
        ms = slowest / 1e6
        budget = j.case.budget_for(j.target)
        limit, line = budget.get(KEY), budget.line(KEY)
        figures = KernelTimeFigures(max_kernel_ms=ms, budget=limit)
        if limit is None:
            return CheckResult(self.name, Status.SKIPPED, f"no {KEY} budget declared",
                               kind=SkipKind.NOT_DECLARED, figures=figures)
        if ms > limit:
            return CheckResult(self.name, Status.FAILED, f"{KEY} {MS.format(ms)} > budget "
                               f"{MS.format(limit)} ({j.target})", kind=KernelTimeKind.TOO_SLOW,
                               line=line, figures=figures)
        return CheckResult(self.name, Status.PASSED, f"{KEY} {MS.format(ms)} <= budget "
                           f"{MS.format(limit)}", line=line, figures=figures)

    def cell(self, result: CheckResult, compact: bool = True) -> str | None:
        f = result.figures
        if not isinstance(f, KernelTimeFigures) or f.max_kernel_ms is None:
            return None
        sep = "/" if compact else " / "
        return MS.format(f.max_kernel_ms) + (f"{sep}{MS.format(f.budget)}"
                                             if f.budget is not None else "")


# --------------------------------------------------------------------------------------------
# the test
# --------------------------------------------------------------------------------------------
@pytest.fixture
def toy():
    register(MaxKernelTime)
    yield registry.get("max_kernel_time")
    registry.unregister("max_kernel_time")


def _measurement(slowest_ms: float) -> Measurement:
    kernels = KernelList([Kernel(0, "fused_conv2d_add_relu", ("conv2d", "add", "relu")),
                          Kernel(1, "mean", ("mean",))])
    ns = int(slowest_ms * 1e6)
    profile = Profile("cpu(0)", 3, ((ns, ns, ns), (1000, 1000, 1000)))
    return Measurement("llvm", kernels=kernels, compile_seconds=0.5, seconds=1.0,
                       profile=profile)


def _line(path: Path, key: str) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.startswith(f"{key} ="))


def test_the_case_file_parser_reads_the_new_kind(toy, write_case):
    assert budget_key(KEY).kind is MS and value_kind("milliseconds") is MS
    case = load_case(write_case(MINIMAL + f"{KEY} = 12.5\n"))
    assert case.budget_for("llvm").get(KEY) == 12.5
    assert case.profiled("llvm")  # its key needs kernel times: declaring it times the run
    # listed as the kind writes it
    code, out = run_cli(["list", str(case.path)]).both()
    assert code == ExitCode.OK and "kernel time<=12.5 ms" in out

    for bad, message in ((f"{KEY} = 0", f"{KEY} must be milliseconds > 0, got 0 "
                          "(hint: 12.5 is 12.5 ms)"),
                         (f'{KEY} = "fast"', f"{KEY} must be a number, got a string 'fast'")):
        path = write_case(MINIMAL + bad + "\n", name="bad.toml")
        with pytest.raises(CaseFileError) as caught:
            load_case(path)
        text = str(caught.value)
        assert text == f"{path}:{_line(path, KEY)}: {message}" and "\n" not in text
        code, out = run_cli(["list", str(path)]).both()
        assert code == ExitCode.USAGE_ERROR and f"bad.toml:{_line(path, KEY)}: {KEY} must" in out


def test_the_reference_describes_the_new_kind(toy):
    assert (f"| `{KEY}` | milliseconds, a number > 0 (`12.5`) | `max_kernel_time` | "
            "the slowest kernel's median time ≤ budget in ms (a toy) | no: a ceiling |"
            in reference.budget_table())


def test_the_new_kind_reaches_console_junit_and_markdown(toy, write_case):
    case = load_case(write_case(MINIMAL + f"{KEY} = 10\n"))
    result = judge(case, _measurement(12.5))
    toy_result = result.check("max_kernel_time")
    assert toy_result.status is Status.FAILED and toy_result.kind == "KernelTooSlow"
    assert toy_result.message == f"{KEY} 12.5 ms > budget 10 ms (llvm)"
    assert toy_result.line == case.line_of("budget", KEY)

    console = summary_table([result])
    head = next(line for line in console.splitlines() if line.startswith("case"))
    assert head.split()[-4:] == ["max_kernel_time", "time", "peak", "MB"]  # by its order: last
    assert "FAIL 12.5 ms/10 ms" in console
    assert f"max_kernel_time: {KEY} 12.5 ms > budget 10 ms (llvm)" in console

    junit = build_junit([result])._elem
    (tc,) = [t for t in junit.iter("testcase") if t.get("name") == "max_kernel_time[llvm]"]
    failure = tc.find("failure")
    assert failure.get("type") == "KernelTooSlow"
    assert failure.get("message").startswith(f"{KEY} 12.5 ms > budget 10 ms")
    assert tc.get("line") == str(case.line_of("budget", KEY))
    props = {p.get("name"): p.get("value") for p in tc.iter("property")}
    assert props == {KEY: "12.5", "budget": "10"}

    md = render_markdown([result])
    assert "| max kernel time / budget |" in md and "❌ 12.5 ms / 10 ms" in md


def _report(path: Path, case_path: Path, slowest_ms: float) -> CaseResult:
    result = judge(load_case(case_path), _measurement(slowest_ms))
    write_junit([result], path)
    return result


def test_diff_and_trend_follow_the_new_figure(toy, write_case, tmp_path):
    case_path = write_case(MINIMAL + f"{KEY} = 20\n")
    base, head = tmp_path / "base.xml", tmp_path / "head.xml"
    _report(base, case_path, 8.0)
    _report(head, case_path, 12.5)

    # diff: the one figure that changed, read back from the reports, as its kind writes it
    code, out = run_cli(["diff", str(base), str(head)]).both()
    assert code == ExitCode.OK
    (row,) = [line for line in out.splitlines() if line.startswith("| `case` |")]
    assert "| 🔴 max kernel time 8 ms → 12.5 ms |" in row
    # within its noise (10%) it is no change
    _report(head, case_path, 8.5)
    assert "No figure changed" in run_cli(["diff", str(base), str(head)]).out
    _report(head, case_path, 12.5)

    # trend: its series over the reports, charted on request, in the JSON always
    trend_json = tmp_path / "trend.json"
    code, out = run_cli(["trend", str(base), str(head), "--figure", KEY,
                         "--json", str(trend_json)]).both()
    assert code == ExitCode.OK
    assert "### `case` [llvm]: max kernel time" in out
    assert 'y-axis "ms"' in out and "line [8, 12.5]" in out
    entries = {e["name"]: e for e in json.loads(trend_json.read_text(encoding="utf-8"))}
    entry = entries[f"case [llvm] {KEY}"]
    assert entry["unit"] == "ms" and entry["value"] == 12.5
    # not charted by default: the default charts stay the runtime transforms' cost
    assert "max kernel time" not in run_cli(["trend", str(base), str(head)]).out


def test_unregistered_the_kind_and_its_figure_are_gone(write_case):
    register(MaxKernelTime)
    registry.unregister("max_kernel_time")
    with pytest.raises(ValueError, match="unknown kind of value 'milliseconds'"):
        value_kind("milliseconds")
    assert KEY not in [f.name for f in registry.tracked_figures()]
    with pytest.raises(CaseFileError, match=f"unknown key '{KEY}' in \\[budget\\]"):
        load_case(write_case(MINIMAL + f"{KEY} = 12.5\n"))


def test_budget_keys_still_take_the_old_names_of_kinds():
    key = BudgetKey("some_count", "count")
    assert key.kind is value_kind("count") and key.format(3) == "some_count<=3"
    assert BudgetKey("share", "fraction", label="time share").format(0.05) == \
        "time share<=0.05"
    with pytest.raises(ValueError, match="budget odd: unknown kind of value 'seconds'"):
        BudgetKey("odd", "seconds")
