"""The kernel's wall around a case: what a case's processes may not do to any process outside
the case, enforced by Linux itself (Landlock's scopes, Linux 6.12 and later).

A case process confines itself (`confine`) right after the zygote forks it, before any of the
model's code runs, and everything it starts inherits the wall: a case's processes may signal
and trace (``ptrace``, ``/proc/PID/mem``, ``/proc/PID/fd``) only processes of their own
case. A signal to the run's parent, to the zygote or to another case — SIGKILL and SIGSTOP
included — fails with ``PermissionError`` (EPERM) in the process that sent it, and nothing
outside the case sees it; the parent's pipes and terminal cannot be opened through ``/proc``.
Signals into the case (the parent ending it on a timeout) and the kernel's own (a child's
exit) are not affected.

Two more walls go up with it, so a case cannot change the run from outside its processes:

- a seccomp filter refuses (EPERM) the calls that set another process's resource limits,
  priority, CPU affinity, scheduling or I/O priority — ``prlimit64`` with a pid and a new
  limit, ``setpriority``/``ioprio_set`` on another process, a process group or a user,
  ``sched_setaffinity``/``sched_setparam``/``sched_setscheduler``/``sched_setattr`` with a
  pid — while a case may still set its own and read anyone's; and every call made through
  another ABI (i386's ``int 0x80`` from a 64-bit process, x32's numbers), which would reach
  the same kernel functions under numbers the filter does not compare;
- with an open watcher (`cl_validate.session.open_watch`, for the measurement cache), the
  same filter holds each ``open``/``openat``/``openat2`` for the watcher to stamp the file,
  and refuses ``io_uring`` (ENOSYS), which opens files past any filter;
- Landlock refuses writing files under ``/proc`` (``/proc/PID/oom_score_adj`` of the parent,
  say); writing anywhere else is as before. A case with a target whose programs run on a
  GPU of this machine confines itself with ``proc_writes`` and walls ``/proc`` in a layer
  of its own (`wall_proc`) after it started its device hosts: the CUDA driver (570 and
  later) writes its threads' names to ``/proc/PID/task/TID/comm`` when it starts and fails
  without (on an H200, a wall over all of ``/proc`` left the GPU unseen), and a Landlock
  rule names existing folders only, so each host walls ``/proc`` but its own folder itself.

The parent's report writes then never depend on limits a case could set (a case that lowered
the parent's ``RLIMIT_FSIZE`` hard limit made every report write fail, and the parent cannot
raise a hard limit back). What it costs: the filter is 40 BPF instructions run on every
system call of the case (tens of nanoseconds); the file rule is checked on each open for
writing.

Where the kernel has no such scope (Linux before 6.12), the seccomp filter (and an open
watcher) still goes in, alone: the calls above stay refused, while signals and ``/proc``
writes are left to the parent's own defence (`cl_validate.suite.signals`). On other
systems, or with ``CL_VALIDATE_UNCONFINED`` set, nothing is confined and that defence
stands alone."""

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
from collections.abc import Callable, Sequence

#: Landlock's system calls have one number on every architecture below (Linux ≥ 5.13).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_RULE_PATH_BENEATH = 1
_FS_WRITE_FILE = 1 << 1  # LANDLOCK_ACCESS_FS_WRITE_FILE
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
#: Whether this process's seccomp filter is in (set by `confine`): with Landlock, or alone
#: on a kernel without Landlock's signal scoping.
filtered = False


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


def filterable() -> bool:
    """Whether a case process started from here will put the seccomp filter in (Linux on an
    architecture whose numbers it knows, `UNCONFINED_ENV` not set), with or without
    Landlock: the filter and an open watcher need no Landlock."""
    return (not os.environ.get(UNCONFINED_ENV) and _libc() is not None
            and platform.machine() in _SYSCALLS)


def confine(proc_writes: bool = False,
            watch: Callable[[int], None] | None = None) -> str | None:
    """Confine this process and everything it starts from now on to signalling and tracing
    only themselves. Call it while the process has one thread (right after a fork): the
    kernel confines the calling thread, and the threads and processes it starts after.
    `proc_writes` leaves files under ``/proc`` writable (a case that opens a GPU: its
    driver names its threads in ``/proc/PID/task/TID/comm``, and fails without). `watch`
    (an open watcher's `hand_over`, `cl_validate.session.open_watch`) is given the filter's
    listener, and every open of this process and what it starts waits for it; where the
    kernel has no listener to give, it is not called.
    Returns None when confined, else why not (the run goes on unconfined). On a kernel
    without Landlock's signal scoping the seccomp filter still goes in (`filtered`), and the
    reason names what is missing."""
    global confined, filtered
    if os.environ.get(UNCONFINED_ENV):
        return f"{UNCONFINED_ENV} is set"
    libc = _libc()
    if libc is None:
        return "not Linux on a known architecture"
    version = abi()
    if version < _SIGNAL_SCOPE_ABI:
        unscoped = (f"the kernel's Landlock ABI is {version}, signal scoping needs "
                    f"{_SIGNAL_SCOPE_ABI} (Linux 6.12)")
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 and \
                _deny_foreign_limits(libc, watch) is None:
            filtered = platform.machine() in _SYSCALLS
            return unscoped + ("; the seccomp filter alone is in" if filtered else "")
        return unscoped
    # Writing files is handled, and allowed beneath every top-level folder but /proc.
    attr = struct.pack("=QQQ", 0 if proc_writes else _FS_WRITE_FILE, 0, _SCOPE_SIGNAL)

    def filter_in() -> str | None:
        global filtered
        why = _deny_foreign_limits(libc, watch)
        if why is None:
            filtered = platform.machine() in _SYSCALLS
        return why

    why = _layer(libc, attr, None if proc_writes else [], before=filter_in)
    if why is not None:
        return why
    confined = True
    return None


def wall_proc(own: bool) -> str | None:
    """One more Landlock layer on this process and what it starts from now on: files under
    ``/proc`` read-only, but (with `own`) those beneath this process's own ``/proc/PID``.
    For a case that opens a GPU, confined with `proc_writes`: its device hosts, started
    first, each put it up with `own` (the driver names the host's threads in its own
    folder, which exists now), then the case process without. Layers only ever narrow what
    the ones below allow. Returns None when in, else why not."""
    libc = _libc()
    if libc is None or abi() < 1:
        return "no Landlock in this kernel"
    return _layer(libc, struct.pack("=Q", _FS_WRITE_FILE),
                  [f"/proc/{os.getpid()}"] if own else [])


def _layer(libc: ctypes.CDLL, attr: bytes, allow: Sequence[str] | None,
           before: Callable[[], str | None] = lambda: None) -> str | None:
    """One Landlock layer on this process and what it starts from now on: a ruleset with
    `attr` (the accesses it handles, its scopes); with `allow`, file writes allowed beneath
    every top-level folder but /proc and beneath `allow`; no new privileges (required of a
    process without CAP_SYS_ADMIN; nothing it runs gains privileges through a setuid
    program either); `before` (the seccomp filter) put in; then the layer restricts this
    process. None when in, else why not."""
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = libc.syscall(_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if fd < 0:
        return f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}"
    try:
        why = None if allow is None else _allow_writes_but_proc(libc, fd, allow)
        if why is None and libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            why = f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}"
        why = why or before()
        if why is None and libc.syscall(_RESTRICT_SELF, fd, ctypes.c_uint32(0)) != 0:
            why = f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}"
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return why


def _allow_writes_but_proc(libc: ctypes.CDLL, ruleset: int, also: Sequence[str] = ()
                           ) -> str | None:
    """Rules allowing file writes beneath every top-level folder but /proc (and the root's
    own files), and beneath the folders `also`: the parent's and the zygote's /proc/PID
    files stay read-only to a case."""
    tops = [os.path.join("/", name) for name in sorted(os.listdir("/")) if name != "proc"]
    for path in [*tops, *also]:
        if not os.path.isdir(path) or os.path.islink(path):
            continue
        try:
            dirfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            rule = struct.pack("=Qi", _FS_WRITE_FILE, dirfd)
            buf = ctypes.create_string_buffer(rule, len(rule))
            if libc.syscall(_ADD_RULE, ruleset, ctypes.c_int(_RULE_PATH_BENEATH), buf,
                            ctypes.c_uint32(0)) != 0:
                return f"landlock_add_rule({path}): {os.strerror(ctypes.get_errno())}"
        finally:
            os.close(dirfd)
    return None


# seccomp: refuse the calls that change another process's limits or scheduling.
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_RET_ALLOW, _RET_EPERM = 0x7FFF0000, 0x00050000 | errno.EPERM
_RET_ENOSYS = 0x00050000 | errno.ENOSYS
_RET_USER_NOTIF = 0x7FC00000  # hold the call for the filter's listener (an open watcher)
_SECCOMP = {"x86_64": 317, "aarch64": 277, "arm64": 277}  # seccomp(2)
_SET_MODE_FILTER, _FLAG_NEW_LISTENER = 1, 1 << 3
_IO_URING_SETUP = 425  # one number on every architecture
#: clone's flag that makes the new process a child of the caller's parent (the zygote):
#: outside the case's process tree, its accounting and its memory cap
_CLONE_PARENT = 0x00008000
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K: jump if A & k
_LD_ABS, _JEQ, _RET = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET
_JGE = 0x35  # BPF_JMP|BPF_JGE|BPF_K
#: x86-64's x32 ABI: the same calls under other numbers, this bit set (``__X32_SYSCALL_BIT``)
_X32_BIT = 0x40000000
#: (audit arch, {call: number}) of each architecture the filter knows
_SYSCALLS = {
    "x86_64": (0xC000003E, {"prlimit64": 302, "setpriority": 141, "sched_setaffinity": 203,
                            "sched_setparam": 142, "sched_setscheduler": 144,
                            "sched_setattr": 314, "ioprio_set": 251, "clone": 56,
                            "clone3": 435}),
    "aarch64": (0xC00000B7, {"prlimit64": 261, "setpriority": 140, "sched_setaffinity": 122,
                             "sched_setparam": 118, "sched_setscheduler": 119,
                             "sched_setattr": 274, "ioprio_set": 30, "clone": 220,
                             "clone3": 435}),
}
_SYSCALLS["arm64"] = _SYSCALLS["aarch64"]
#: the calls a watched filter holds for its listener (`cl_validate.session.open_watch`)
WATCHED = {
    "x86_64": {"open": 2, "openat": 257, "openat2": 437},
    "aarch64": {"openat": 56, "openat2": 437},
}
WATCHED["arm64"] = WATCHED["aarch64"]


def _arg(i: int, high: bool = False) -> int:
    """The offset of argument `i`'s low (or high) 32 bits in ``struct seccomp_data``."""
    return 16 + 8 * i + (4 if high else 0)


def filter_program(arch: str, pid: int, watch: bool = False
                   ) -> list[tuple[int, int, int, int]] | None:
    """The filter for a process `pid` on `arch` as BPF instructions ``(code, jt, jf, k)``,
    or None for an architecture it does not know. With `watch`, opens are held for the
    filter's listener and ``io_uring`` (which opens files past any filter) is refused."""
    if arch not in _SYSCALLS:
        return None
    audit, nr = _SYSCALLS[arch]
    prog: list[tuple[int, int, int, int]] = []
    labels: dict[str, int] = {}
    fixups: list[tuple[int, str | None, str | None]] = []

    def emit(code: int, k: int, jt: str | None = None, jf: str | None = None) -> None:
        if jt is not None or jf is not None:
            fixups.append((len(prog), jt, jf))
        prog.append((code, 0, 0, k))

    def label(name: str) -> None:
        labels[name] = len(prog)

    def self_or_zero(arg: int, ok: str, bad: str) -> None:
        """Jump to `ok` when argument `arg` is 0 or this process's pid, else to `bad`."""
        emit(_LD_ABS, _arg(arg, high=True))
        emit(_JEQ, 0, None, bad)
        emit(_LD_ABS, _arg(arg))
        emit(_JEQ, 0, ok, None)
        emit(_JEQ, pid, ok, bad)

    # Another ABI's calls are other numbers for the same kernel functions: a 64-bit process
    # can make i386 calls (``int 0x80``, IA32 emulation is on by default on x86-64 Linux)
    # or x32 ones (the number's x32 bit). A case has no use for either: refused whole.
    emit(_LD_ABS, 4)  # arch
    emit(_JEQ, audit, None, "deny")
    emit(_LD_ABS, 0)  # nr
    if arch == "x86_64":
        emit(_JGE, _X32_BIT, "deny", None)
    emit(_JEQ, nr["prlimit64"], "prlimit", None)
    emit(_JEQ, nr["setpriority"], "setpriority", None)
    emit(_JEQ, nr["ioprio_set"], "ioprio", None)
    emit(_JEQ, nr["clone"], "clone", None)
    emit(_JEQ, nr["clone3"], "enosys", None)
    if watch:
        for number in WATCHED[arch].values():
            emit(_JEQ, number, "notify", None)
        emit(_JEQ, _IO_URING_SETUP, "enosys", None)
    for call in ("sched_setaffinity", "sched_setparam", "sched_setscheduler", "sched_setattr"):
        emit(_JEQ, nr[call], "by_pid", None)
    emit(_RET, _RET_ALLOW)
    label("prlimit")  # prlimit64(pid, resource, new, old): another's, only to read it
    self_or_zero(0, "allow", "prlimit_new")
    label("prlimit_new")
    emit(_LD_ABS, _arg(2, high=True))
    emit(_JEQ, 0, None, "deny")
    emit(_LD_ABS, _arg(2))
    emit(_JEQ, 0, "allow", "deny")
    label("setpriority")  # setpriority(which, who, prio): PRIO_PROCESS (0) only, not a
    emit(_LD_ABS, _arg(0))  # process group or a user (the run's parent is one of those)
    emit(_JEQ, 0, "who", "deny")
    label("ioprio")  # ioprio_set(which, who, ioprio): IOPRIO_WHO_PROCESS (1) only
    emit(_LD_ABS, _arg(0))
    emit(_JEQ, 1, "who", "deny")
    label("who")
    self_or_zero(1, "allow", "deny")
    label("by_pid")
    self_or_zero(0, "allow", "deny")
    label("clone")  # clone(flags, ...): never CLONE_PARENT (its flags are argument 0 on
    emit(_LD_ABS, _arg(0))  # x86-64 and arm64 alike)
    emit(_JSET, _CLONE_PARENT, "deny", "allow")
    # clone3(args, size): its flags are in memory a filter cannot read, so "not implemented":
    label("enosys")  # the C library falls back to clone (io_uring's users to plain calls)
    emit(_RET, _RET_ENOSYS)
    if watch:
        label("notify")
        emit(_RET, _RET_USER_NOTIF)
    label("deny")
    emit(_RET, _RET_EPERM)
    label("allow")
    emit(_RET, _RET_ALLOW)
    out = []
    for i, (code, _, _, k) in enumerate(prog):
        fix = next((f for f in fixups if f[0] == i), None)
        jt = labels[fix[1]] - i - 1 if fix and fix[1] else 0
        jf = labels[fix[2]] - i - 1 if fix and fix[2] else 0
        out.append((code, jt, jf, k))
    return out


def _deny_foreign_limits(libc: ctypes.CDLL, watch: Callable[[int], None] | None
                         ) -> str | None:
    arch = platform.machine()
    for watching in ((True, False) if watch is not None and arch in _SECCOMP else (False,)):
        prog = filter_program(arch, os.getpid(), watch=watching)
        if prog is None:
            return None  # an architecture without its numbers here: Landlock's walls hold
        raw = b"".join(struct.pack("=HBBI", *ins) for ins in prog)
        filt = ctypes.create_string_buffer(raw, len(raw))
        fprog = struct.pack("@HP", len(prog), ctypes.addressof(filt))  # struct sock_fprog
        fbuf = ctypes.create_string_buffer(fprog, len(fprog))
        if not watching:
            if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, fbuf, 0, 0) != 0:
                return f"prctl(PR_SET_SECCOMP): {os.strerror(ctypes.get_errno())}"
            return None
        listener = libc.syscall(_SECCOMP[arch], ctypes.c_uint(_SET_MODE_FILTER),
                                ctypes.c_uint(_FLAG_NEW_LISTENER), fbuf)
        if listener >= 0:
            assert watch is not None
            watch(int(listener))  # before any open of this process, which now waits for it
            return None
        # no user notification here (Linux < 5.5), or a listener already: not watched
    return None


#: A call that sends a signal, as a model's code writes it.
_SIGNALLING = re.compile(r"\b(kill|killpg|pthread_kill|pidfd_send_signal|sigqueue|"
                         r"send_signal|terminate)\s*\(")
#: A call that changes another process's limits or scheduling, or a /proc file of one.
_REACHING = re.compile(r"\b(prlimit|setrlimit|setpriority|sched_setaffinity|"
                       r"sched_setscheduler|sched_setparam|ioprio_set)\s*\(|oom_score_adj|"
                       r"/proc/")


def refused_signal(exc: BaseException | None) -> str | None:
    """When `exc` (or what it was raised from) is the wall refusing a signal in this
    confined process — ``PermissionError`` (EPERM) raised by a call that signals — the call
    and where it was made (``os.kill(parent, 15) at net.py:12``); else None."""
    return _refused(exc, _SIGNALLING) if confined else None


def refused_reach(exc: BaseException | None) -> str | None:
    """The same for the other walls: a call that changes another process's limits, priority,
    affinity or scheduling, or writes a /proc file (``resource.prlimit(ppid, ...) at
    net.py:9``); else None."""
    return _refused(exc, _REACHING) if confined or filtered else None


def _refused(exc: BaseException | None, calls: re.Pattern[str]) -> str | None:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, PermissionError) and exc.errno in (errno.EPERM, errno.EACCES):
            frames = traceback.extract_tb(exc.__traceback__)
            for frame in reversed(frames):
                line = frame.line or ""
                if calls.search(line):
                    return f"{line.strip()} at {os.path.basename(frame.filename)}:{frame.lineno}"
        exc = exc.__cause__ or exc.__context__
    return None
