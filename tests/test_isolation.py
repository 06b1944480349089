"""Nothing a model does can take the run down: every fault costs its case, never the report.

The faults run through the real CLI in a separate process (the parent of a real run), with the
good case beside them; the report must hold every case once, the parent must never have
loaded torch or TVM, and no process of the run may be left when it ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import xmlschema
from junitparser import Error, JUnitXml

from cl_validate.checks.registry import names
from cl_validate.checks.verdict import NOT_RUN_ERRORED
from cl_validate.errors import ExitCode
from tests.conftest import PARENT, TOKEN_ENV, by_case, left_behind, tiny_case

CHECKS = names()
COMPILE = CHECKS[0]  # the case's own check

pytestmark = pytest.mark.compile
DATA = Path(__file__).parent / "data"
SCHEMA = DATA / "junit-cl_validate.xsd"


def _suite(root: Path, cases: dict[str, tuple[str, str]]) -> Path:
    d = root / "cases"
    d.mkdir()
    for f in ("tiny_models.py", "hostile_models.py", "hostile_import_loop.py"):
        shutil.copy(DATA / f, d / f)
    for name, (model, extra) in cases.items():
        (d / f"{name}.toml").write_text(tiny_case(model=model, extra=extra))
    return d


def _run_parent(args: list[str], token: str, timeout: float = 300
                ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, TOKEN_ENV: token, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-c", PARENT, *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def _compile_error(checks: dict[str, object]) -> Error:
    """The one error of an errored case; its other checks say they did not run."""
    (error,) = checks[COMPILE].result  # type: ignore[attr-defined]
    assert isinstance(error, Error)
    assert set(checks) == set(CHECKS)
    for name, tc in checks.items():
        if name != COMPILE:
            (skip,) = tc.result  # type: ignore[attr-defined]
            assert skip.message == NOT_RUN_ERRORED
    return error


def _passed(checks: dict[str, object]) -> bool:
    return not any(tc.is_failure or tc.is_error for tc in checks.values())  # type: ignore


FAULTS = {
    "crash_factory": ("hostile_models:crash_in_factory", ""),
    "crash_forward": ("hostile_models:segfault", ""),
    "hang": ("hostile_models:hang", "timeout = 20"),
    "hog": ("hostile_models:memory_hog", "max_memory_mb = 1500"),
    "child_hog": ("hostile_models:forking_hog", "max_memory_mb = 1500\ntimeout = 60"),
    "sys_exit": ("hostile_models:exits", ""),
    "os_exit": ("hostile_models:hard_exit", ""),
    "import_loop": ("hostile_import_loop:net", "timeout = 15"),
    "garbage": ("hostile_models:garbage", ""),
    "garbage_crash": ("hostile_models:garbage_then_crash", ""),
    "flood": ("hostile_models:flood", "timeout = 120"),
    "orphan": ("hostile_models:leaves_a_child", ""),
    "orphan_of_dead": ("hostile_models:leaves_a_child_and_dies", ""),
    "zz_fine": ("tiny_models:conv_relu", ""),
}


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("faults")
    cases = _suite(root, FAULTS)
    junit = root / "r.xml"
    token = uuid.uuid4().hex
    t0 = time.monotonic()
    proc = _run_parent(["run", str(cases), "-j", "2", "--junit", str(junit)], token)
    elapsed = time.monotonic() - t0
    time.sleep(0.5)  # anything still dying gets a moment
    return {"proc": proc, "junit": junit, "left": left_behind(token), "elapsed": elapsed}


def test_every_fault_is_its_cases_error_and_the_report_is_complete(faults):
    proc = faults["proc"]
    assert proc.returncode == ExitCode.CHECK_FAILED, proc.stdout + proc.stderr
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(faults["junit"]))
    cases = by_case(JUnitXml.fromfile(str(faults["junit"])))
    assert set(cases) == set(FAULTS)  # every case exactly once (by name, each with its checks)
    assert _passed(cases["zz_fine"]) and _passed(cases["garbage"])
    assert faults["elapsed"] < 240

    def error(name: str) -> Error:
        return _compile_error(cases[name])

    assert error("crash_factory").type == "WorkerCrashed"
    assert "SIGSEGV" in error("crash_factory").message
    assert "building the model" in error("crash_factory").text  # the worker output's tail
    assert "about to crash" in error("crash_forward").text
    assert error("hang").type == "Timeout" and "20 s" in error("hang").message
    assert error("import_loop").type == "Timeout" and "15 s" in error("import_loop").message
    assert error("hog").type == "OutOfMemory" and "1500 MB" in error("hog").message
    assert error("child_hog").type == "OutOfMemory"
    assert "process(es) it started" in error("child_hog").message
    assert error("sys_exit").type == "ModelExited"
    assert "called sys.exit(3)" in error("sys_exit").message
    assert error("os_exit").type == "WorkerCrashed"
    assert "exited with status 7" in error("os_exit").message
    assert "leaving without a word" in error("os_exit").text
    assert error("garbage_crash").type == "WorkerCrashed"
    assert error("flood").type == "OutputFlood"
    assert error("orphan_of_dead").type == "WorkerCrashed"
    # A child left running is the case's error; the measurement itself stands.
    (stray,) = cases["orphan"][COMPILE].result  # type: ignore[attr-defined]
    assert stray.type == "StrayProcess" and "cl-validate-test-orphan" in stray.text
    assert _passed({k: v for k, v in cases["orphan"].items() if k != COMPILE})


def test_the_parent_never_loaded_torch_or_tvm_and_nothing_is_left_running(faults):
    proc = faults["proc"]
    assert "PARENT-MODULES []" in proc.stdout, proc.stdout[-2000:]
    assert faults["left"] == []


def test_no_traceback_and_no_injected_output_reaches_the_console(faults):
    proc = faults["proc"]
    both = proc.stdout + proc.stderr
    assert "Traceback" not in both
    assert "::error file=../evil.toml" not in both  # a model cannot annotate the pull request
    assert "\x1b[31m" not in both and "\x00" not in both
    summary = [ln for ln in proc.stdout.splitlines() if ln.startswith("ERROR ")]
    assert len(summary) == len(FAULTS) - 2  # one line per errored case × target


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


def test_peak_memory_is_each_cases_own_not_the_workers_high_water_mark(tmp_path):
    """One worker runs a case whose factory held 512 MB, then a plain one: the plain case's
    peak is its own, not the first case's left in the worker's high-water mark."""
    folder = _suite(tmp_path, {"a_ballast": ("tiny_models:ballast", ""),
                               "b_plain": ("tiny_models:conv_relu", "")})
    proc = _run_parent(["run", str(folder), "-j", "1", "--no-cache"], uuid.uuid4().hex)
    assert proc.returncode == ExitCode.OK, proc.stdout + proc.stderr
    peak = {}
    for line in proc.stdout.splitlines():
        cells = line.split()
        if cells and cells[0] in ("a_ballast", "b_plain") and len(cells) > 5:
            peak[cells[0]] = float(cells[-1])
    assert set(peak) == {"a_ballast", "b_plain"}, proc.stdout
    assert peak["a_ballast"] > 512, proc.stdout
    assert peak["b_plain"] < peak["a_ballast"] - 300, proc.stdout
