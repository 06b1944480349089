"""No process that forks ever touches a device runtime; programs run on devices in hosts.

A CUDA context does not survive ``fork()``: a zygote (or case or target process) that started
the CUDA driver once breaks every process forked from it, and on a GPU machine every case
errors with ``cudaErrorInitializationError``. A CPU runner cannot see that failure, so these
tests watch its causes during one real isolated run of two cases (llvm and cuda targets, with
``--profile``, and the CPU's programs sent through device hosts too: ``CL_VALIDATE_HOST_CPU``):

- a spy (tests/data/device_spy/sitecustomize.py) notes every device query of TVM's runtime and
  torch's with the pid that made it: only the device probe and device hosts (interpreters
  started fresh) may ask, and every program must have run in a host;
- a stand-in CUDA driver (tests/data/stand_in_driver/libcuda.c, built with ``cc``, found by
  TVM's CUDA runtime before any real one) notes every call into the driver: only the probe
  may call it. This sees what the spy cannot: a call made from C (torch's CUDA build counted
  devices in its export, which started the driver in the zygote's warm-up on an H200).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from junitparser import JUnitXml

from cl_validate.compile import devices
from cl_validate.errors import ExitCode
from cl_validate.session import sandbox
from tests.conftest import DATA, by_case, passed, run_parent, tiny_case

pytestmark = pytest.mark.compile
SPY = DATA / "device_spy"
DRIVER = DATA / "stand_in_driver" / "libcuda.c"


def _cuda_runtime_here() -> bool:
    """Whether TVM's CUDA runtime can load here (its CUDA runtime library is installed), so
    that it looks for a driver at all."""
    try:
        ctypes.CDLL("libcudart.so.13")
    except OSError:
        return False
    return True


def _processes(log: Path) -> tuple[dict[int, str], list[tuple[int, int, str]]]:
    """The spy's log: interpreters started (pid → command line) and queries (pid, ppid,
    what), the stand-in driver's calls among them (``driver NAME``)."""
    started: dict[int, str] = {}
    queries: list[tuple[int, int, str]] = []
    for line in log.read_text().splitlines():
        kind, pid, ppid, rest = line.split(" ", 3)
        if kind == "start":
            started[int(pid)] = rest
        else:
            queries.append((int(pid), int(ppid), rest if kind == "query" else f"driver {rest}"))
    return started, queries


@pytest.fixture(scope="module")
def watched_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fork_safety")
    (tmp / "cases").mkdir()
    for name in ("a", "b"):
        (tmp / "cases" / f"{name}.toml").write_text(tiny_case(targets=("llvm", "cuda")))
    log = tmp / "spy.log"
    env = {"CL_VALIDATE_TEST_DEVICE_SPY": str(log), "PYTHONPATH": f"{SPY}:{DATA}",
           "CL_VALIDATE_HOST_CPU": "1"}
    driver = False
    if shutil.which("cc") and shutil.which("nvcc") and _cuda_runtime_here():
        (tmp / "driver").mkdir()
        subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o",
                        str(tmp / "driver" / "libcuda.so.1"), str(DRIVER)], check=True)
        env |= {"LD_LIBRARY_PATH": str(tmp / "driver"), "CL_VALIDATE_TEST_DRIVER_LOG": str(log),
                # with a driver library present TVM builds CUDA itself, by NVRTC's Python
                # binding unless told to use nvcc (the toolkit beside the runtime library)
                "TVM_CUDA_COMPILE_MODE": "nvcc"}
        driver = True
    junit = tmp / "r.xml"
    proc = run_parent(["run", str(tmp / "cases"), "-j", "2", "--junit", str(junit),
                       "--no-cache", "--profile"], env)
    assert proc.returncode == ExitCode.OK, proc.stdout[-3000:] + proc.stderr[-3000:]
    cases = by_case(JUnitXml.fromfile(str(junit)))
    assert set(cases) == {"a", "b"} and all(passed(c) for c in cases.values())
    return (*_processes(log), driver)


def _roles(started: dict[int, str]) -> dict[str, set[int]]:
    def having(text: str) -> set[int]:
        return {pid for pid, cmd in started.items() if text in cmd}

    return {"zygote": having("cl_validate.session.zygote"),
            "parent": having("cl_validate.cli import main"),
            "probe": having("cl_validate.compile.devices"),
            "host": having("cl_validate.session.device_host")}


def test_no_forking_process_asks_a_device(watched_run):
    started, queries, driver = watched_run
    roles = _roles(started)
    assert len(roles["zygote"]) >= 1 and len(roles["parent"]) == 1, started
    for pid, ppid, what in queries:
        if what.startswith("driver"):
            continue
        # forked, not started: a case process or a target process; or the parent, a zygote
        assert pid in roles["probe"] | roles["host"], f"process {pid} (of {ppid}) asked: {what}"
    assert roles["probe"], started  # the question was asked, in the probe's process
    if driver:  # a driver library loads (the stand-in): the probe asked TVM
        probed = {what.split()[0] for pid, _, what in queries if pid in roles["probe"]}
        assert {"1", "2"} <= probed, queries  # DLPack's kDLCPU 1, kDLCUDA 2


def test_every_program_runs_in_a_device_host(watched_run):
    started, _, _ = watched_run
    hosts = _roles(started)["host"]
    # one host per target that ran a program: llvm of each case (cuda has no device here)
    assert len(hosts) == 2, started
    assert all("cl_validate.session.device_host cpu " in started[pid] for pid in hosts)
    if sandbox.available():  # started before the case's /proc wall, each walls its own
        assert all(started[pid].endswith(" --wall-proc") for pid in hosts), started


def test_no_forking_process_calls_the_driver(watched_run):
    started, queries, driver = watched_run
    if not driver:
        pytest.skip("no cc, nvcc or CUDA runtime library (libcudart.so.13): TVM's CUDA "
                    "runtime does not load here, so it would call no driver")
    roles = _roles(started)
    calls = [(pid, ppid, what) for pid, ppid, what in queries if what.startswith("driver")]
    callers = {pid for pid, _, _ in calls}
    assert callers & roles["probe"], calls  # the stand-in is reached: the probe asked
    assert callers <= roles["probe"] | roles["host"], [
        c for c in calls if c[0] not in roles["probe"] | roles["host"]]


@pytest.mark.skipif(not shutil.which("cc"), reason="no cc to build the stand-in driver")
def test_whether_the_driver_was_started_is_asked_without_starting_it(tmp_path):
    """`cuda_driver_initialized` (how the zygote and tools/gpu-fork-check.py tell a poisoned
    process) answers no where the driver is not loaded or not started, yes once it was
    started, and never starts it itself."""
    lib = tmp_path / "libcuda.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(lib),
                    str(DRIVER)], check=True)
    log = tmp_path / "driver.log"
    code = ("import ctypes, os\n"
            "from cl_validate.compile.devices import cuda_driver_initialized as asked\n"
            "answers = [asked()]\n"
            f"lib = ctypes.CDLL({str(lib)!r}, mode=os.RTLD_GLOBAL)\n"
            "answers += [asked(), asked()]\n"
            "lib.cuInit(0)\n"
            "answers.append(asked())\n"
            "print(answers)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "CL_VALIDATE_TEST_DRIVER_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[False, False, False, True]"
    calls = [line.split()[-1] for line in log.read_text().splitlines()]
    assert calls == ["cuInit"]  # the test's own call, and only it: asking started nothing


def _probe(env: dict[str, str]) -> tuple[str, bool]:
    """The probe's answer, and whether it imported TVM to give it."""
    code = ("import runpy, sys\n"
            "runpy.run_module('cl_validate.compile.devices', run_name='__main__')\n"
            "print('\\n' + str('tvm' in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    answer, imported = proc.stdout.rsplit("\n", 2)[:2]
    return answer, imported == "True"


@pytest.mark.skipif(not shutil.which("cc"), reason="no cc to build the stand-in driver")
def test_the_probe_asks_tvm_only_where_a_gpu_driver_loads(tmp_path):
    """Importing TVM costs seconds of CPU on every run; on a machine where no GPU driver
    library loads, the probe answers "the CPU alone" without it, and where one loads (the
    stand-in CUDA driver here) it asks TVM as before."""
    try:
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("a CUDA driver is installed here: no machine without one to try")
    except OSError:
        pass
    answer, imported = _probe({})
    facts = devices.decode(answer)
    assert not imported and facts["cpu"].exist, answer
    assert not any(f.exist for kind, f in facts.items() if kind != "cpu"), answer
    assert set(facts) == set(devices.device_types())
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o",
                    str(tmp_path / "libcuda.so.1"), str(DRIVER)], check=True)
    _, imported = _probe({"LD_LIBRARY_PATH": str(tmp_path),
                          "CL_VALIDATE_TEST_DRIVER_LOG": str(tmp_path / "driver.log")})
    assert imported
