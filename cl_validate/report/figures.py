"""The figures of a run per case × target, read back from its JUnit report (never measured
again): what `cl-validate diff` compares, ``run --trend-json`` writes and ``cl-validate
trend`` charts.

A report carries each check's figures as testcase ``<properties>`` (`cl_validate.report.junit`);
`read_runs` turns a report — one run's, or merged shards' — back into a `Run` per case ×
target, and `runs_of` does the same for a run's results in memory, from the same properties,
so both sides of a comparison read alike. Which properties are figures a reviewer compares,
how each reads and how much of a change is noise, each check declares (`Check.tracked`,
gathered by `cl_validate.checks.registry.tracked_figures`): none is named here.

Only the standard library and plain data here: the CI job that compares reports installs
neither torch nor TVM.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cl_validate.atomic import write_atomic
from cl_validate.checks.layout_transforms import TRANSFORM_PROP
from cl_validate.checks.registry import Figure, tracked_figures
from cl_validate.checks.verdict import CaseResult, parse_check_id
from cl_validate.paths import repo_path
from cl_validate.report.merge import NESTED, read

#: The suite of target T in cl_validate's reports.
SUITE_PREFIX = "cl_validate."


@dataclass
class Run:
    """One case × target of a report: its figures by ``check.property`` (a property written
    more than once, as ``transform``, keeps every value in order) and each check's status."""

    case: str  # the run's label: ``resnet50``, or ``resnet50[b8]`` for a variant
    target: str
    file: str = ""  # the case file, as the report names it (relative to the repository)
    props: dict[str, list[str]] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)  # check → passed|failed|error|skipped
    lines: dict[str, int] = field(default_factory=dict)  # check → case-file line

    @property
    def key(self) -> tuple[str, str]:
        return self.case, self.target

    def value(self, prop: str) -> float | None:
        """The property ``check.name`` as a number (None: not in the report, or not one)."""
        values = self.props.get(prop)
        if not values:
            return None
        try:
            v = float(values[0])
        except ValueError:
            return None
        return v if math.isfinite(v) else None

    def transforms(self) -> list[str]:
        """Each runtime transform's attribution (why it is there, from which module)."""
        return list(self.props.get(TRANSFORM_PROP, ()))


def target_of(suite: str) -> str:
    """The target a suite of cl_validate's reports holds (``cl_validate.llvm`` → ``llvm``)."""
    return suite.removeprefix(SUITE_PREFIX)


def read_runs(path: str) -> dict[tuple[str, str], Run]:
    """Every case × target of the report at `path`, in report order; a one-line
    `UsageError` when it is not a JUnit report (`cl_validate.report.merge.read`)."""
    root = read(path)
    runs: dict[tuple[str, str], Run] = {}
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    for suite in suites:
        name = suite.get("name", "")
        if NESTED in name or not name.startswith(SUITE_PREFIX):
            continue  # another tool's suite merged in: not a case × target
        target = target_of(name)
        for tc in suite.findall("testcase"):
            _add(runs, tc, target)
    return runs


def _add(runs: dict[tuple[str, str], Run], tc: ET.Element, target: str) -> None:
    check, variant = parse_check_id(tc.get("name", ""), target)
    case = tc.get("classname", "")
    label = f"{case}[{variant}]" if variant else case
    run = runs.setdefault((label, target), Run(label, target, tc.get("file", "")))
    status = "passed"
    for tag in ("failure", "error", "skipped"):
        if tc.find(tag) is not None:
            status = "failed" if tag == "failure" else tag
    run.status[check] = status
    line = tc.get("line")
    if line and line.isdigit():
        run.lines[check] = int(line)
    for prop in tc.iter("property"):
        run.props.setdefault(f"{check}.{prop.get('name', '')}", []).append(
            prop.get("value", ""))


def runs_of(results: Iterable[CaseResult]) -> dict[tuple[str, str], Run]:
    """The `Run` of each result, from the properties its report would carry."""
    runs: dict[tuple[str, str], Run] = {}
    for r in results:
        run = runs.setdefault((r.case.label, r.target),
                              Run(r.case.label, r.target, repo_path(r.case.path)))
        for c in r.checks:
            run.status[c.check] = c.status.value
            if c.line:
                run.lines[c.check] = c.line
            for k, v in c.figures.properties():
                run.props.setdefault(f"{c.check}.{k}", []).append(v)
    return runs


# --------------------------------------------------------------------------------------------
# Trend figures: github-action-benchmark's customSmallerIsBetter
# --------------------------------------------------------------------------------------------
def benchmark_entries(runs: Iterable[Run]) -> list[dict[str, Any]]:
    """One ``{name, unit, value, extra}`` per case × target × figure measured, the format
    github-action-benchmark reads as ``customSmallerIsBetter`` (every figure here is better
    smaller). ``name`` is ``case [target] figure``, stable from run to run."""
    out: list[dict[str, Any]] = []
    for run in runs:
        for f in tracked_figures():
            value = run.value(f.prop)
            if value is None:
                continue
            entry: dict[str, Any] = {"name": f"{run.case} [{run.target}] {f.name}",
                                     "unit": f.unit,
                                     "value": int(value) if value.is_integer() else value}
            extra = _extra(run, f)
            if extra:
                entry["extra"] = extra
            out.append(entry)
    return out


def _extra(run: Run, f: Figure) -> str:
    where = run.file + (f":{run.lines[f.prop.split('.')[0]]}"
                        if f.prop.split(".")[0] in run.lines else "")
    detail = run.props.get(f.detail, []) if f.detail else []
    if detail:
        return f"{where}\n" + "\n".join(detail)
    return where


def write_benchmark_json(runs: Iterable[Run], path: str | Path) -> Path:
    """`benchmark_entries` as a JSON file, atomically."""
    text = json.dumps(benchmark_entries(runs), indent=1, ensure_ascii=False)
    return write_atomic(path, (text + "\n").encode())


def write_trend_json(results: Sequence[CaseResult], path: str | Path) -> Path:
    """``run --trend-json``: the figures of the run's finished results."""
    return write_benchmark_json(runs_of(results).values(), path)

