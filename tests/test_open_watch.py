"""The open watcher (`cl_validate.session.open_watch`): the files a confined case's native code
opens are stamped as they are opened, by whom they are opened, never its outputs."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from cl_validate.session import sandbox

pytestmark = pytest.mark.skipif(
    not sandbox.available() or os.uname().machine not in sandbox.WATCHED,
    reason="cases are not confined here (Landlock ABI < 6, or CL_VALIDATE_UNCONFINED set), "
    "so no open watcher starts")

_WATCHED_CHILD = """
import ctypes, os, subprocess, sys
from cl_validate.session import sandbox
from cl_validate.session.open_watch import OpenWatch

watch = OpenWatch([])
assert watch.ready()
assert sandbox.confine(watch=watch.hand_over) is None and watch.watching
libc = ctypes.CDLL(None, use_errno=True)
libc.fopen.restype = ctypes.c_void_p

def native(path, mode):
    f = libc.fopen(path.encode(), mode)
    assert f, path
    libc.fclose(ctypes.c_void_p(f))
"""


def _in_watched_child(body: str, folder: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _WATCHED_CHILD + body], cwd=folder,
                          capture_output=True, text=True, timeout=120)


def test_native_opens_are_stamped_by_whoever_of_the_case_opens_them(tmp_path):
    """The C library's ``fopen`` by a relative path, in the process and in a worker it
    forks, is stamped where it is; a file it creates and reads back is its output; what an
    exec'd program reads (``cat``) is not seen, so the answer says the case is unseen (not
    kept in the cache); each stamp is of the file as it was opened, though the file changes
    after."""
    for name in ("read.txt", "forked.txt", "catted.txt"):
        (tmp_path / name).write_text(name)
    proc = _in_watched_child(
        "native('read.txt', b'r')\n"
        "with open('read.txt', 'w') as f:\n    f.write('changed since')\n"
        "native('made.txt', b'w')\nnative('made.txt', b'r')\n"
        "pid = os.fork()\n"
        "if pid == 0:\n    native('forked.txt', b'r')\n    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "subprocess.run(['cat', 'catted.txt'], check=True, capture_output=True)\n"
        "got = watch.collect()\n"
        "for path, pairs in got.taken:\n"
        "    for real, s in pairs:\n        print(os.path.basename(real), s.size)\n"
        "print('unseen', repr(got.unseen))\n", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("unseen 'the case ran cat (cat catted.txt)"), lines[-1]
    assert sorted(lines[:-1]) == ["forked.txt 10", "read.txt 8"], proc.stdout


def test_programs_the_pipeline_runs_keep_the_case_seen(tmp_path):
    """The C compiler TVM links a program with (the device host's) is the pipeline's own
    program: the case stays seen, and the compiler's reads are not stamped."""
    (tmp_path / "a.c").write_text("int f(void) { return 1; }\n")
    proc = _in_watched_child(
        "subprocess.run(['cc', '-c', 'a.c', '-o', 'a.o'], check=True)\n"
        "got = watch.collect()\n"
        "print(len(got.taken), repr(got.unseen))\n", str(tmp_path))
    if proc.returncode != 0 and "No such file" in proc.stderr:
        pytest.skip("no C compiler here")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "''"], proc.stdout


def test_io_uring_is_refused_where_opens_are_watched(tmp_path):
    """``io_uring`` opens files without a system call the filter sees: not available
    (ENOSYS, so a library falls back to plain calls)."""
    proc = _in_watched_child(
        "params = ctypes.create_string_buffer(120)\n"
        "print(libc.syscall(425, 8, params), ctypes.get_errno())\n", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["-1", str(errno.ENOSYS)]


def test_a_watched_filter_holds_opens_for_its_listener():
    """The filter's program: with a watcher, each open call of the architecture returns
    seccomp's user notification; without one, none does."""
    for arch, numbers in sandbox.WATCHED.items():
        plain = sandbox.filter_program(arch, 1234)
        watched = sandbox.filter_program(arch, 1234, watch=True)
        assert plain is not None and watched is not None
        notify = [k for code, _, _, k in watched if code == 0x06 and k == 0x7FC00000]
        assert notify and not [k for code, _, _, k in plain if k == 0x7FC00000], arch
        compared = {k for code, _, _, k in watched if code == 0x15}
        assert set(numbers.values()) <= compared, arch


def test_a_case_that_closes_the_watchers_socket_is_not_kept(tmp_path):
    """A model that closes every descriptor it did not open (as daemonizing code does) cuts
    the case off from its watcher: the answer says so, so the case is not kept in the
    cache, and nothing is sent down a descriptor number the model reused."""
    (tmp_path / "read.txt").write_text("x")
    proc = _in_watched_child(
        "native('read.txt', b'r')\n"
        "os.closerange(3, 1024)\n"
        "import socket\nreused = socket.socketpair()\n"
        "got = watch.collect()\n"
        "reused[1].setblocking(False)\n"
        "try:\n    print('sent to the model', reused[1].recv(8))\n"
        "except BlockingIOError:\n    print('nothing sent')\n"
        "print(len(got.taken), bool(got.unseen))\n", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["nothing sent", "0 True"], proc.stdout
