"""A model can break its own case, never another's, the cache or the parent (issue #23).

Each hostile factory (tests/data/hostile_state.py) runs through the real CLI in a process of
its own, next to innocent cases; the report must hold every case once, the innocent ones
exactly as a clean run measures them, the parent must never run a byte the models sent, and
nothing the run started may be left when it ends — also when the parent is killed with -9.
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
from junitparser import JUnitXml

from cl_validate.errors import ExitCode
from cl_validate.session import sandbox
from tests.conftest import (
    TOKEN_ENV,
    by_case,
    case_error,
    left_behind,
    passed,
    run_parent,
    tiny_case,
)

pytestmark = pytest.mark.compile
DATA = Path(__file__).parent / "data"
SCHEMA = DATA / "junit-cl_validate.xsd"


def _folder(root: Path, cases: dict[str, tuple[str, str]]) -> Path:
    d = root / "cases"
    d.mkdir(exist_ok=True)
    for f in ("tiny_models.py", "hostile_state.py"):
        shutil.copy(DATA / f, d / f)
    for name, (model, extra) in cases.items():
        (d / f"{name}.toml").write_text(tiny_case(model=model, extra=extra))
    return d


def _kernel_list(checks: dict[str, object]) -> str:
    """The kernel list in the layout_transforms verdict's body (system-out of a pass)."""
    tc = checks["layout_transforms"]
    return tc.system_out or ""  # type: ignore[attr-defined]


HOSTILE = {
    "a_patches_conv": ("hostile_state:patches_conv", ""),
    "b_closes_stdout": ("hostile_state:closes_stdout", ""),
    "c_breaks_tvm": ("hostile_state:breaks_tvm", ""),
    "d_pickle": ("hostile_state:writes_a_pickle", ""),
    "e_garbage": ("hostile_state:writes_garbage", ""),
    "f_silent": ("hostile_state:promises_and_goes_silent", "timeout = 20"),
    "g_sigterm": ("hostile_state:sends_sigterm", ""),
    "h_sigint": ("hostile_state:sends_sigint", ""),
    "i_sighup": ("hostile_state:sends_sighup", ""),
    "j_child_sigterm": ("hostile_state:child_sends_sigterm", ""),
    "k_detached": ("hostile_state:detaches_with_a_clean_environment", ""),
    "l_swaps_its_log": ("hostile_state:swaps_its_log", ""),
}
#: after each hostile case (in file order, one at a time) an innocent one runs
INNOCENT = {f"{name}_next": ("tiny_models:conv_relu", "") for name in HOSTILE}


@pytest.fixture(scope="module")
def attacked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("attacked")
    folder = _folder(root, {**HOSTILE, **INNOCENT})
    (root / "clean").mkdir()
    clean = _folder(root / "clean", {"clean": ("tiny_models:conv_relu", "")})
    marker = root / "fooled"
    detached = f"cl-validate-test-detached-{uuid.uuid4().hex}"
    token = uuid.uuid4().hex
    junit, cache = root / "r.xml", root / "cache"
    proc = run_parent(["run", str(folder), "-j", "1", "--junit", str(junit), "--cache-dir",
                 str(cache)], {TOKEN_ENV: token, "CL_VALIDATE_TEST_MARKER": str(marker),
                               "CL_VALIDATE_TEST_DETACHED": detached})
    time.sleep(0.5)
    detached_left = [p for p in _pids_with(detached)]
    reference = run_parent(["run", str(clean), "--junit", str(root / "clean.xml"), "--no-cache"])
    return {"proc": proc, "junit": junit, "marker": marker, "left": left_behind(token),
            "detached": detached_left, "cache": cache, "folder": folder,
            "clean": by_case(JUnitXml.fromfile(str(root / "clean.xml")))["clean"],
            "reference": reference}


def _pids_with(text: str) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmd:
                out.append(int(pid))
    return out


def test_the_run_goes_on_and_every_case_is_reported_once(attacked):
    proc = attacked["proc"]
    assert proc.returncode == ExitCode.CHECK_FAILED, proc.stdout[-3000:] + proc.stderr
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(attacked["junit"]))
    cases = by_case(JUnitXml.fromfile(str(attacked["junit"])))
    assert set(cases) == set(HOSTILE) | set(INNOCENT)
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "leaked semaphore" not in proc.stderr and "resource_tracker" not in proc.stderr
    assert "PARENT-MODULES []" in proc.stdout


def test_no_case_changes_the_next_ones_measurement(attacked):
    """Every innocent case, run right after a hostile one, measures as in a clean run: the
    same verdicts and the same kernel list (no SiLU from a patched conv)."""
    cases = by_case(JUnitXml.fromfile(str(attacked["junit"])))
    clean = _kernel_list(attacked["clean"])
    assert "fused_conv2d_add_relu" in clean and "sigmoid" not in clean
    for name in INNOCENT:
        assert passed(cases[name]), name
        assert _kernel_list(cases[name]) == clean, name


def test_state_a_case_changes_stays_in_its_own_case(attacked):
    cases = by_case(JUnitXml.fromfile(str(attacked["junit"])))
    # its own measurement sees its own patch: a SiLU fused into its conv kernels
    assert "sigmoid" in _kernel_list(cases["a_patches_conv"])
    error = case_error(cases["c_breaks_tvm"])
    assert error.type == "CompileError" and "failed: TypeError" in error.message


def test_the_parent_runs_nothing_a_case_sends(attacked):
    cases = by_case(JUnitXml.fromfile(str(attacked["junit"])))
    assert not Path(attacked["marker"]).exists()  # the planted pickle never ran
    for name in ("d_pickle", "e_garbage"):
        error = case_error(cases[name])
        assert error.type == "CorruptResult", (name, error.message)
        assert "not a result" in error.message
    silent = case_error(cases["f_silent"])
    assert silent.type == "Timeout" and "20 s" in silent.message
    # its output is read through the parent's own descriptor, not by a name it can swap
    swapped = case_error(cases["l_swaps_its_log"])
    assert swapped.type == "WorkerCrashed", swapped.message
    assert "last words before the swap" in (swapped.text or "")


def test_a_signal_to_the_parent_is_the_senders_error(attacked):
    """Where the kernel scopes signals (`sandbox`), the model's signal is refused in its own
    process: its case's error, naming the call. A process it started gets the same refusal
    (its own error, which the model here ignores): nothing outside the case sees either."""
    cases = by_case(JUnitXml.fromfile(str(attacked["junit"])))
    if not sandbox.available():
        pytest.skip("cases are not confined here: see test_the_parents_own_defence")
    for name in ("g_sigterm", "h_sigint", "i_sighup"):
        error = case_error(cases[name])
        assert error.type == "SignalledRun", (name, error.message)
        assert "tried to signal a process outside its case (os.kill(" in error.message
        assert "hostile_state.py:" in error.message and "refused" in error.message
    assert passed(cases["j_child_sigterm"])
    assert "interrupted" not in attacked["proc"].stderr


SIGNALLING = {"g_sigterm": ("hostile_state:sends_sigterm", ""),
              "h_sigint": ("hostile_state:sends_sigint", ""),
              "i_sighup": ("hostile_state:sends_sighup", ""),
              "j_child_sigterm": ("hostile_state:child_sends_sigterm", ""),
              "k_kills_the_zygote": ("hostile_state:kills_the_zygote", ""),
              "l_innocent": ("tiny_models:conv_relu", "")}


def test_the_parents_own_defence(tmp_path):
    """Unconfined (an older kernel, or ``CL_VALIDATE_UNCONFINED``), a signal reaches the
    parent, which tells it from an interrupt by its sender: that case's error, the run goes
    on; a case that kills the zygote costs no other case (a new zygote starts the rest)."""
    folder = _folder(tmp_path, SIGNALLING)
    junit = tmp_path / "r.xml"
    token = uuid.uuid4().hex
    proc = run_parent(["run", str(folder), "-j", "1", "--junit", str(junit), "--no-cache"],
                {TOKEN_ENV: token, sandbox.UNCONFINED_ENV: "1"})
    assert proc.returncode == ExitCode.CHECK_FAILED, proc.stdout[-3000:] + proc.stderr
    cases = by_case(JUnitXml.fromfile(str(junit)))
    assert set(cases) == set(SIGNALLING)
    for name, sig in (("g_sigterm", "SIGTERM"), ("h_sigint", "SIGINT"),
                      ("i_sighup", "SIGHUP"), ("j_child_sigterm", "SIGTERM")):
        error = case_error(cases[name])
        assert error.type == "SignalledRun", (name, error.message)
        assert f"sent {sig} to the cl-validate process" in error.message
    assert passed(cases["l_innocent"]), proc.stdout
    assert "interrupted" not in proc.stderr
    time.sleep(0.5)
    assert left_behind(token) == []


WALLED = {"a_sigkill": ("hostile_state:sends_sigkill", ""),
          "b_sigstop": ("hostile_state:sends_sigstop", ""),
          "c_child_signals_and_exits": ("hostile_state:child_signals_and_exits", ""),
          "d_console": ("hostile_state:writes_to_the_parents_stdout", ""),
          "e_attacker": ("hostile_state:attacks_other_cases", ""),
          "f_victim": ("hostile_state:victim", ""),
          "g_innocent": ("tiny_models:conv_relu", "")}


@pytest.mark.skipif(not sandbox.available(), reason="cases are not confined here (Landlock "
                    "ABI < 6, or CL_VALIDATE_UNCONFINED set): these would take the run down")
def test_the_kernel_keeps_a_case_inside(tmp_path):
    """What the parent alone cannot defend: SIGKILL and SIGSTOP to it, a sender gone before
    it looks, the run's console reopened through /proc, another case killed, the zygote
    stopped. Each is refused in the culprit's own process; every other case passes."""
    folder = _folder(tmp_path, WALLED)
    junit = tmp_path / "r.xml"
    token = uuid.uuid4().hex
    proc = run_parent(["run", str(folder), "-j", "2", "--junit", str(junit), "--no-cache"],
                {TOKEN_ENV: token}, timeout=400)
    assert proc.returncode == ExitCode.CHECK_FAILED, proc.stdout[-3000:] + proc.stderr
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(junit))
    cases = by_case(JUnitXml.fromfile(str(junit)))
    assert set(cases) == set(WALLED)
    for name in ("a_sigkill", "b_sigstop"):
        error = case_error(cases[name])
        assert error.type == "SignalledRun", (name, error.message)
    console = case_error(cases["d_console"])  # the parent's fd opened through /proc to write
    assert console.type == "ReachedOut" and "/proc/" in console.message, console.message
    assert "planted" not in proc.stdout + proc.stderr
    for name in ("c_child_signals_and_exits", "e_attacker", "f_victim", "g_innocent"):
        assert passed(cases[name]), (name, proc.stdout[-3000:])
    assert "interrupted" not in proc.stderr
    time.sleep(0.5)
    assert left_behind(token) == []


def test_nothing_the_run_started_is_left(attacked):
    assert attacked["left"] == []
    assert attacked["detached"] == []  # double-forked, own session, empty environment


def test_the_cache_holds_only_clean_measurements(attacked):
    """The innocent case, answered from the cache the attacked run filled, is the clean
    measurement (no model is built: the direct key)."""
    folder = attacked["folder"]
    only = folder.parent / "again"
    only.mkdir()
    for f in ("tiny_models.py",):
        shutil.copy(folder / f, only / f)
    shutil.copy(folder / "a_patches_conv_next.toml", only / "a_patches_conv_next.toml")
    junit = only / "r.xml"
    proc = run_parent(["run", str(only), "--junit", str(junit), "--cache-dir",
                 str(attacked["cache"])])
    assert proc.returncode == ExitCode.OK, proc.stdout + proc.stderr
    cases = by_case(JUnitXml.fromfile(str(junit)))
    assert _kernel_list(cases["a_patches_conv_next"]) == _kernel_list(attacked["clean"])


def test_a_case_that_kills_the_zygote_costs_no_other_case(tmp_path):
    """Unconfined, so that the zygote does die (confined, the kill is refused)."""
    cases = {"a_killer": ("hostile_state:kills_the_zygote", "")}
    cases |= {f"b_fine{i}": ("tiny_models:conv_relu", "") for i in range(4)}
    folder = _folder(tmp_path, cases)
    junit = tmp_path / "r.xml"
    token = uuid.uuid4().hex
    proc = run_parent(["run", str(folder), "-j", "2", "--junit", str(junit), "--no-cache"],
                {TOKEN_ENV: token, sandbox.UNCONFINED_ENV: "1"})
    got = by_case(JUnitXml.fromfile(str(junit)))
    assert set(got) == set(cases), proc.stdout + proc.stderr
    for i in range(4):
        assert passed(got[f"b_fine{i}"]), proc.stdout
    time.sleep(0.5)
    assert left_behind(token) == []


def test_kill_9_of_the_parent_ends_every_process_of_the_run(tmp_path):
    """…and leaves nothing of the run's in the temporary folder (its logs have no name)."""
    folder = _folder(tmp_path, {"a_sleeps": ("hostile_state:sleeps", ""),
                                "b_sleeps": ("hostile_state:sleeps", "")})
    token = uuid.uuid4().hex
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "cl_validate", "run", str(folder), "-j",
                             "2", "--no-cache"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            env={**os.environ, TOKEN_ENV: token, "TMPDIR": str(temporary)})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # both cases in their factories
        procs = left_behind(token)
        if len(procs) >= 4:  # the parent, the zygote, two case processes
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail(f"the cases never started: {left_behind(token)}")
    time.sleep(1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 15
    while left_behind(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left_behind(token) == []
    # torch may keep its own cache there (torchinductor_*); nothing of the run's is left
    assert [p.name for p in temporary.iterdir() if p.name.startswith("cl_validate")] == []


def test_a_warm_run_of_an_unchanged_case_builds_no_model(tmp_path):
    """The direct key: an unchanged case is judged from the cache without running any of its
    code; a change to a file its factory read is seen, and measured again."""
    folder = _folder(tmp_path, {"counted": ("hostile_state:counts_builds", "")})
    (folder / "scale.txt").write_text("1.0\n")
    env = {"CL_VALIDATE_TEST_DIR": str(folder)}
    cache = tmp_path / "cache"
    args = ["run", str(folder), "--cache-dir", str(cache)]
    builds = folder / "builds.txt"
    first = run_parent(args, env)
    assert first.returncode == ExitCode.OK, first.stdout + first.stderr
    assert builds.read_text().count("built") == 1
    warm = run_parent(args, env)
    assert warm.returncode == ExitCode.OK, warm.stdout + warm.stderr
    assert "cache: 1 of 1" in warm.stdout
    assert builds.read_text().count("built") == 1  # nothing of the model ran
    (folder / "scale.txt").write_text("1.5\n")  # a data file the factory reads
    changed = run_parent(args, env)
    assert changed.returncode == ExitCode.OK, changed.stdout + changed.stderr
    assert builds.read_text().count("built") == 2
    assert "cache:" not in changed.stdout
