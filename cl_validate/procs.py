"""Process trees: what a case (and whatever a model's code spawned) is made of, and how to end
all of it.

A model's code runs in a case process, and it may start processes of its own: a
``subprocess`` that is never waited for, a ``fork``, a daemon that detaches into its own
session with a cleaned environment. None of them may outlive the case. Two mechanisms make
sure:

- every case process is a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``): a process its
  descendants leave orphaned is re-parented to it, not to init, so its tree (read from
  ``/proc``) always holds every process the case started, detached or not;
- the zygote that forks the case processes, and the parent of a run (the CLI asks for it),
  are subreapers too: when a case process dies, what it leaves comes to the zygote, and when
  the zygote dies, to the parent; each ends every child of its own that is not one of its
  own (the zygote's only children are case processes, the parent's only child the zygote).

Elsewhere than Linux the tree is empty and only the processes themselves are ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

#: The signals that end (or stop) a process and can be blocked: the run's parent receives them
#: on one thread of its own, to tell who sent them (`cl_validate.suite.signals`).
GUARDED_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in (
        "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM",
        "SIGVTALRM", "SIGPROF", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGXCPU", "SIGPOLL",
    ) if hasattr(signal, name))

_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PTRACER = 0x59616D61  # Yama's
_PROC = Path("/proc")


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Make orphaned descendants of this process its children (Linux); False elsewhere."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def allow_tracing_by(pid: int) -> bool:
    """Let `pid` read this process's memory where Linux's Yama restricts that to ancestors
    (``PR_SET_PTRACER``); False where Yama is not there, or elsewhere than Linux."""
    return _prctl(_PR_SET_PTRACER, pid)


def parent_of(pid: int) -> int | None:
    """`pid`'s parent, None once it is gone."""
    st = _stat(pid)
    return st[0] if st is not None else None


def _read(path: str) -> bytes | None:
    """The whole of a small ``/proc`` file, or None if it cannot be read (the process is
    gone). Plain ``os.read``: the run's parent reads these ten times a second."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        parts = []
        while chunk := os.read(fd, 1 << 16):
            parts.append(chunk)
        return b"".join(parts)
    except OSError:
        return None
    finally:
        os.close(fd)


def _stat(pid: int, *, zombies: bool = True) -> tuple[int, str] | None:
    """(parent pid, state) of a process (a zombie counts unless `zombies` is off); None if it
    is gone."""
    raw = _read(f"/proc/{pid}/stat")
    if not raw:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
    if len(fields) < 2:
        return None
    state = fields[0].decode("ascii", "replace")
    if not zombies and state == "Z":
        return None
    return int(fields[1]), state


def resume_if_stopped(pid: int) -> bool:
    """Continue `pid` if a signal stopped it (SIGSTOP, SIGTSTP: state ``T``); True if it was.
    A process being traced (``t``) is left to its tracer."""
    st = _stat(pid)
    if st is None or st[1] != "T":
        return False
    try:
        os.kill(pid, signal.SIGCONT)
    except OSError:
        return False
    return True


def _parents(*, zombies: bool = False) -> dict[int, int]:
    """pid → parent pid of every process (zombies only when asked: they hold no resources,
    but a parent must collect them)."""
    out: dict[int, int] = {}
    try:
        entries = os.listdir(_PROC)
    except OSError:
        return out
    for name in entries:
        if name.isdigit():
            st = _stat(int(name))
            if st is not None and (zombies or st[1] != "Z"):
                out[int(name)] = st[0]
    return out


def children(pid: int, *, zombies: bool = False) -> list[int]:
    """The processes whose parent is `pid` (from its own ``children`` lists where the
    kernel has them, else one pass over ``/proc``)."""
    listed = _listed_children(pid)
    if listed is None:
        return [c for c, parent in _parents(zombies=zombies).items() if parent == pid]
    return [c for c in listed
            if (st := _stat(c, zombies=zombies)) is not None and st[0] == pid]


def descendants(pid: int) -> list[int]:
    """Every live process below `pid`, children before grandchildren, from one pass over
    all of ``/proc`` (what ends a tree: it cannot miss a child the way the kernel's per-task
    lists of `tree` can)."""
    below: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        below.setdefault(parent, []).append(child)
    out: list[int] = []
    todo = list(below.get(pid, []))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(below.get(p, []))
    return out


_CHILDREN_FILES: bool | None = None


def _listed_children(pid: int) -> list[int] | None:
    """`pid`'s children (zombies too) as the kernel lists them per thread
    (``/proc/PID/task/TID/children``): a few small reads, not one per process of the
    machine. None where the kernel has no such lists. A child that ends while the list is
    read may be missing: callers that end processes ask again until none is left."""
    global _CHILDREN_FILES
    if _CHILDREN_FILES is None:
        _CHILDREN_FILES = os.path.exists(
            f"/proc/self/task/{threading.get_native_id()}/children")
    if not _CHILDREN_FILES:
        return None
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        out.extend(int(c) for c in (_read(f"/proc/{pid}/task/{tid}/children") or b"").split())
    return list(dict.fromkeys(out))


def tree(pid: int) -> list[int]:
    """`pid`'s live descendants, children before grandchildren, from the processes' own
    ``children`` lists (`_listed_children`): cheap enough for the run's parent to ask ten
    times a second for every case. For accounting (memory); ending a tree reads all of
    ``/proc`` (`descendants`)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop(0)
        kids = children(p)
        out.extend(kids)
        todo.extend(kids)
    return out


def describe(pid: int) -> str:
    """``pid 123: sleep 1000`` (its command line), for a report."""
    raw = _read(f"/proc/{pid}/cmdline") or b""
    cmd = " ".join(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a)
    return f"pid {pid}: {cmd[:120] or '?'}"


def ancestors(pid: int) -> list[int]:
    """`pid` and its parent, grandparent, ... up to the first process (a zombie still shows
    its parent); [] when `pid` is gone."""
    chain: list[int] = []
    while pid > 0 and pid not in chain:
        st = _stat(pid, zombies=True)
        if st is None:
            break
        chain.append(pid)
        pid = st[0]
    return chain


def kill(pids: list[int]) -> None:
    for p in pids:
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGKILL)


def reap(pids: list[int] | None = None) -> None:
    """Collect exited children (orphans re-parented to a subreaper are children too, and
    would stay zombies): those in `pids`, or every one (only where no other code waits for
    its own children: not in a process whose other code waits for its own)."""
    if pids is not None:  # just killed: give them a moment to exit
        left, deadline = set(pids), time.monotonic() + 2.0
        while left and time.monotonic() < deadline:
            for p in list(left):
                try:
                    if os.waitpid(p, os.WNOHANG)[0] != 0:
                        left.discard(p)
                except (ChildProcessError, OSError):
                    left.discard(p)
            if left:
                time.sleep(0.01)
        return
    for _ in ended_children():
        pass


def ended_children() -> Iterator[tuple[int, int]]:
    """(pid, wait status) of every child of this process that has ended, collected now."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, status


def end_descendants(pid: int, *, settle_s: float = 2.0, keep: tuple[int, ...] = ()
                    ) -> list[str]:
    """Kill every process below `pid` but those in `keep` (repeatedly: a dying process may
    leave orphans that are re-parented a moment later); returns a description of each, as
    found first."""
    found: list[str] = []
    seen: set[int] = set()
    deadline = time.monotonic() + settle_s
    while True:
        below = [p for p in descendants(pid) if p not in keep]
        new = [p for p in below if p not in seen]
        found.extend(describe(p) for p in new)
        seen.update(new)
        if not below:
            return found
        kill(below)
        if pid == os.getpid():
            reap()
        if time.monotonic() > deadline:
            return found
        time.sleep(0.02)


_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / (1 << 20) if hasattr(os, "sysconf") else 0.0


def rss_mb(pids: list[int]) -> float | None:
    """Resident memory of these processes together (Linux, ``statm``: the same pages as
    ``VmRSS``); None where it cannot be read."""
    total, seen = 0.0, False
    for pid in pids:
        raw = _read(f"/proc/{pid}/statm")
        fields = raw.split() if raw else []
        if len(fields) > 1 and _PAGE_MB:
            total += int(fields[1]) * _PAGE_MB
            seen = True
    return total if seen else None


def reset_peak_rss() -> bool:
    """Start this process's peak resident memory afresh from what it holds now (Linux's
    ``clear_refs`` 5), so one process's peak is measured per target, not since it started; False
    where the kernel does not offer it."""
    try:
        with open(_PROC / "self" / "clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """This process's peak resident memory since `reset_peak_rss` (``VmHWM``), or since it
    started where that cannot be read."""
    try:
        with open(_PROC / "self" / "status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def python_env() -> dict[str, str]:
    """This process's environment for a Python it starts (the device probe, a device host):
    its import path as ``PYTHONPATH``, so the new interpreter imports what this one does."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)}
