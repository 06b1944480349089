"""No process that forks case processes ever touches a device runtime.

A CUDA context does not survive ``fork()``: a zygote (or case process) that asked TVM
``Device.exist`` once breaks every process forked from it, and on a GPU machine every case
errors with ``cudaErrorInitializationError``. A CPU runner cannot see that failure, so this
test watches the cause: a spy (tests/data/device_spy/sitecustomize.py) notes every device query
of TVM's runtime with the pid that made it, during a real isolated run, and the test asserts
that only the device probe and the target processes (leaves that fork nothing) asked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from junitparser import JUnitXml

from cl_validate.errors import ExitCode
from tests.conftest import DATA, by_case, passed, run_parent, tiny_case

pytestmark = pytest.mark.compile
SPY = DATA / "device_spy"


def _processes(log: Path) -> tuple[dict[int, str], list[tuple[int, int, str]]]:
    """The spy's log: interpreters started (pid → command line) and queries (pid, ppid,
    what)."""
    started: dict[int, str] = {}
    queries: list[tuple[int, int, str]] = []
    for line in log.read_text().splitlines():
        kind, pid, ppid, rest = line.split(" ", 3)
        if kind == "start":
            started[int(pid)] = rest
        else:
            queries.append((int(pid), int(ppid), rest))
    return started, queries


def test_no_forking_process_asks_a_device(tmp_path):
    (tmp_path / "cases").mkdir()
    for name in ("a", "b"):
        (tmp_path / "cases" / f"{name}.toml").write_text(tiny_case(targets=("llvm", "cuda")))
    log = tmp_path / "spy.log"
    junit = tmp_path / "r.xml"
    proc = run_parent(["run", str(tmp_path / "cases"), "-j", "2", "--junit", str(junit),
                       "--no-cache"],
                      {"CL_VALIDATE_TEST_DEVICE_SPY": str(log),
                       "PYTHONPATH": f"{SPY}:{DATA}"})
    assert proc.returncode == ExitCode.OK, proc.stdout[-3000:] + proc.stderr[-3000:]
    cases = by_case(JUnitXml.fromfile(str(junit)))
    assert set(cases) == {"a", "b"} and all(passed(c) for c in cases.values())

    started, queries = _processes(log)
    zygotes = {pid for pid, cmd in started.items() if "cl_validate.session.zygote" in cmd}
    parents = {pid for pid, cmd in started.items() if "cl_validate.cli import main" in cmd}
    probes = {pid for pid, cmd in started.items() if "cl_validate.compile.devices" in cmd}
    assert len(zygotes) >= 1 and len(parents) == 1, started
    forking = {pid: "the parent" for pid in parents} | {pid: "a zygote" for pid in zygotes}
    for pid, ppid, what in queries:
        assert pid not in forking, f"{forking[pid]} asked a device runtime: {what}"
        if pid not in started:  # forked, not started: a case process or a target process
            assert ppid not in zygotes, f"a case process (forked by a zygote) asked: {what}"
    # the spy works: the probe asked about every device type (cuda included) in its process
    probed = {what.split()[0] for pid, _, what in queries if pid in probes}
    assert probes and {"1", "2"} <= probed, queries  # DLPack's kDLCPU = 1, kDLCUDA = 2
