"""Models that attack the run rather than crash: process-wide state, the result pipe, the
run's parent, its cache. Each one must cost its own case at most."""

from __future__ import annotations

import os
import pickle
import signal
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import torch
from tiny_models import conv_relu  # the innocent model the hostile ones wrap
from torch import nn


def _parent_of(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rfind(")") + 2:].split()[1])


def run_parent() -> int:
    """The cl-validate process that started this run: two generations up (a case process is
    forked by the zygote, the zygote started by the run)."""
    return _parent_of(os.getppid())


def patches_conv() -> nn.Module:
    """Changes every later convolution in this process: a shared worker would measure the
    next case with it (a SiLU fused after every conv) and cache that under its key."""
    original = nn.Conv2d.forward

    def with_silu(self: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.silu(original(self, x))

    nn.Conv2d.forward = with_silu  # type: ignore[method-assign]
    torch.set_default_dtype(torch.float64)
    torch.set_default_dtype(torch.float32)
    return conv_relu()


def closes_stdout() -> nn.Module:
    """Closes fd 1 and 2: a shared worker would lose the next case's output and report."""
    os.close(1)
    os.close(2)
    return conv_relu()


def breaks_tvm() -> nn.Module:
    """Makes TVM's compile unusable for whoever runs in this process next."""
    import tvm

    tvm.compile = None  # type: ignore[assignment]
    return conv_relu()


def _result_pipes() -> list[int]:
    """The pipes this process may write to: one of them is its result pipe."""
    out = []
    for fd in range(3, 256):
        try:
            mode = os.fstat(fd).st_mode
            flags = __import__("fcntl").fcntl(fd, __import__("fcntl").F_GETFL)
        except OSError:
            continue
        if stat.S_ISFIFO(mode) and flags & os.O_ACCMODE == os.O_WRONLY:
            out.append(fd)
    return out


class _Planted:
    """A pickle that runs code where it is loaded."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def writes_a_pickle() -> nn.Module:
    """Writes a length-prefixed pickle that would run code in a parent that unpickles."""
    marker = os.environ.get("CL_VALIDATE_TEST_MARKER", "/tmp/cl_validate_fooled")
    payload = pickle.dumps(_Planted(marker))
    for fd in _result_pipes():
        os.write(fd, struct.pack(">Q", len(payload)) + payload)
    return conv_relu()


def writes_garbage() -> nn.Module:
    for fd in _result_pipes():
        os.write(fd, b"\x00\xff garbage \x93\x94\x95" * 10)
    return conv_relu()


def promises_and_goes_silent() -> nn.Module:
    """Announces a long message and never sends it: the parent must not wait forever."""
    for fd in _result_pipes():
        os.write(fd, struct.pack(">Q", 1000))
    time.sleep(600)
    return conv_relu()


def _signals_parent(signo: int) -> nn.Module:
    os.kill(run_parent(), signo)
    time.sleep(5)  # the parent ends this case when it sees the signal
    return conv_relu()


def sends_sigterm() -> nn.Module:
    return _signals_parent(signal.SIGTERM)


def sends_sigint() -> nn.Module:
    return _signals_parent(signal.SIGINT)


def sends_sighup() -> nn.Module:
    return _signals_parent(signal.SIGHUP)


def child_sends_sigterm() -> nn.Module:
    """A process the model starts signals the run, and stays (a grandchild of the case)."""
    parent = run_parent()
    subprocess.Popen([sys.executable, "-c", f"import os, time; os.kill({parent}, 15); "
                      "time.sleep(30)"])
    time.sleep(10)
    return conv_relu()


def detaches_with_a_clean_environment() -> nn.Module:
    """A grandchild in its own session with an empty environment (nothing inherited to
    recognize it by), double-forked so its parent is gone."""
    marker = os.environ.get("CL_VALIDATE_TEST_DETACHED", "cl-validate-test-detached")
    code = ("import os, sys, time\n"
            "if os.fork(): os._exit(0)\n"
            "os.setsid()\n"
            "time.sleep(600)\n")
    subprocess.Popen(["env", "-i", sys.executable, "-c", code, marker],
                     start_new_session=True).wait()
    return conv_relu()


def sends_sigkill() -> nn.Module:
    """SIGKILL cannot be caught: only the kernel can keep it from the run."""
    return _signals_parent(signal.SIGKILL)


def sends_sigstop() -> nn.Module:
    """SIGSTOP cannot be caught either: the run would freeze."""
    return _signals_parent(signal.SIGSTOP)


def child_signals_and_exits() -> nn.Module:
    """A process the model starts signals the run and is gone at once: nothing is left to
    trace it by when the parent looks."""
    subprocess.run([sys.executable, "-c", f"import os; os.kill({run_parent()}, 15)"],
                   check=False)
    return conv_relu()


def _siblings() -> list[int]:
    """The other processes the zygote forked (other cases), by their parent."""
    zygote, me = os.getppid(), os.getpid()
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != me:
            try:
                if _parent_of(int(pid)) == zygote:
                    out.append(int(pid))
            except (OSError, ValueError, IndexError):
                continue
    return out


def attacks_other_cases() -> nn.Module:
    """Waits for another case to run next to it, then SIGKILLs it and SIGSTOPs the zygote;
    swallows whatever the kernel answers, so that only the attack's effect is judged."""
    deadline = time.monotonic() + 60
    while not _siblings() and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid, signo in [*((p, signal.SIGKILL) for p in _siblings()),
                       (os.getppid(), signal.SIGSTOP)]:
        try:
            os.kill(pid, signo)
        except OSError as exc:
            print(f"refused: {signo.name} to {pid}: {exc}", flush=True)
    return conv_relu()


def victim() -> nn.Module:
    """An innocent case that takes a while to build: alive when the attacker looks."""
    time.sleep(8)
    return conv_relu()


def writes_to_the_parents_stdout() -> nn.Module:
    """Reopens the run's own stdout and stderr through /proc to print into its console."""
    for fd in (1, 2):
        with open(f"/proc/{run_parent()}/fd/{fd}", "w") as out:
            out.write("::error title=planted::written by a model into the run's console\n")
    return conv_relu()


def swaps_its_log() -> nn.Module:
    """Puts a FIFO wherever its output and the zygote's could be named, then dies: a parent
    that read the case's output by name would hang opening it."""
    print("last words before the swap", flush=True)
    folder = Path(os.readlink("/proc/self/fd/1").removesuffix(" (deleted)")).parent
    for name in [*(p.name for p in folder.iterdir()), *(f"case{i}.log" for i in range(64)),
                 *(f"zygote{i}.log" for i in range(8))]:
        with __import__("contextlib").suppress(OSError):
            (folder / name).unlink()
        with __import__("contextlib").suppress(OSError):
            os.mkfifo(folder / name)
    os._exit(3)  # the parent now reads the tail of its output


def kills_the_zygote() -> nn.Module:
    """Kills the process that forks the cases (this case's parent)."""
    os.kill(os.getppid(), signal.SIGKILL)
    return conv_relu()


def sleeps() -> nn.Module:
    """Hangs in the factory, its marker in the title: the test kills the run meanwhile."""
    time.sleep(600)
    return conv_relu()


def counts_builds() -> nn.Module:
    """Notes every build next to the case, and reads a data file there (as weights are)."""
    here = Path(os.environ.get("CL_VALIDATE_TEST_DIR", "."))
    with open(here / "builds.txt", "a") as f:
        f.write("built\n")
    model = conv_relu()
    scale = float((here / "scale.txt").read_text())
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model


def lowers_the_parents_file_size() -> nn.Module:
    """The run's parent may write no file of any size: every report write after this fails."""
    import resource

    resource.prlimit(run_parent(), resource.RLIMIT_FSIZE, (0, 0))
    return conv_relu()


def starves_the_zygote() -> nn.Module:
    """The zygote can open no file and start no process: the cases after this one die."""
    import resource

    for limit in (resource.RLIMIT_NOFILE, resource.RLIMIT_NPROC, resource.RLIMIT_AS):
        resource.prlimit(os.getppid(), limit, (16, 16))
    return conv_relu()


def slows_the_parent() -> nn.Module:
    """The run's parent at the lowest priority, on one core, first to be OOM-killed."""
    parent = run_parent()
    os.setpriority(os.PRIO_PROCESS, parent, 19)
    os.sched_setaffinity(parent, {0})
    Path(f"/proc/{parent}/oom_score_adj").write_text("1000")
    return conv_relu()


def sets_its_own_limits() -> nn.Module:
    """What a case may do to itself: lower its own limits, priority and affinity."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 4096), hard))
    os.setpriority(os.PRIO_PROCESS, 0, 1)
    os.sched_setaffinity(0, os.sched_getaffinity(0))
    return conv_relu()


def _readable_pipe(fd: int) -> bool:
    import fcntl

    try:
        mode, flags = os.fstat(fd).st_mode, fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        return False
    return stat.S_ISFIFO(mode) and flags & os.O_ACCMODE == os.O_RDONLY


def sends_a_huge_result() -> nn.Module:
    """Announces a 900 MB result and sends it: the parent must not hold it (and more) for a
    case whose memory cap is lower. (A pipe nobody drains is given up after a second.)"""
    import fcntl

    chunk = memoryview(b"\0" * (1 << 20))
    own = {os.readlink(f"/proc/self/fd/{fd}") for fd in range(3, 256)
           if _readable_pipe(fd)}  # pipes this process reads itself: not the parent's
    for fd in _result_pipes():
        if os.readlink(f"/proc/self/fd/{fd}") in own:
            continue
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        os.write(fd, struct.pack(">Q", 900 << 20))
        for _ in range(900):
            view, stalled = chunk, time.monotonic()
            while view and time.monotonic() - stalled < 1:
                try:
                    sent = os.write(fd, view)
                    view, stalled = view[sent:], time.monotonic()
                except BlockingIOError:
                    time.sleep(0.001)
                except OSError:
                    return conv_relu()
            if view:
                break
    return conv_relu()


def reads_its_scale_read_write() -> nn.Module:
    """Reads its weight scale through ``np.memmap(mode="r+")`` (an ``O_RDWR`` open), and
    notes every build next to the case."""
    import numpy as np

    here = Path(os.environ.get("CL_VALIDATE_TEST_DIR", "."))
    with open(here / "builds.txt", "a") as f:
        f.write("built\n")
    scale = float(np.memmap(here / "scale.f32", dtype=np.float32, mode="r+", shape=(1,))[0])
    model = conv_relu()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model


def _build_note(here: Path) -> None:
    """``built FACTORY`` appended to ``builds.txt``: which model was built, each time."""
    with open(here / "builds.txt", "a") as f:
        f.write(f"built {sys._getframe(1).f_code.co_name}\n")


def _scaled(scale: float) -> nn.Module:
    model = conv_relu()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model


def edits_its_scale_after_reading() -> nn.Module:
    """Reads its weight scale from ``scale.txt``, then the file is saved anew while the case
    runs (an editor, a checkout): what the case measured is the old scale."""
    here = Path(os.environ.get("CL_VALIDATE_TEST_DIR", "."))
    _build_note(here)
    scale = float((here / "scale.txt").read_text())
    (here / "scale.txt").write_text(os.environ.get("CL_VALIDATE_TEST_NEW_SCALE", "1.0"))
    return _scaled(scale)


def reads_its_scale_after_chdir() -> nn.Module:
    """Reads ``scale.txt`` by a relative path inside ``contextlib.chdir(data/)``."""
    import contextlib

    here = Path(os.environ.get("CL_VALIDATE_TEST_DIR", "."))
    _build_note(here)
    with contextlib.chdir(here / "data"):
        with open("scale.txt") as f:
            scale = float(f.read())
    return _scaled(scale)


def execs_its_helper_module() -> nn.Module:
    """Loads ``helper.py`` with ``exec_module`` (not through ``sys.modules``): Python reads
    its compiled ``__pycache__`` copy, not the source, while that copy is current."""
    import importlib.util

    here = Path(os.environ.get("CL_VALIDATE_TEST_DIR", "."))
    _build_note(here)
    spec = importlib.util.spec_from_file_location("cl_test_helper", here / "helper.py")
    assert spec is not None and spec.loader is not None
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    return _scaled(float(helper.SCALE))


def pins_its_own_thread() -> nn.Module:
    """A worker thread pins itself by its own thread id (as OpenMP runtimes do)."""
    import threading

    errors: list[BaseException] = []

    def pin() -> None:
        try:
            os.sched_setaffinity(threading.get_native_id(), os.sched_getaffinity(0))
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=pin)
    t.start()
    t.join()
    if errors:
        raise errors[0]
    return conv_relu()


def imports_its_helper_from_lib() -> nn.Module:
    """Imports ``cl_test_shadowed`` from ``lib/``, a folder it appends to the import path:
    after the case's own folder, where a module of that name would be found first."""
    here = Path(os.environ.get("CL_VALIDATE_TEST_DIR", "."))
    _build_note(here)
    sys.path.append(str(here / "lib"))
    import cl_test_shadowed

    return _scaled(float(cl_test_shadowed.SCALE))


def reads_its_scale_by_dir_fd() -> nn.Module:
    """Reads ``data/scale.txt`` with ``os.open("scale.txt", dir_fd=<data/>)``."""
    here = Path(os.environ.get("CL_VALIDATE_TEST_DIR", "."))
    _build_note(here)
    folder = os.open(here / "data", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = os.open("scale.txt", os.O_RDONLY, dir_fd=folder)
        with os.fdopen(fd) as f:
            scale = float(f.read())
    finally:
        os.close(folder)
    return _scaled(scale)


def _read_natively(path: str) -> str:
    """`path` read by the C library (``fopen``/``fread``), which Python's audit hook never
    sees (a safetensors or TorchScript loader reads so)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.fopen.restype = ctypes.c_void_p
    f = libc.fopen(os.fsencode(path), b"r")
    if not f:
        raise OSError(ctypes.get_errno(), f"fopen {path}")
    buf = ctypes.create_string_buffer(64)
    n = libc.fread(buf, 1, 63, ctypes.c_void_p(f))
    libc.fclose(ctypes.c_void_p(f))
    return buf.raw[:n].decode()


def reads_its_scale_natively() -> nn.Module:
    """Reads ``scale.txt`` with the C library, by a relative path inside ``chdir(data/)``."""
    import contextlib

    here = Path(os.environ.get("CL_VALIDATE_TEST_DIR", "."))
    _build_note(here)
    with contextlib.chdir(here / "data"):
        return _scaled(float(_read_natively("scale.txt")))


def reads_its_scale_natively_in_a_worker() -> nn.Module:
    """A forked worker reads ``data/scale.txt`` with the C library and sends it back."""
    here = Path(os.environ.get("CL_VALIDATE_TEST_DIR", "."))
    _build_note(here)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, _read_natively(str(here / "data" / "scale.txt")).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    text = os.read(r, 64).decode()
    os.close(r)
    return _scaled(float(text))


def reads_its_scale_with_cat() -> nn.Module:
    """Has another program read ``data/scale.txt`` (``cat``): its reads are its own."""
    here = Path(os.environ.get("CL_VALIDATE_TEST_DIR", "."))
    _build_note(here)
    out = subprocess.run(["cat", str(here / "data" / "scale.txt")], capture_output=True,
                         text=True, check=True).stdout
    return _scaled(float(out))


def writes_the_parents_oom_score() -> nn.Module:
    """The run's parent first to be OOM-killed, through its /proc file alone."""
    Path(f"/proc/{run_parent()}/oom_score_adj").write_text("1000")
    return conv_relu()
