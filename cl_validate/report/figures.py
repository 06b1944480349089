"""The figures of a run per case × target, read back from its JUnit report (never measured
again): what `cl-validate diff` compares, ``run --trend-json`` writes and ``cl-validate
trend`` charts.

A report carries each check's figures as testcase ``<properties>`` (`cl_validate.report.junit`);
`read_runs` turns a report — one run's, or merged shards' — back into a `Run` per case ×
target, and `runs_of` does the same for a run's results in memory, from the same properties,
so both sides of a comparison read alike. `FIGURES` says which properties are figures a
reviewer compares, how each reads, and how much of a change is noise.

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
from cl_validate.checks.fallback_kernels import NAME as FALLBACK_KERNELS
from cl_validate.checks.verdict import CaseResult, parse_check_id
from cl_validate.measurements.units import bytes_text
from cl_validate.paths import repo_path
from cl_validate.report.merge import NESTED, read

#: The suite of target T in cl_validate's reports.
SUITE_PREFIX = "cl_validate."
#: The property each runtime transform's attribution is written in (repeated), and the count.
TRANSFORM = "layout_transforms.transform"
TRANSFORMS = "layout_transforms.layout_transforms"


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
        return list(self.props.get(TRANSFORM, ()))


@dataclass(frozen=True)
class Figure:
    """One figure a reviewer compares between runs: where it is in the report, its unit,
    how it reads, and the change that is noise (both `noise_rel` of the larger value and
    `noise_abs` must be exceeded; exact counts have none)."""

    name: str  # short id: trend names and `--figure`
    label: str  # how reports say it
    prop: str  # ``check.property``
    unit: str
    noise_rel: float = 0.0
    noise_abs: float = 0.0

    def text(self, value: float | None) -> str:
        if value is None:
            return "–"
        if self.unit == "bytes":
            return bytes_text(int(value))
        if self.unit == "s":
            return f"{value:.1f} s"
        if self.unit == "MB":
            return f"{value:.0f} MB"
        if self.unit == "x":
            return f"{value:.3g}x"
        if float(value).is_integer():
            return str(int(value))
        return f"{value:.3g}"

    def changed(self, before: float, after: float) -> bool:
        """Whether `before` → `after` is a change and not measurement noise."""
        delta = abs(after - before)
        return delta > 0 and delta > self.noise_abs and \
            delta > self.noise_rel * max(abs(before), abs(after))


#: Every figure compared and trended, smaller is better for each. Compile seconds and peak
#: memory vary from run to run and machine to machine: only a large change is one.
FIGURES = (
    Figure("transforms", "runtime transforms", TRANSFORMS, "transforms"),
    Figure("weight_transforms", "weight transforms", "layout_transforms.weight_transforms",
           "transforms"),
    Figure("transform_bytes", "transform bytes", "layout_transform_bytes.transform_bytes",
           "bytes"),
    Figure("kernels", "kernels", "kernels.kernels", "kernels"),
    Figure(FALLBACK_KERNELS, "fallback kernels", f"{FALLBACK_KERNELS}.{FALLBACK_KERNELS}",
           "kernels"),
    Figure("numerics_ratio", "numerics (x eager float32's error)",
           "numerics.float64_ratio", "x", noise_rel=0.1),
    Figure("max_abs", "max abs error", "numerics.max_abs", "error", noise_rel=0.5),
    Figure("compile_seconds", "compile time", "compile.compile_seconds", "s",
           noise_rel=0.25, noise_abs=5.0),
    Figure("peak_memory", "peak memory", "compile.peak_rss_mb", "MB",
           noise_rel=0.2, noise_abs=100.0),
)


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
        for f in FIGURES:
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
    if f.name == "transforms" and run.transforms():
        return f"{where}\n" + "\n".join(run.transforms())
    return where


def write_benchmark_json(runs: Iterable[Run], path: str | Path) -> Path:
    """`benchmark_entries` as a JSON file, atomically."""
    text = json.dumps(benchmark_entries(runs), indent=1, ensure_ascii=False)
    return write_atomic(path, (text + "\n").encode())


def write_trend_json(results: Sequence[CaseResult], path: str | Path) -> Path:
    """``run --trend-json``: the figures of the run's finished results."""
    return write_benchmark_json(runs_of(results).values(), path)

