"""Numerics on a remote device, for real: TVM's own RPC tracker and two device servers,
started on 127.0.0.1 by this module (``python -m tvm.exec.rpc_tracker`` / ``rpc_server``, each
in a process group of its own, ended in the fixture's finalizer). The compiled llvm module is
exported, uploaded, loaded and run on a server the tracker hands out, and compared with
PyTorch; a server stopped while it runs a case makes that case's numerics an error and
nothing else.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from junitparser import Error, JUnitXml
from tvm import rpc

from cl_validate.checks.registry import names
from cl_validate.errors import ExitCode
from tests.conftest import PARENT, TOKEN_ENV, by_case, left_behind, run_cli, tiny_case

CHECKS = names()

pytest.importorskip("tornado", reason="TVM's RPC tracker needs tornado: pip install "
                    "'apache-tvm[rpc]' (the `test` extra installs it)")
pytest.importorskip("cloudpickle", reason="TVM's RPC server needs cloudpickle: pip install "
                    "'apache-tvm[rpc]' (the `test` extra installs it)")

pytestmark = pytest.mark.compile
DATA = Path(__file__).parent / "data"
KEY = "cl-test-x86"
SERVERS = 2
_START_S = 120.0  # a tracker or server imports TVM first: seconds on a busy 2-core machine
_GONE_S = 10.0  # for a SIGKILLed process group to finish exiting


@dataclass
class Farm:
    """A tracker on 127.0.0.1 and device servers registered under `KEY`."""

    port: int
    servers: list[subprocess.Popen[bytes]]
    die_marker: Path  # while it exists, the next server to load a module dies


    @property
    def tracker(self) -> str:
        return f"127.0.0.1:{self.port}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(command: list[str], args: list[str], log: Path,
           env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A tracker or server in a process group of its own (all it forks stays in it), one
    thread for the programs it runs (slow and polite on a shared machine)."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, *command, "--host", "127.0.0.1", *args],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, "TVM_NUM_THREADS": "1", **(env or {})})


def _group(pgid: int) -> list[int]:
    """The live processes of a process group (a server forks one per session)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rfind(")") + 2:].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                out.append(int(pid))
    return out


def _registered(port: int) -> int:
    tracker = rpc.connect_tracker("127.0.0.1", port)
    try:
        info = tracker.summary()["server_info"]
    finally:
        tracker.close()
    return sum(1 for s in info if s["key"] == f"server:{KEY}")


@pytest.fixture(scope="module")
def farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Farm]:
    root = tmp_path_factory.mktemp("rpc")
    log, marker = root / "farm.log", root / "die"
    started: list[subprocess.Popen[bytes]] = []
    try:
        port = _free_port()
        started.append(_start(["-m", "tvm.exec.rpc_tracker"], ["--port", str(port), "--port-end",
                                              str(port + 1), "--silent"], log))
        deadline = time.monotonic() + _START_S
        while True:  # the tracker listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert started[0].poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        for _ in range(SERVERS):
            sport = _free_port()
            started.append(_start([str(DATA / "dying_rpc_server.py")], [
                "--port", str(sport), "--port-end", str(sport + 1), "--tracker",
                f"127.0.0.1:{port}", "--key", KEY, "--silent"], log,
                {"CL_TEST_DIE_MARKER": str(marker)}))
        while _registered(port) < SERVERS:
            assert all(p.poll() is None for p in started), log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield Farm(port, started[1:], marker)
    finally:
        for p in started:
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
        # SIGKILL is delivered, not done: a server's session child, orphaned by the same
        # signal, may still be exiting for a moment (seen on CI), so each group gets a few
        # seconds to empty; one still alive after that is a real leak
        deadline = time.monotonic() + _GONE_S
        for p in started:
            while _group(p.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _group(p.pid) == [], f"left running: {_group(p.pid)}"


def _cases(root: Path, cases: dict[str, tuple[str, list[int]]]) -> Path:
    folder = root / "cases"
    folder.mkdir()
    shutil.copy(DATA / "tiny_models.py", folder)
    for name, (model, shape) in cases.items():
        text = tiny_case(model=model).replace("[1, 3, 16, 16]", str(shape))
        (folder / f"{name}.toml").write_text(text)
    return folder


def test_numerics_run_remotely_and_a_server_dying_mid_run_errors_only_its_case(farm, tmp_path):
    """Three cases, one worker, llvm's numerics sent to the farm by key: the first passes on
    a server; the server that loads the second's module dies right then (the farm's fault,
    armed once the first case has its verdict); the third passes on the other server. The
    report is complete, the parent never loaded TVM, and nothing of the run is left."""
    folder = _cases(tmp_path, {"a_fast": ("tiny_models:conv_relu", [1, 3, 16, 16]),
                               "b_dies": ("tiny_models:conv_relu", [1, 3, 16, 16]),
                               "c_fast": ("tiny_models:conv_relu", [1, 3, 16, 16])})
    junit = tmp_path / "r.xml"
    token = uuid.uuid4().hex
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT, "run", str(folder), "-j", "1", "--rpc-tracker",
         farm.tracker, "--rpc-key", f"llvm={KEY}", "--junit", str(junit)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, TOKEN_ENV: token, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    out = []
    try:
        for line in proc.stdout:  # a_fast has its verdict: the next module loaded is b_dies's
            out.append(line)
            if "a_fast" in line and line.startswith("[1/3]"):
                farm.die_marker.touch()
                break
        rest, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = "".join(out) + rest
    assert not farm.die_marker.exists(), f"no server loaded b_dies's module:\n{text}"
    assert sum(s.poll() is not None for s in farm.servers) == 1, text
    assert proc.returncode == ExitCode.CHECK_FAILED, text
    assert "PARENT-MODULES []" in text and "Traceback" not in text
    time.sleep(0.5)
    assert left_behind(token) == []

    cases = by_case(JUnitXml.fromfile(str(junit)))
    assert sorted(cases) == ["a_fast", "b_dies", "c_fast"]
    assert all(set(checks) == set(CHECKS) for checks in cases.values())  # a complete report
    where = f"ran on RPC key '{KEY}' at {farm.tracker}"
    for name in ("a_fast", "c_fast"):
        assert not any(tc.is_failure or tc.is_error for tc in cases[name].values()), name
        assert not cases[name]["numerics"].result, name  # passed
        assert cases[name]["numerics"].system_out.startswith(where), name
    (error,) = cases["b_dies"]["numerics"].result
    assert isinstance(error, Error) and error.type == "RPCError", error.message
    assert error.message.startswith(f"running on RPC key '{KEY}' at {farm.tracker} failed: ")
    assert error.message.endswith("(llvm)")
    for check, tc in cases["b_dies"].items():  # its static checks stand
        if check in ("compile", "layout", "layout_transforms"):
            assert not tc.result, check  # passed


def test_a_declared_board_runs_through_the_tracker_tvms_variables_name(farm, tmp_path,
                                                                       monkeypatch):
    """TVM's convention, in process: TVM_TRACKER_HOST/PORT name the tracker, the target's
    declaration its key; a key no server has is that case's error at once, not a wait."""
    folder = _cases(tmp_path, {"board": ("tiny_models:conv_relu", [1, 3, 16, 16])})
    (tmp_path / "pyproject.toml").write_text(
        "[tool.cl_validate.targets.board]\ntarget = { kind = \"llvm\" }\n"
        f"rpc_key = \"{KEY}\"\n\n[tool.cl_validate.targets.gone]\n"
        "target = { kind = \"llvm\" }\nrpc_key = \"no-such-board\"\n")
    (folder / "board.toml").write_text(tiny_case(targets=("board", "gone")))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TVM_TRACKER_HOST", "127.0.0.1")
    monkeypatch.setenv("TVM_TRACKER_PORT", str(farm.port))
    junit = tmp_path / "r.xml"
    t0 = time.monotonic()
    code, out = run_cli(["run", str(folder), "--no-isolation", "--junit", str(junit)]).both()
    assert code == ExitCode.CHECK_FAILED, out
    assert time.monotonic() - t0 < 120
    tests = {tc.name: tc for s in JUnitXml.fromfile(str(junit)) for tc in s}
    assert not tests["numerics[board]"].result
    assert tests["numerics[board]"].system_out.startswith(
        f"ran on RPC key '{KEY}' at 127.0.0.1:{farm.port}")
    (error,) = tests["numerics[gone]"].result
    assert error.type == "RPCUnavailable" and error.message == (
        f"no RPC server is registered under key 'no-such-board' at tracker "
        f"127.0.0.1:{farm.port} (gone)")
    assert KEY in error.text  # which keys the tracker does have
