"""A crash, a hang or a memory hog in one case costs that case, never the report."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from junitparser import Error, JUnitXml

from cl_validate.cli import main
from cl_validate.errors import ExitCode
from tests.conftest import tiny_case

pytestmark = pytest.mark.compile
DATA = Path(__file__).parent / "data"



def _suite(root: Path, cases: dict[str, tuple[str, str]]) -> Path:
    d = root / "cases"
    d.mkdir()
    for f in ("tiny_models.py", "hostile_models.py"):
        shutil.copy(DATA / f, d / f)
    for name, (model, extra) in cases.items():
        (d / f"{name}.toml").write_text(tiny_case(model=model, extra=extra))
    return d


def _errors(xml: JUnitXml) -> dict[str, Error]:
    return {tc.classname: r for suite in xml for tc in suite for r in tc.result
            if isinstance(r, Error) and tc.name == "numerics"}


def test_segfault_hang_and_memory_hog_become_errors_and_the_rest_still_runs(tmp_path):
    cases = _suite(tmp_path, {
        "a_crash": ("hostile_models:segfault", ""),
        "b_hang": ("hostile_models:hang", "timeout = 20"),
        "c_hog": ("hostile_models:memory_hog", "max_memory_mb = 1500"),
        "d_fine": ("tiny_models:conv_relu", ""),
    })
    junit = tmp_path / "r.xml"
    out = io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out):
        code = main(["run", str(cases), "-j", "2", "--junit", str(junit)])
    elapsed = time.monotonic() - t0
    assert code == ExitCode.CHECK_FAILED, out.getvalue()
    xml = JUnitXml.fromfile(str(junit))
    errors = _errors(xml)
    assert set(errors) == {"a_crash", "b_hang", "c_hog"}
    assert errors["a_crash"].type == "WorkerCrashed"
    assert "SIGSEGV" in errors["a_crash"].message
    assert "about to crash" in errors["a_crash"].text  # the tail of the worker's output
    assert errors["b_hang"].type == "Timeout" and "20 s" in errors["b_hang"].message
    assert errors["c_hog"].type == "OutOfMemory" and "1500 MB" in errors["c_hog"].message
    fine = [tc for suite in xml for tc in suite if tc.classname == "d_fine"]
    assert len(fine) == 5 and not any(tc.is_failure or tc.is_error for tc in fine)
    assert elapsed < 120


def test_sigterm_leaves_a_valid_report_with_unfinished_cases_marked_not_run(tmp_path):
    cases = _suite(tmp_path, {
        "a_fine": ("tiny_models:conv_relu", ""),
        "b_hang": ("hostile_models:hang", ""),
    })
    junit = tmp_path / "reports" / "r.xml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cl_validate", "run", str(cases), "-j", "1", "--junit",
         str(junit)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    deadline = time.monotonic() + 90
    for line in proc.stdout:  # wait until the first case has finished
        if "a_fine" in line or time.monotonic() > deadline:
            break
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED, err
    assert "interrupted (SIGTERM)" in err
    xml = JUnitXml.fromfile(str(junit))
    by_case = {}
    for suite in xml:
        for tc in suite:
            by_case.setdefault(tc.classname, []).append(tc)
    assert not any(tc.is_failure or tc.is_error for tc in by_case["a_fine"])
    assert not any("not run" in r.message for tc in by_case["a_fine"] for r in tc.result)
    assert all(tc.is_skipped and "not run" in tc.result[0].message for tc in by_case["b_hang"])
    assert not list(junit.parent.glob(".*.tmp"))  # no temporary file left behind
