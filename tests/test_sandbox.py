"""The kernel's wall around a case (`cl_validate.session.sandbox`): what a confined process may
still do, what it may not, and how a refusal is told from any other PermissionError."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cl_validate import procs
from cl_validate.session import sandbox

walled = pytest.mark.skipif(not sandbox.available(),
                            reason="cases are not confined here (Landlock ABI < 6, or "
                            "CL_VALIDATE_UNCONFINED set)")


def _in_confined_child(body: str) -> subprocess.CompletedProcess[str]:
    """Run `body` in a fresh Python that confines itself first; PARENT is this process."""
    code = ("import os, signal, sys\nfrom cl_validate.session import sandbox\n"
            f"PARENT = {os.getpid()}\nwhy = sandbox.confine()\nassert why is None, why\n"
            + body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)


@walled
def test_a_confined_process_cannot_signal_or_trace_outside_itself():
    got: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
    try:
        proc = _in_confined_child(
            "for sig in (signal.SIGUSR1, signal.SIGKILL, signal.SIGSTOP, 0):\n"
            "    try:\n        os.kill(PARENT, sig)\n    except PermissionError:\n"
            "        print('refused', int(sig))\n"
            "try:\n    open(f'/proc/{PARENT}/fd/1', 'w')\nexcept PermissionError:\n"
            "    print('fd refused')\n")
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n") == ["refused 10", "refused 9", "refused 19", "refused 0",
                                       "fd refused", ""]
    assert got == []


@walled
def test_a_confined_process_still_signals_its_own_and_is_signalled_from_outside():
    p = subprocess.Popen(
        [sys.executable, "-c",
         "import os, subprocess, sys, time\nfrom cl_validate.session import sandbox\n"
         "assert sandbox.confine() is None\n"
         "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
         "child.terminate()\nprint('child', child.wait())\nos.kill(os.getpid(), 0)\n"
         "print('ready', flush=True)\ntime.sleep(30)"],
        stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    assert p.stdout.readline() == f"child {-signal.SIGTERM}\n"
    assert p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGTERM)  # into the wall: allowed
    assert p.wait(timeout=10) == -signal.SIGTERM


def _target() -> int:
    raise PermissionError(errno.EPERM, "Operation not permitted")


def _model() -> None:
    os.kill(_target(), signal.SIGTERM)


def test_refused_signal_names_the_call_only_when_confined(monkeypatch):
    try:
        try:
            _model()
        except PermissionError as inner:  # as the factory's loader wraps it
            raise ValueError("model factory raised") from inner
    except ValueError as outer:
        monkeypatch.setattr(sandbox, "confined", False)
        assert sandbox.refused_signal(outer) is None
        monkeypatch.setattr(sandbox, "confined", True)
        said = sandbox.refused_signal(outer)
    assert said is not None
    assert said.startswith("os.kill(_target(), signal.SIGTERM) at test_sandbox.py:"), said
    # another errno, or an EPERM from a call that signals nothing, is not a refused signal
    for exc in (PermissionError(errno.EACCES, "denied"), OSError(errno.EPERM, "x")):
        try:
            raise exc
        except OSError as e:
            assert sandbox.refused_signal(e) is None


def test_unconfined_when_asked(monkeypatch):
    monkeypatch.setenv(sandbox.UNCONFINED_ENV, "1")
    assert sandbox.confine() == f"{sandbox.UNCONFINED_ENV} is set"
    assert sandbox.confined is False


def test_a_stopped_process_is_continued():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert procs.resume_if_stopped(p.pid) is False  # running: left alone
        os.kill(p.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while not procs.resume_if_stopped(p.pid):
            assert time.monotonic() < deadline, "never seen stopped"
            time.sleep(0.01)
        time.sleep(0.1)
        assert procs.resume_if_stopped(p.pid) is False  # running again
    finally:
        p.kill()
        p.wait()


_I386_GETPID = "b8140000 00cd80c3"  # mov eax, 20 (i386 getpid); int 0x80; ret
_X32_GETPID = "b8270000 400f05c3"  # mov eax, 0x40000027 (x32 getpid); syscall; ret
_RUN_CODE = (
    "import ctypes, mmap\n"
    "def run(hexcode):\n"
    "    buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | "
    "mmap.PROT_EXEC)\n"
    "    buf.write(bytes.fromhex(hexcode))\n"
    "    fn = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))\n"
    "    return ctypes.c_int32(fn()).value\n")


@walled
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="i386 and x32 calls are x86-64's")
def test_calls_through_another_abi_are_refused_whole():
    """A 64-bit process can make i386 calls (``int 0x80``) and x32 ones: the same kernel
    functions under other numbers, so an i386 ``prlimit64`` (340) on the parent passed a
    filter that compared x86-64 numbers only. Every such call is refused (EPERM)."""
    plain = subprocess.run([sys.executable, "-c", _RUN_CODE + "import os\n"
                            f"print(run('{_I386_GETPID}') == os.getpid())"],
                           capture_output=True, text=True, timeout=60)
    if plain.stdout.strip() != "True":
        pytest.skip("this kernel runs no i386 calls (IA32 emulation off): nothing to refuse")
    proc = _in_confined_child(_RUN_CODE + f"print(run('{_I386_GETPID}'), "
                              f"run('{_X32_GETPID}'), os.getpid() > 0)\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(-errno.EPERM), str(-errno.EPERM), "True"]


_CLONE = {"x86_64": 56, "aarch64": 220}


@walled
@pytest.mark.skipif(os.uname().machine not in _CLONE, reason="clone's number is per arch")
def test_a_process_cannot_be_made_the_parents_child():
    """``clone(CLONE_PARENT)`` makes the new process a child of the caller's parent (the
    zygote), outside the case's process tree and its memory cap (a case held 2.4 GB under
    ``max_memory_mb = 1024`` so). Refused (EPERM); ``clone3``, whose flags a filter cannot
    read, answers ENOSYS, so the C library falls back to ``clone``; fork and threads work."""
    proc = _in_confined_child(
        "import ctypes, threading\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"r = libc.syscall({_CLONE[os.uname().machine]}, 0x8000 | 17, 0, 0, 0, 0)\n"
        "if r == 0:\n    os._exit(0)\n"
        "print(r, ctypes.get_errno())\n"
        "print(libc.syscall(435, 0, 0), ctypes.get_errno())\n"
        "pid = os.fork()\nif pid == 0:\n    os._exit(7)\n"
        "print(os.waitpid(pid, 0)[1] >> 8)\n"
        "t = threading.Thread(target=print, args=('thread',))\nt.start()\nt.join()\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["-1", str(errno.EPERM), "-1", str(errno.ENOSYS), "7",
                                   "thread"], proc.stdout


@walled
def test_a_case_that_opens_a_gpu_may_name_its_threads():
    """The CUDA driver (570 and later) names the threads it starts by writing
    ``/proc/PID/task/TID/comm`` and fails to start without (an H200 under the /proc wall saw
    no GPU); a process started after the wall went up (the device host) has a /proc folder
    no rule could name beforehand. With `proc_writes`, such a process names its threads;
    without, it cannot — and a signal outside the case stays refused either way."""
    name_a_thread = ("import os, threading\n"
                     "tid = threading.get_native_id()\n"
                     "try:\n"
                     "    with open(f'/proc/{os.getpid()}/task/{tid}/comm', 'w') as f:\n"
                     "        f.write('host')\n"
                     "    print('named')\n"
                     "except PermissionError:\n"
                     "    print('refused')\n")
    body = ("import subprocess, sys\n"
            f"code = {name_a_thread!r}\n"
            "print(subprocess.run([sys.executable, '-c', code], capture_output=True,\n"
            "                     text=True).stdout.strip())\n"
            "try:\n    os.kill(PARENT, 0)\nexcept PermissionError:\n    print('signal refused')\n")
    for proc_writes, named in ((True, "named"), (False, "refused")):
        code = ("import os, signal, sys\nfrom cl_validate.session import sandbox\n"
                f"PARENT = {os.getpid()}\nwhy = sandbox.confine(proc_writes={proc_writes})\n"
                "assert why is None, why\n" + body)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split("\n") == [named, "signal refused", ""], (proc_writes,
                                                                          proc.stdout)


@walled
def test_a_gpu_case_s_hosts_name_their_threads_and_nothing_else_in_proc_is_written():
    """A case that opens a GPU is confined with `proc_writes` (its device hosts' driver
    names their threads under /proc); its hosts, started before any of the model's code,
    each wall /proc but their own folder, and the case process then walls it all: the
    host names a thread from another thread as the driver does (``pthread_setname_np``
    opens ``/proc/self/task/TID/comm``), but neither it nor the case writes another
    process's /proc file (the parent's ``oom_score_adj``), and a host started after the
    case's wall cannot open a way back."""
    host = ("import os, sys, threading\nfrom cl_validate.session import sandbox\n"
            "why = sandbox.wall_proc(own=True)\nassert why is None, why\n"
            "def attempt(path, text):\n"
            "    try:\n"
            "        with open(path, 'w') as f:\n"
            "            f.write(text)\n"
            "        return 'written'\n"
            "    except PermissionError:\n"
            "        return 'refused'\n"
            "ready, done = threading.Event(), threading.Event()\n"
            "tids = []\n"
            "def worker():\n"
            "    tids.append(threading.get_native_id()); ready.set(); done.wait()\n"
            "t = threading.Thread(target=worker); t.start(); ready.wait()\n"
            "named = attempt(f'/proc/self/task/{tids[0]}/comm', 'cuda-worker')\n"
            "done.set(); t.join()\n"
            "print(named, attempt(f'/proc/{sys.argv[1]}/oom_score_adj', '5'))\n")
    code = ("import os, subprocess, sys\nfrom cl_validate.session import sandbox\n"
            f"PARENT = {os.getpid()}\n"
            "why = sandbox.confine(proc_writes=True)\nassert why is None, why\n"
            f"host = {host!r}\n"
            "def start():\n"
            "    return subprocess.run([sys.executable, '-c', host, str(PARENT)],\n"
            "                          capture_output=True, text=True).stdout.strip()\n"
            "print(start())\n"
            "why = sandbox.wall_proc(own=False)\nassert why is None, why\n"
            "try:\n"
            "    open(f'/proc/{PARENT}/oom_score_adj', 'w').write('5')\n"
            "    print('case wrote')\n"
            "except PermissionError:\n"
            "    print('case refused')\n"
            "print(start())\n")
    before = Path(f"/proc/{os.getpid()}/oom_score_adj").read_text()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n") == ["written refused", "case refused",
                                        "refused refused", ""], proc.stdout
    assert Path(f"/proc/{os.getpid()}/oom_score_adj").read_text() == before


@pytest.mark.skipif(not sandbox.filterable(), reason="no seccomp filter here (not Linux on "
                    "a known architecture, or CL_VALIDATE_UNCONFINED set)")
def test_without_signal_scoping_the_filter_goes_in_alone(tmp_path):
    """Hosted CI runners run kernels before 6.12 (no Landlock signal scope): nothing was
    confined there, so a model could lower the parent's limits. The seccomp filter (and an
    open watcher) goes in alone: another process's limits stay refused and a file the C
    library opens is stamped, while a signal to the parent is the parent's own business."""
    import resource

    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    (tmp_path / "data.txt").write_text("x")
    code = (
        "import ctypes, os, resource, sys\n"
        "from cl_validate.session import sandbox\n"
        "from cl_validate.session.open_watch import OpenWatch\n"
        "sandbox.abi = lambda: 4  # a kernel with Landlock but no signal scope\n"
        f"PARENT = {os.getpid()}\n"
        "watch = OpenWatch([])\nassert watch.ready()\n"
        "why = sandbox.confine(watch=watch.hand_over)\n"
        "print('filtered', sandbox.filtered, sandbox.confined,\n"
        "      'alone is in' in why)\n"
        "try:\n"
        f"    resource.prlimit(PARENT, resource.RLIMIT_NOFILE, {limits})\n"
        "    print('limit set')\n"
        "except PermissionError:\n    print('limit refused')\n"
        "os.kill(PARENT, 0)\nprint('signal sent')\n"
        "libc = ctypes.CDLL(None)\nlibc.fopen.restype = ctypes.c_void_p\n"
        "libc.fclose(ctypes.c_void_p(libc.fopen(b'data.txt', b'r')))\n"
        "print([os.path.basename(p) for p, _ in watch.collect().taken])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["filtered True False True", "limit refused",
                                        "signal sent", "['data.txt']"], proc.stdout
