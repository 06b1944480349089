"""The report of ``cl-validate run`` is this run's, on every way the run can end, and a report
path never costs a file that is not a report.

Interrupts, a killed parent, a closed or full stdout and a report that cannot be written all
run the real CLI in a process of its own. A full disk is simulated with the file-size limit
(``RLIMIT_FSIZE``, with ``SIGXFSZ`` ignored): every write past it fails with ``EFBIG``, as a
write to a full disk fails with ``ENOSPC`` — an OS error at the report's write, not a mock.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
import xmlschema

from cl_validate.errors import ExitCode
from cl_validate.paths import MARKDOWN_MARKER
from tests.conftest import DATA, TOKEN_ENV, left_behind, run_cli, tiny_case

SCHEMA = DATA / "junit-cl_validate.xsd"
UNFINISHED = "not finished when this report was written"
#: A report an earlier run left: a case this run does not have, passed.
OLD_REPORT = ('<?xml version="1.0"?>\n<testsuites name="cl_validate"><testsuite '
              'name="cl_validate.llvm" tests="1" failures="0" errors="0"><testcase '
              'classname="old_case" name="compile[llvm]"/></testsuite></testsuites>\n')


def _suite(root: Path, cases: dict[str, str]) -> Path:
    """A case folder: case name → model (tests/data's tiny and hostile models)."""
    d = root / "cases"
    d.mkdir()
    for f in ("tiny_models.py", "hostile_models.py"):
        shutil.copy(DATA / f, d / f)
    for name, model in cases.items():
        budget = 1 if name.startswith("over") else 2  # the tiny case needs 2
        (d / f"{name}.toml").write_text(tiny_case(budget, model=model))
    return d


def _start(args: list[str], token: str = "", **kw: object) -> subprocess.Popen[str]:
    """The CLI in a process of its own; `token` marks it and all it starts (`left_behind`)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", TOKEN_ENV: token or uuid.uuid4().hex}
    return subprocess.Popen([sys.executable, "-m", "cl_validate", *args], text=True,
                            env=env, **kw)  # type: ignore[call-overload]


def _until(proc: subprocess.Popen[str], fragment: str) -> None:
    """Read stdout until a line holds `fragment` (a case has finished)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if fragment in line or time.monotonic() > deadline:
            return


def _messages(junit: Path) -> dict[str, set[str]]:
    """Case name → the result messages of its testcases ("" for a pass)."""
    out: dict[str, set[str]] = {}
    for tc in ET.parse(junit).getroot().iter("testcase"):
        found = [r for r in tc if r.tag in ("failure", "error", "skipped")]
        out.setdefault(tc.get("classname", ""), set()).add(
            found[0].get("message", "") if found else "")
    return out


def _no_temporaries(folder: Path) -> None:
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def _fsize_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


# --------------------------------------------------------------------------------------------
# Every exit path leaves this run's report
# --------------------------------------------------------------------------------------------
@pytest.mark.compile
def test_two_interrupts_50ms_apart_still_leave_a_complete_report(tmp_path: Path) -> None:
    """The second Ctrl-C lands while the workers are ended and the report is written: it
    waits, and the report is complete, the unfinished case marked not run."""
    cases = _suite(tmp_path, {"a_fine": "tiny_models:conv_relu", "b_hang": "hostile_models:hang"})
    junit = tmp_path / "reports" / "r.xml"
    token = uuid.uuid4().hex
    proc = _start(["run", str(cases), "-j", "1", "--junit", str(junit)], token,
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _until(proc, "a_fine")
    time.sleep(1)  # b_hang is running
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED, err
    assert "Traceback" not in err and "interrupted (SIGINT)" in err
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(junit))
    messages = _messages(junit)
    assert set(messages) == {"a_fine", "b_hang"}
    assert not any(m.startswith("not run") for m in messages["a_fine"])
    assert messages["b_hang"] == {"not run: run interrupted (SIGINT)"}
    _no_temporaries(junit.parent)
    time.sleep(0.5)
    assert left_behind(token) == []  # the hanging worker was ended all the same


@pytest.mark.compile
def test_a_killed_run_leaves_its_own_report_not_an_earlier_one(tmp_path: Path) -> None:
    """SIGKILL cannot be caught: what lies at --junit is this run's report as of its last
    finished case (written as results arrive), the rest marked not finished; the earlier
    run's report is gone."""
    cases = _suite(tmp_path, {"a_fine": "tiny_models:conv_relu", "b_hang": "hostile_models:hang"})
    junit = tmp_path / "r.xml"
    junit.write_text(OLD_REPORT)
    proc = _start(["run", str(cases), "--no-isolation", "--junit", str(junit)],
                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    _until(proc, "a_fine")
    time.sleep(1)  # b_hang hangs in this very process (--no-isolation): nothing left behind
    proc.kill()
    proc.communicate(timeout=30)
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(junit))
    messages = _messages(junit)
    assert set(messages) == {"a_fine", "b_hang"}  # old_case is not this run's
    assert UNFINISHED not in messages["a_fine"]
    assert messages["b_hang"] == {UNFINISHED}
    _no_temporaries(tmp_path)


@pytest.mark.compile
@pytest.mark.parametrize("stdout", ["closed", "full"])
def test_a_closed_or_full_stdout_costs_neither_the_report_nor_the_verdict(
        tmp_path: Path, stdout: str) -> None:
    """``cl-validate run … | head -1``, or stdout on a full disk (/dev/full): the report is
    written and the exit code is the verdict's (1: over budget)."""
    cases = _suite(tmp_path, {"over": "tiny_models:conv_relu"})
    junit = tmp_path / "r.xml"
    args = ["run", str(cases), "-j", "1", "--junit", str(junit)]
    if stdout == "closed":
        proc = _start(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("[1/1] FAIL  over")  # what head -1 reads
        proc.stdout.close()
        assert proc.stderr is not None
        err = proc.stderr.read()
        proc.wait(timeout=120)
    else:
        with open("/dev/full", "w") as full:
            proc = _start(args, stdout=full, stderr=subprocess.PIPE)
            _, err = proc.communicate(timeout=120)
        assert "standard output failed (No space left on device)" in err
    assert proc.returncode == ExitCode.CHECK_FAILED, err
    assert "Traceback" not in err
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(junit))
    assert "layout_transforms 2 > budget 1 (llvm)" in " ".join(_messages(junit)["over"])


@pytest.mark.compile
@pytest.mark.parametrize(("case", "code"), [("fine", ExitCode.REPORT_NOT_WRITTEN),
                                            ("over", ExitCode.CHECK_FAILED)])
def test_a_report_that_cannot_be_written_is_one_line_and_the_exit_code_keeps_the_verdict(
        tmp_path: Path, case: str, code: ExitCode) -> None:
    cases = _suite(tmp_path, {case: "tiny_models:conv_relu"})
    junit = tmp_path / "r.xml"
    junit.write_text(OLD_REPORT)  # must not stay, looking like this run's
    proc = subprocess.run([sys.executable, "-m", "cl_validate", "run", str(cases), "-j", "1",
                           "--junit", str(junit)], capture_output=True, text=True,
                          timeout=300, preexec_fn=_fsize_limit(2000))
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("cl-validate: error:")]
    assert errors == [f"cl-validate: error: {junit}: cannot write the JUnit report: File too "
                      "large (hint: free some space or choose another path; the verdict "
                      "stands)"]
    assert not junit.exists()
    _no_temporaries(tmp_path)


def test_merge_that_cannot_write_its_output_is_one_line_exit_4(tmp_path: Path) -> None:
    shard = tmp_path / "shard.xml"
    shard.write_text('<testsuites><testsuite name="s" tests="1" failures="0" errors="0">'
                     + "".join(f'<testcase classname="c" name="t{i}" time="1"/>'
                               for i in range(100))
                     + "</testsuite></testsuites>")
    out = tmp_path / "out.xml"
    proc = subprocess.run([sys.executable, "-m", "cl_validate", "merge", str(shard), "-o",
                           str(out)], capture_output=True, text=True, timeout=60,
                          preexec_fn=_fsize_limit(1000))
    assert proc.returncode == ExitCode.REPORT_NOT_WRITTEN, proc.stderr
    assert proc.stderr == (f"cl-validate: error: {out}: cannot write the merged report: File "
                           "too large (hint: free some space or choose another path; the "
                           "verdict stands)\n")
    assert not out.exists()
    _no_temporaries(tmp_path)


def test_a_run_that_never_starts_leaves_no_earlier_report(tmp_path: Path) -> None:
    """A case-file error (exit 2): no report, and not an earlier run's either — a publisher
    would show it as this run's."""
    bad = tmp_path / "bad.toml"
    bad.write_text(tiny_case() + "\n[layuot]\n")
    junit, md = tmp_path / "r.xml", tmp_path / "r.md"
    junit.write_text(OLD_REPORT)
    md.write_text(f"{MARKDOWN_MARKER}\n## cl_validate: ✅ all 3 case × target runs passed\n")
    code, out, err = run_cli(["run", str(bad), "--junit", str(junit), "--markdown", str(md)])
    assert code == ExitCode.USAGE_ERROR and out == "" and "unknown key 'layuot'" in err
    assert not junit.exists() and not md.exists()


# --------------------------------------------------------------------------------------------
# Report paths: never a file that is not a report, never one file twice
# --------------------------------------------------------------------------------------------
@pytest.fixture
def case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return _suite(tmp_path, {"fine": "tiny_models:conv_relu"}) / "fine.toml"


def _refused(argv: list[str], says: str) -> None:
    code, out, err = run_cli(argv)
    assert code == ExitCode.USAGE_ERROR, out + err
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err  # nothing ran
    assert says in err, err


@pytest.mark.parametrize("option", ["--junit", "--markdown"])
def test_a_report_path_naming_a_case_file_is_refused_before_anything_runs(
        case: Path, option: str) -> None:
    before = case.read_bytes()
    kind = "JUnit" if option == "--junit" else "Markdown"
    _refused(["run", str(case), option, str(case)],
             f"cl-validate: error: {option} {case}: refusing to replace a file that is not a "
             f"{kind} report (hint: choose another report path")
    assert case.read_bytes() == before


def test_ledger_and_merge_refuse_to_replace_what_is_not_their_report(
        case: Path, tmp_path: Path) -> None:
    notes = tmp_path / "NOTES.md"
    notes.write_text("# my notes\n")
    _refused(["ledger", str(case), "--markdown", str(notes)],
             "--markdown " + str(notes) + ": refusing to replace a file that is not a Markdown "
             "report")
    shard = tmp_path / "s.xml"
    shard.write_text(OLD_REPORT)
    _refused(["merge", str(shard), "-o", str(case)], "refusing to replace a file that is not "
             "a JUnit report")
    assert notes.read_text() == "# my notes\n"


def test_a_fifo_or_device_as_report_path_is_refused(case: Path, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.xml")
    _refused(["run", str(case), "--junit", str(tmp_path / "pipe.xml")],
             "is a FIFO (named pipe), not a report file")
    os.symlink("/dev/null", tmp_path / "null.xml")  # root would replace /dev/null itself
    _refused(["run", str(case), "--junit", str(tmp_path / "null.xml")],
             "is a character device, not a report file")


@pytest.mark.parametrize("spelling", ["same", "dotted", "link"])
def test_one_file_named_twice_is_refused(case: Path, tmp_path: Path, spelling: str) -> None:
    junit = tmp_path / "out" / "r.xml"
    other = {"same": junit, "dotted": tmp_path / "out" / ".." / "out" / "r.xml",
             "link": tmp_path / "link.md"}[spelling]
    if spelling == "link":
        (tmp_path / "out").mkdir()
        os.symlink(junit, other)  # to a report not written yet
    _refused(["run", str(case), "--junit", str(junit), "--markdown", str(other)],
             f"--markdown {other} is the same file as --junit {junit} (hint: give each "
             "report a file of its own)")


def test_merge_refuses_an_output_that_is_an_input_through_a_link(tmp_path: Path) -> None:
    shard = tmp_path / "s.xml"
    shard.write_text(OLD_REPORT)
    os.symlink(shard, tmp_path / "link.xml")
    _refused(["merge", str(shard), "-o", str(tmp_path / "link.xml")],
             "is also one of the reports to merge")
    assert shard.read_text() == OLD_REPORT


def test_reports_of_ours_and_empty_files_are_replaced(case: Path, tmp_path: Path) -> None:
    """An earlier report (JUnit; Markdown with the marker, or from before the marker) and an
    empty file are what a report path may replace. An empty shard writes both without
    compiling anything."""
    for old_junit, old_md in ((OLD_REPORT, f"{MARKDOWN_MARKER}\n## cl_validate: old\n"),
                              (OLD_REPORT, "## cl_validate: ✅ old\n"), ("", "")):
        junit, md = tmp_path / "r.xml", tmp_path / "r.md"
        junit.write_text(old_junit)
        md.write_text(old_md)
        code, out, err = run_cli(["run", str(case), "--shard", "2/2", "--junit", str(junit),
                                  "--markdown", str(md)])
        assert code == ExitCode.OK, out + err
        assert "old_case" not in junit.read_text()
        assert md.read_text().startswith(f"{MARKDOWN_MARKER}\n## cl_validate: ")
        assert "old" not in md.read_text()
