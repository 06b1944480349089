"""The kernel's wall around a case: what a case's processes may not do to any process outside
the case, enforced by Linux itself (Landlock's scopes, Linux 6.12 and later).

A case process confines itself (`confine`) right after the zygote forks it, before any of the
model's code runs, and everything it starts inherits the wall: a case's processes may signal
and trace (``ptrace``, ``/proc/PID/mem``, ``/proc/PID/fd``) only processes of their own
case. A signal to the run's parent, to the zygote or to another case — SIGKILL and SIGSTOP
included — fails with ``PermissionError`` (EPERM) in the process that sent it, and nothing
outside the case sees it; the parent's pipes and terminal cannot be opened through ``/proc``.
Signals into the case (the parent ending it on a timeout) and the kernel's own (a child's
exit) are not affected, nor are files, sockets or anything else a case does.

Where the kernel has no such scope (older Linux, other systems), or ``CL_VALIDATE_UNCONFINED``
is set, nothing is confined and the parent's own defence stands alone
(`cl_validate.suite.signals`)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import platform
import re
import struct
import sys
import traceback

#: Landlock's system calls have one number on every architecture below (Linux ≥ 5.13).
_CREATE_RULESET, _RESTRICT_SELF = 444, 446
_ARCHES = {"x86_64", "aarch64", "arm64", "riscv64", "ppc64le", "s390x"}
_ASK_VERSION = 1  # LANDLOCK_CREATE_RULESET_VERSION
_SCOPE_SIGNAL = 1 << 1  # LANDLOCK_SCOPE_SIGNAL (ABI 6)
_SIGNAL_SCOPE_ABI = 6
_PR_SET_NO_NEW_PRIVS = 38

#: Set (to anything) in the environment of ``cl-validate run``: case processes are not
#: confined, and only the parent's own defence stands (for a model that must signal a
#: process of its own outside the case, and to test that defence).
UNCONFINED_ENV = "CL_VALIDATE_UNCONFINED"
#: Whether this process confined itself (set by `confine`).
confined = False


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux") or platform.machine() not in _ARCHES:
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - a Linux without a C library to ask
        return None


def abi() -> int:
    """The Landlock ABI this kernel offers (0: none, or not Linux)."""
    libc = _libc()
    if libc is None:
        return 0
    version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0),
                           ctypes.c_uint32(_ASK_VERSION))
    return max(int(version), 0)


def available() -> bool:
    """Whether a case process started from here will be confined: Landlock with signal
    scoping, and `UNCONFINED_ENV` not set."""
    return not os.environ.get(UNCONFINED_ENV) and abi() >= _SIGNAL_SCOPE_ABI


def confine() -> str | None:
    """Confine this process and everything it starts from now on to signalling and tracing
    only themselves. Call it while the process has one thread (right after a fork): the
    kernel confines the calling thread, and the threads and processes it starts after.
    Returns None when confined, else why not (the run goes on unconfined)."""
    global confined
    if os.environ.get(UNCONFINED_ENV):
        return f"{UNCONFINED_ENV} is set"
    libc = _libc()
    if libc is None:
        return "not Linux on a known architecture"
    version = abi()
    if version < _SIGNAL_SCOPE_ABI:
        return (f"the kernel's Landlock ABI is {version}, signal scoping needs "
                f"{_SIGNAL_SCOPE_ABI} (Linux 6.12)")
    attr = struct.pack("=QQQ", 0, 0, _SCOPE_SIGNAL)  # no file or network rules: scope only
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = libc.syscall(_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if fd < 0:
        return f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}"
    try:
        # Required of a process without CAP_SYS_ADMIN; from now on nothing this process runs
        # gains privileges through a setuid program either.
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}"
        if libc.syscall(_RESTRICT_SELF, fd, ctypes.c_uint32(0)) != 0:
            return f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}"
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    confined = True
    return None


#: A call that sends a signal, as a model's code writes it.
_SIGNALLING = re.compile(r"\b(kill|killpg|pthread_kill|pidfd_send_signal|sigqueue|"
                         r"send_signal|terminate)\s*\(")


def refused_signal(exc: BaseException | None) -> str | None:
    """When `exc` (or what it was raised from) is the wall refusing a signal in this
    confined process — ``PermissionError`` (EPERM) raised by a call that signals — the call
    and where it was made (``os.kill(parent, 15) at net.py:12``); else None."""
    if not confined:
        return None
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, PermissionError) and exc.errno == errno.EPERM:
            frames = traceback.extract_tb(exc.__traceback__)
            for frame in reversed(frames):
                line = frame.line or ""
                if _SIGNALLING.search(line):
                    return f"{line.strip()} at {os.path.basename(frame.filename)}:{frame.lineno}"
        exc = exc.__cause__ or exc.__context__
    return None
