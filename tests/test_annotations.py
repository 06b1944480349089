"""GitHub Actions annotations and the CLI's GitHub outputs, from a real over-budget tiny case.

The case file lives in a folder named ``we,ird:dir`` so that the annotation's ``file``
property needs GitHub's property escaping for real (``,`` and ``:`` end a property).
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from cl_validate.checks.verdict import CaseResult, Status
from cl_validate.cli import main
from cl_validate.errors import ExitCode
from cl_validate.paths import MARKDOWN_MARKER
from cl_validate.report.annotations import (
    emit_annotations,
    escape_data,
    escape_property,
    github_annotations,
)
from cl_validate.report.junit import build_junit
from cl_validate.session.in_process import judge_in_process
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions
from tests.conftest import tiny_case

DATA = Path(__file__).parent / "data"
FOLDER = "we,ird:dir"
# The tiny model needs 2 transforms: this case fails on its layout_transforms line.
CASE = tiny_case(1, kernels=4, tolerance=None)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("workspace")
    cases = root / FOLDER
    cases.mkdir()
    shutil.copy(DATA / "tiny_models.py", cases / "tiny_models.py")
    (cases / "over_budget.toml").write_text(CASE, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def results(workspace: Path) -> list[CaseResult]:
    case = load_case(workspace / FOLDER / "over_budget.toml")
    return judge_in_process([case], RunOptions(isolate=False))


def _parse(command: str) -> tuple[str, dict[str, str], str]:
    """Split a workflow command the way the runner does: properties end at ``::``."""
    m = re.fullmatch(r"::(\w+) ([^:]*)::(.*)", command)
    assert m, command
    unescape = {"%25": "%", "%0D": "\r", "%0A": "\n", "%3A": ":", "%2C": ","}

    def undo(text: str) -> str:
        return re.sub(r"%25|%0D|%0A|%3A|%2C", lambda x: unescape[x.group(0)], text)

    props = dict(p.split("=", 1) for p in m.group(2).split(","))
    return m.group(1), {k: undo(v) for k, v in props.items()}, undo(m.group(3))


def test_escaping_follows_the_actions_toolkit():
    assert escape_data("50% done\r\nnext: a,b") == "50%25 done%0D%0Anext: a,b"
    assert escape_property("a:b,c%d\ne") == "a%3Ab%2Cc%25d%0Ae"


@pytest.mark.compile
def test_one_error_on_the_violated_budget_line(results, workspace):
    (command,) = github_annotations(results, env={"GITHUB_WORKSPACE": str(workspace)})
    assert "\n" not in command
    assert "we,ird" not in command.split("::")[1]  # the properties: ',' would end one
    kind, props, message = _parse(command)
    assert kind == "error"
    assert props["file"] == f"{FOLDER}/over_budget.toml"
    lines = (workspace / props["file"]).read_text(encoding="utf-8").splitlines()
    assert lines[int(props["line"]) - 1].startswith("layout_transforms = 1")
    assert props["title"] == "cl_validate over_budget [llvm] layout_transforms failed"
    first, hint = message.split("\n")
    assert first.startswith("layout_transforms 2 > budget 1 (llvm)")
    assert hint.startswith("cl-validate show ") and "--target llvm" in hint


@pytest.mark.compile
def test_file_is_the_junit_file_outside_a_workspace(results):
    (command,) = github_annotations(results, env={})
    junit_files = {tc._elem.get("file") for suite in build_junit(results) for tc in suite}
    assert _parse(command)[1]["file"] in junit_files


@pytest.mark.compile
def test_errors_stale_warnings_and_hostile_messages(results):
    (r,) = results
    checks = []
    for c in r.checks:
        if c.check == "layout":
            c = replace(c, status=Status.ERROR, message="100% broken: a,b\r\nsecond", line=None)
        elif c.check == "kernels":
            c = replace(c, figures=replace(c.figures, stale=True))
        checks.append(c)
    commands = github_annotations([replace(r, checks=checks)], env={})
    parsed = [_parse(c) for c in commands]
    assert [(k, p["title"].rsplit(" ", 2)[1:]) for k, p, _ in parsed] == [
        ("error", ["layout", "error"]), ("error", ["layout_transforms", "failed"]),
        ("warning", ["kernels", "warning"])]
    assert "line" not in parsed[0][1]
    assert parsed[0][2] == "100% broken: a,b\r\nsecond"
    assert "100%25 broken: a,b%0D%0Asecond" in commands[0]


@pytest.mark.compile
def test_emitted_only_under_github_actions(results):
    out = io.StringIO()
    assert emit_annotations(results, out, env={"GITHUB_ACTIONS": "false"}) == 0
    assert out.getvalue() == ""
    assert emit_annotations(results, out, env={"GITHUB_ACTIONS": "true"}) == 1
    assert out.getvalue().startswith("::error file=")


@pytest.mark.compile
def test_a_notice_says_when_github_would_drop_annotations(results):
    many = [replace(results[0], target=f"t{i}") for i in range(11)]
    out = io.StringIO()
    assert emit_annotations(many, out, env={"GITHUB_ACTIONS": "true"}) == 12
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("::notice title=cl_validate::11 error annotations: GitHub shows 10")


# --------------------------------------------------------------------------------------------
# The CLI: --markdown, the job summary and annotations at the end of `run`
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cli_run(workspace: Path) -> tuple[int, str, str, Path, Path]:
    summary = workspace / "summary.md"
    summary.write_text("previous step\n", encoding="utf-8")
    report = workspace / "reports" / "r.md"
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GITHUB_ACTIONS", "true")
        mp.setenv("GITHUB_STEP_SUMMARY", str(summary))
        mp.setenv("GITHUB_WORKSPACE", str(workspace))
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["run", str(workspace / FOLDER), "--no-isolation", "--target", "llvm",
                         "--markdown", str(report)])
    return code, out.getvalue(), err.getvalue(), report, summary


@pytest.mark.compile
def test_cli_writes_markdown_summary_and_annotations(cli_run):
    code, out, err, report, summary = cli_run
    assert code == ExitCode.CHECK_FAILED, out + err
    assert "Markdown report: " in out
    marker, md = report.read_text(encoding="utf-8").split("\n", 1)
    assert marker == MARKDOWN_MARKER  # the file's first line only: how a rerun knows it
    assert md.startswith("## cl_validate: ❌") and md.count("```mermaid") == 1
    assert summary.read_text(encoding="utf-8") == "previous step\n\n" + md
    (command,) = [ln for ln in out.splitlines() if ln.startswith("::")]
    assert command.startswith("::error file=we%2Cird%3Adir/over_budget.toml,line=")


def test_cli_refuses_a_markdown_path_that_is_a_folder(tmp_path, capsys):
    case = tmp_path / "c.toml"
    case.write_text(CASE, encoding="utf-8")
    code = main(["run", str(case), "--markdown", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE_ERROR
    assert err.count("\n") == 1 and "--markdown" in err and "is a folder" in err
