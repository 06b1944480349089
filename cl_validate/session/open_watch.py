"""The files a case's native code opens, seen by the kernel: an *open watcher* stamps each as it
is opened, for the measurement cache (`cl_validate.session.file_record` sees what Python
opens; this sees the rest).

A C library's ``fopen`` (through ctypes, a safetensors or TorchScript loader, any extension
module) opens a file without Python's audit hook seeing it: an edit of that file was missed
and a cached PASS stood. So a case process that puts its seccomp filter in
(`cl_validate.session.sandbox`) also has the kernel hold each ``open``, ``openat`` and
``openat2`` of its processes (seccomp's user notification) and hand it to its open watcher:
a small process it starts before it confines itself (fork+exec: the standard library and
this package's stamping, not torch, nor the model, so it adds tens of MB, not the case's
memory). For each call the
watcher reads the path from the opening process's memory (``/proc/PID/mem``), resolves a
relative one against that process's working directory or directory descriptor, stamps the
file as it is at that moment by `FileRecorder`'s rules (a file the case creates or
truncates is its output, read back later too; the packages whose versions are in the key
are left out),
and lets the call go on. When the case ends, the case process asks for what was stamped and
adds it to its own.

Whose opens are stamped: those of the processes that run the case's program — the case
process, its target processes, a ``fork`` or ``multiprocessing`` worker of the model's (the
same executable and command line). A process of the case that runs another
program (``cat``, a shell, a Python script of the model's) which opens files makes the case
measured but **not kept in the cache** — what that program reads is not known — unless the
program, or one that started it, is the pipeline's own (the device host; the C/C++ compiler
or nvcc that TVM links a program with, and the passes they run), whose reads are not
stamped. (Programs are told apart by ``/proc/PID/exe`` and ``cmdline``, which Yama lets the
watcher read.) Where the watcher cannot
read the memory of a process of the case (Linux's Yama ptrace scope admits it for the
processes forked by Python's ``os.fork``, not for one a C library forks), the case is not
kept either: what it read is not known whole.

What it costs: each open of the case's processes waits for the watcher (tens of
microseconds; a case opens a few hundred files), and ``io_uring``, which could open files
past the filter, is refused (ENOSYS: libraries fall back to plain calls). Where the kernel
offers no user notification (before Linux 5.5), or no seccomp filter goes in (not Linux,
``CL_VALIDATE_UNCONFINED``), no watcher starts, and native opens are not seen. Landlock is
not needed: the watcher runs beside the filter alone on older kernels.

    python -m cl_validate.session.open_watch SOCKET_FD CASE_PID [LEFT_OUT...]   (by `OpenWatch`)
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import select
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from cl_validate import procs
from cl_validate.measurements import wire
from cl_validate.session.file_record import FileRecorder, Taken
from cl_validate.session.sandbox import WATCHED

# struct seccomp_notif (80 bytes), seccomp_notif_resp (24) and their ioctls ('!' magic).
_NOTIF = struct.Struct("=QIIiIQ6Q")
_RESP = struct.Struct("=QqiI")
_RECV = 0xC0000000 | (_NOTIF.size << 16) | 0x2100
_SEND = 0xC0000000 | (_RESP.size << 16) | 0x2101
_ID_VALID = 0x40000000 | (8 << 16) | 0x2102
_CONTINUE = 1  # SECCOMP_USER_NOTIF_FLAG_CONTINUE
_AT_FDCWD = -100
_PATH_MAX = 4096
_O_PATH = 0o10000000
#: How long the case waits for the watcher's answer before it gives up on it.
_ASK_S = 30.0


@dataclass(frozen=True)
class Watched:
    """The watcher's answer: what it stamped (`FileRecorder.taken`'s form), and why some of
    what the case read may be missing from it ("" when nothing is)."""

    taken: Taken
    unseen: str = ""


class OpenWatch:
    """An open watcher for this (case) process, started now; `hand_over` gives it the
    filter's listener, `collect` asks what it stamped."""

    def __init__(self, left_out: list[str]) -> None:
        ours, theirs = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", __name__, str(theirs.fileno()), str(os.getpid()),
                 *left_out],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=procs.python_env())
        finally:
            theirs.close()
        self._sock = ours
        self._inode = os.fstat(ours.fileno()).st_ino  # to tell it from a reused number
        self.pid = self._proc.pid
        self.watching = False
        # Yama lets only ancestors read a process's memory: this one and every process forked
        # from here by Python (a target process, a model's worker) let the watcher
        procs.allow_tracing_by(self.pid)
        os.register_at_fork(after_in_child=lambda: procs.allow_tracing_by(self.pid))

    def ready(self, timeout: float = _ASK_S) -> bool:
        """Wait until the watcher is up (it says so once its imports are done); False when
        it is not (it died, or took longer than `timeout`): then it is abandoned."""
        try:
            self._sock.settimeout(timeout)
            up = self._sock.recv(1) == b"R"
        except OSError:
            up = False
        if not up:
            self.abandon()
        return up

    def hand_over(self, listener: int) -> None:
        """Give the watcher the filter's listener (`sandbox.confine` calls this right after
        the filter is in: until the watcher has it, an open of this process waits)."""
        socket.send_fds(self._sock, [b"L"], [listener])
        os.close(listener)
        self.watching = True

    def abandon(self) -> None:
        """No filter was put in: the watcher leaves (its socket reads end-of-file)."""
        with contextlib.suppress(OSError):
            self._sock.close()

    def collect(self) -> Watched:
        """What the watcher stamped so far; a `Watched` saying why when it cannot answer."""
        if not self.watching:
            return Watched((), "")
        try:
            if os.fstat(self._sock.fileno()).st_ino != self._inode:  # the model closed it
                raise OSError(errno.EBADF, "its socket was closed by the case's code")
            self._sock.setblocking(True)
            self._sock.sendall(b"?")
            if not select.select([self._sock], [], [], _ASK_S)[0]:
                raise OSError(errno.ETIMEDOUT, f"no answer in {_ASK_S:g} s")
            payload = wire.read_frame(self._sock.fileno())
            if payload is None:
                raise OSError(errno.EPIPE, "it left")
            return wire.decode(payload, Watched)
        except (OSError, wire.WireError) as exc:
            return Watched((), f"the open watcher did not answer ({exc or type(exc).__name__})")


# -- the watcher ------------------------------------------------------------------------------
def _image(pid: int) -> tuple[str, bytes] | None:
    """The program `pid` runs: its executable and command line (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return os.readlink(f"/proc/{pid}/exe"), f.read()
    except OSError:
        return None


def _noted(flags: int) -> bool:
    """Whether an open with `flags` is of interest: it may read the file, or it makes it
    (creates or truncates: what the case reads back from it later is its own); not an
    ``O_PATH`` handle, nor an append to a file."""
    if flags & _O_PATH:
        return False
    return (flags & os.O_ACCMODE) != os.O_WRONLY or bool(flags & (os.O_TRUNC | os.O_CREAT))


def _string(mem: int, at: int) -> bytes:
    """The NUL-ended string at address `at` of the process whose memory `mem` reads."""
    return os.pread(mem, _PATH_MAX, at).split(b"\0", 1)[0]


#: Programs the pipeline itself runs in a case: the C/C++ compilers and nvcc that TVM links
#: a program with (the device host's), by name or as $CC/$CXX name them.
_TOOLS = frozenset({"cc", "c++", "gcc", "g++", "clang", "clang++", "nvcc"})


def _pipelines_own(image: tuple[str, bytes]) -> bool:
    """Whether a program (its executable and command line, `_image`) is one the pipeline
    runs, not the model's."""
    exe, cmdline = image
    argv = [os.fsdecode(a) for a in cmdline.split(b"\0")]
    if "cl_validate.session.device_host" in argv[1:3]:
        return True
    names = {os.path.basename(os.environ.get(v, "").split(" ")[0]) for v in ("CC", "CXX")}
    tools = (_TOOLS | names) - {""}
    return os.path.basename(argv[0]) in tools or os.path.basename(exe) in tools


class _Watcher:
    def __init__(self, listener: int, case_pid: int, left_out: list[str]) -> None:
        self.listener = listener
        self.image = _image(case_pid)
        self.recorder = FileRecorder(left_out)
        self.unseen = ""
        numbers = WATCHED.get(os.uname().machine, {})
        self.open, self.openat, self.openat2 = (numbers.get(n, -1)
                                                for n in ("open", "openat", "openat2"))
        self._judged: set[tuple[int, tuple[str, bytes]]] = set()

    def serve_one(self) -> None:
        """Take one held call, note its file, let the call go on."""
        buf = bytearray(_NOTIF.size)
        try:
            fcntl.ioctl(self.listener, _RECV, buf, True)
        except OSError as exc:  # ENOENT: the caller went away (a signal) before it was read
            if exc.errno not in (errno.ENOENT, errno.EINTR):
                raise
            return
        nid, pid, _, nr, _, _, *args = _NOTIF.unpack(buf)
        try:
            self._note(nid, pid, nr, args)
        except Exception as exc:  # never keep a call waiting for a fault here
            self.unseen = self.unseen or f"the open watcher failed: {type(exc).__name__}: {exc}"
        finally:
            with contextlib.suppress(OSError):  # ENOENT: the caller went away meanwhile
                fcntl.ioctl(self.listener, _SEND,
                            bytearray(_RESP.pack(nid, 0, 0, _CONTINUE)), True)

    def _note(self, nid: int, pid: int, nr: int, args: list[int]) -> None:
        if nr == self.open:
            dirfd, where, flags = _AT_FDCWD, args[0], args[1]
        elif nr == self.openat:
            dirfd, where, flags = ctypes.c_int32(args[0]).value, args[1], args[2]
        elif nr == self.openat2:  # its flags are in memory (struct open_how), read below
            dirfd, where, flags = ctypes.c_int32(args[0]).value, args[1], None
        else:
            return
        if flags is not None and not _noted(flags):
            return
        image = _image(pid)
        if self.image is None or image is None:
            return
        if image != self.image:  # another program the case runs: whose is it?
            self._judge(pid, image)
            return
        raw = b""
        with self._memory(pid, "opened a file") as mem:
            if mem is None:
                return
            raw = _string(mem, where)
            if flags is None:
                flags = struct.unpack("=Q", os.pread(mem, 8, args[2]))[0]
        if not self._still(nid) or not raw or not _noted(flags):
            return
        name = os.fsdecode(raw)
        if not name.startswith("/"):
            base = f"/proc/{pid}/cwd" if dirfd == _AT_FDCWD else f"/proc/{pid}/fd/{dirfd}"
            try:
                name = os.path.join(os.readlink(base), name)
            except OSError:
                return
        self.recorder.note(name, flags)

    def _judge(self, pid: int, image: tuple[str, bytes]) -> None:
        """A process of the case runs another program, and opens a file: what that program
        reads is not seen, so the case is not kept — unless the program, or one it was
        started by, is the pipeline's own (the device host; the C/C++ compiler or nvcc that
        TVM links a program with, and the passes they run). Judged once a program."""
        if (pid, image) in self._judged:
            return
        self._judged.add((pid, image))
        p, here = pid, image
        for _ in range(64):  # up the process tree to the case's own program
            if _pipelines_own(here):
                return
            parent = procs.parent_of(p) or 0
            up = _image(parent) if parent > 1 else None
            if up is None or up == self.image:
                break
            p, here = parent, up
        argv = [os.fsdecode(a) for a in image[1].split(b"\0") if a]
        shown = " ".join(argv[:4]) + (" ..." if len(argv) > 4 else "")
        self.unseen = self.unseen or (
            f"the case ran {os.path.basename(argv[0]) if argv else '?'} ({shown}), which "
            "reads files: what another program reads is not seen")

    @contextlib.contextmanager
    def _memory(self, pid: int, did: str) -> Iterator[int | None]:
        """``/proc/PID/mem`` open for reading, or None (a process gone, a bad pointer; one
        the watcher may not read makes the case unseen)."""
        try:
            fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.EACCES):
                self.unseen = self.unseen or (
                    f"process {pid} of the case {did} the open watcher may not see "
                    f"({os.strerror(exc.errno)}: Yama's ptrace scope, for a process forked "
                    "outside Python)")
            yield None
            return
        try:
            yield fd
        except OSError:
            pass  # a bad pointer: the call fails on its own (EFAULT)
        finally:
            os.close(fd)

    def _still(self, nid: int) -> bool:
        """Whether the held call is still waiting (what was read was that call's memory, not
        a reused pid's)."""
        try:
            fcntl.ioctl(self.listener, _ID_VALID, bytearray(struct.pack("=Q", nid)), True)
            return True
        except OSError:
            return False

    def answer(self) -> bytes:
        return wire.frame(Watched(self.recorder.taken(), self.unseen))


def main(sock_fd: int, case_pid: int, left_out: list[str]) -> None:
    sock = socket.socket(fileno=sock_fd)
    sock.sendall(b"R")
    msg, fds, _, _ = socket.recv_fds(sock, 16, 1)
    if msg != b"L" or len(fds) != 1:
        return  # the case put no filter in (or is gone)
    watcher = _Watcher(fds[0], case_pid, left_out)
    poller = select.poll()
    poller.register(fds[0], select.POLLIN)
    poller.register(sock, select.POLLIN)
    while True:
        for fd, events in poller.poll():
            if fd == fds[0]:
                if events & select.POLLIN:
                    watcher.serve_one()
                elif events & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                    return  # every process of the case has ended
            else:
                data = b""
                with contextlib.suppress(OSError):
                    data = sock.recv(64)
                if not data:  # the case closed its end: held calls are still served
                    poller.unregister(sock)
                elif b"?" in data:
                    with contextlib.suppress(OSError):
                        sock.sendall(watcher.answer())


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])
