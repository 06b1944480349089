"""``cl-validate diff`` and ``trend``: what a pull request changed, from real reports.

A git repository in a temporary folder holds two cases of one tiny model module; the base
branch's run writes its report, then the pull request edits the model (a channel shuffle
between the convolutions: one more runtime transform in one case) and raises that case's
budget, and runs again. The comparison must show that one case's changed row, with the before
and after figures and the new transform's module, and the raise first, with its line.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cl_validate.errors import ExitCode
from cl_validate.paths import MARKDOWN_MARKER
from cl_validate.report.delta import compare, render
from cl_validate.report.figures import read_runs
from cl_validate.spec import load_case
from cl_validate.spec.raises import loosened
from tests.conftest import git, run_cli, tiny_case

MODEL = '''
import torch
from torch import nn


class Plain(nn.Module):
    """conv -> ReLU -> conv: the two boundary transforms only."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.conv2(torch.relu(self.conv1(x)))


class Shuffled(Plain):
    def forward(self, x):
        y = torch.relu(self.conv1(x))
        # SHUFFLE
        return self.conv2(y)


def plain():
    return Plain()


def shuffled():
    return Shuffled()
'''
SHUFFLE = ("n, c, h, w = y.shape\n        "
           "y = y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)")


def _case(factory: str, transforms: int, **kw: object) -> str:
    return tiny_case(transforms, model=f"pr_model:{factory}", **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def pr(tmp_path_factory: pytest.TempPathFactory):
    """The repository after the pull request, with the base's report and the head's."""
    repo = tmp_path_factory.mktemp("repo")
    (repo / "pr_model.py").write_text(MODEL)
    (repo / "cases").mkdir()
    (repo / "cases" / "plain.toml").write_text(_case("plain", 2))
    (repo / "cases" / "shuffled.toml").write_text(_case("shuffled", 2))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(repo)
        mp.syspath_prepend(str(repo))
        base = run_cli(["run", "cases", "--no-isolation", "--junit", "base.xml"])
        assert base.code == ExitCode.OK, base.out + base.err
        # The pull request: a channel shuffle in one model, and that case's budget raised.
        (repo / "pr_model.py").write_text(MODEL.replace("# SHUFFLE", SHUFFLE))
        (repo / "cases" / "shuffled.toml").write_text(_case("shuffled", 3))
        sys.modules.pop("pr_model", None)  # in-process runs: import the edited model
        head = run_cli(["run", "cases", "--no-isolation", "--junit", "head.xml",
                        "--trend-json", "trend.json"])
        assert head.code == ExitCode.OK, head.out + head.err
        yield repo


def _diff(repo: Path, *extra: str):
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(repo)
        return run_cli(["diff", "base.xml", "head.xml", *extra])


def _rows(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("| `")]


@pytest.mark.compile
def test_the_pull_request_shows_one_changed_row_with_figures_and_the_new_transforms_module(pr):
    r = _diff(pr, "--markdown", "comment.md")
    assert r.code == ExitCode.OK, r.out + r.err
    (row,) = _rows(r.out)  # the unchanged case has no row
    assert row.startswith("| `shuffled` | llvm |")
    assert "🔴 runtime transforms 2 → 3" in row
    assert "🔴 +1 the model's own permute, from " in row
    assert "graph input boundary" not in row  # a transform both sides have is no change
    assert "(1 of 2 case × target runs changed, 1 for the worse)" in r.out
    assert "loosened" not in r.out  # not asked to compare the case files
    comment = (pr / "comment.md").read_text()
    assert comment.startswith(MARKDOWN_MARKER) and row in comment

    # the figures are the reports' own, read back: the row's before and after are theirs
    base, head = read_runs(str(pr / "base.xml")), read_runs(str(pr / "head.xml"))
    key = ("shuffled", "llvm")
    assert base[key].value("layout_transforms.layout_transforms") == 2
    assert head[key].value("layout_transforms.layout_transforms") == 3
    (added,) = [a for a in head[key].transforms() if a not in base[key].transforms()]
    assert added.startswith("the model's own permute")
    bytes_before = base[key].value("layout_transform_bytes.transform_bytes")
    bytes_after = head[key].value("layout_transform_bytes.transform_bytes")
    assert bytes_before is not None and bytes_after is not None and bytes_after > bytes_before
    assert "🔴 transform bytes" in row


@pytest.mark.compile
def test_a_raised_budget_is_listed_first_with_its_line_and_fails_unless_acknowledged(pr):
    r = _diff(pr, "--base-cases", "HEAD")
    assert r.code == ExitCode.OK, r.out + r.err
    raised = "- `cases/shuffled.toml:12` `shuffled` [llvm]: budget layout_transforms 2 → **3**"
    assert raised in r.out
    assert r.out.index(raised) < r.out.index("| case |")  # at the top, before the table
    assert r.out.count("\n- `") == 1  # the unchanged case file loosened nothing

    r = _diff(pr, "--base-cases", "HEAD", "--fail-on-budget-increase")
    assert r.code == ExitCode.CHECK_FAILED
    assert ("cl-validate: error: cases/shuffled.toml:12: shuffled [llvm] budget "
            "layout_transforms 2 → 3") in r.err
    r = _diff(pr, "--base-cases", "HEAD", "--fail-on-budget-increase",
              "--allow-budget-increase")
    assert r.code == ExitCode.OK and "acknowledged (`--allow-budget-increase`)" in r.out

    # the base's case files from a folder compare alike
    folder = pr / "base_cases"
    folder.mkdir(exist_ok=True)
    (folder / "shuffled.toml").write_text(_case("shuffled", 2))
    r = _diff(pr, "--base-cases", str(folder))
    assert raised in r.out

    r = _diff(pr, "--base-cases", "no-such-branch")
    assert r.code == ExitCode.USAGE_ERROR and "neither a folder nor a git revision" in r.err


@pytest.mark.compile
def test_rows_that_do_not_fit_are_counted_not_cut(pr):
    base, head = read_runs(str(pr / "base.xml")), read_runs(str(pr / "head.xml"))
    deltas = compare(base, head)
    full = render(deltas, [], runs=len(head))
    cut = render(deltas, [], runs=len(head), limit=len(full) - 10)
    assert len(cut) <= len(full) - 10 and not _rows(cut)
    assert "1 more changed case × target runs left out" in cut
    assert render(deltas, [], runs=len(head), limit=len(full) + 500) == full


@pytest.mark.compile
def test_trend_json_and_charts_are_the_reports_figures(pr):
    entries = json.loads((pr / "trend.json").read_text())
    by_name = {e["name"]: e for e in entries}
    assert by_name["shuffled [llvm] transforms"]["value"] == 3
    assert by_name["plain [llvm] transforms"]["value"] == 2
    assert by_name["shuffled [llvm] transforms"]["unit"] == "transforms"
    assert "the model's own permute" in by_name["shuffled [llvm] transforms"]["extra"]
    head = read_runs(str(pr / "head.xml"))
    assert by_name["shuffled [llvm] transform_bytes"]["value"] == head[
        ("shuffled", "llvm")].value("layout_transform_bytes.transform_bytes")

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(pr)
        r = run_cli(["trend", "base.xml", "head.xml", "--case", "shuffled", "--json",
                     "again.json"])
    assert r.code == ExitCode.OK, r.out + r.err
    assert r.out.count("```mermaid\nxychart-beta") == 2  # transforms, and their bytes
    assert 'x-axis ["base", "head"]' in r.out and "line [2, 3]" in r.out
    assert "plain" not in r.out
    assert json.loads((pr / "again.json").read_text()) == entries


def test_loosened_tolerances_and_removed_budgets_are_found(write_case):
    base = load_case(write_case(_case("plain", 2, kernels=6), "a.toml"))
    head_text = _case("plain", 2, tolerance=(1e-4, 1e-3))
    head = load_case(write_case(head_text, "a.toml"))
    found = {(x.what, x.before, x.after, x.line) for x in loosened(base, head)}
    assert found == {("budget kernels", "6", "not judged", 11),
                     ("tolerance atol", "0.0001", "0.001", 16)}
    assert loosened(head, base) == []  # tightening is not loosening


@pytest.mark.compile
def test_a_base_report_from_before_the_figures_existed_adds_no_noise(pr):
    """A base report written before compile figures and transform attributions were: the
    figures both reports have are compared, nothing is marked new for lack of the rest."""
    tree = ET.parse(pr / "base.xml")
    for props in tree.iter("properties"):
        for p in props.findall("property"):
            if p.get("name") in ("transform", "compile_seconds", "peak_rss_mb"):
                props.remove(p)
    tree.write(pr / "old.xml")
    base, head = read_runs(str(pr / "old.xml")), read_runs(str(pr / "head.xml"))
    (d,) = compare(base, head)
    assert d.case == "shuffled" and not d.added and not d.removed
    assert {c.figure.name for c in d.changes} >= {"transforms", "transform_bytes"}


def test_every_key_that_can_loosen_a_verdict_is_listed(write_case):
    """(#43.4) Not only budgets and rtol/atol: a larger ``steps``, an output compared as a set
    (``selection``, which let a random output pass), numerics that only warn on inputs they
    cannot tell apart, and other weights."""
    def case(steps: int, extra: str = "", outputs: str = "") -> str:
        text = tiny_case(2, extra=extra).replace("rtol = 0.0001\natol = 0.0001",
                                                 f"steps = {steps}")
        return text + outputs

    base = load_case(write_case(case(1), "a.toml"))
    head = load_case(write_case(case(3, 'input_sensitivity = "warn"\nweights = "calibrated"',
                                     "\n[[outputs]]\nselection = { axis = 1, differing = 4 }\n"),
                                "a.toml"))
    found = {(x.what, x.before, x.after) for x in loosened(base, head)}
    assert found == {("tolerance steps", "1", "3"),
                     ("tolerance selection", "element by element", "as a set, differing 4"),
                     ("input_sensitivity", "fail", "warn"),
                     ("weights", "as-built", "calibrated")}, found
    assert {x.what for x in loosened(head, base)} == {"weights"}  # no direction: listed
