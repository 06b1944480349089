"""The end of a case's processes: telling when a case is over and how it ended, ending
what is left of it, and collecting what a dead zygote leaves behind.

A case is over when its case process said it is done (or its pipe closed) and every target
process's pipe closed; how a process ended comes a moment later (from the zygote, or from
the case process for its targets), so it is waited for, a short grace period. A case that
ends without saying so crashed, and is told apart from one whose model closed the pipe. A
case that is over has its whole process tree killed (what it started but did not end too)
and its pipes and log closed. With `reap_orphans` (the CLI) this process is a subreaper:
what a dead zygote's tree leaves behind comes here and is ended, so that no stray process
outlives the run. A case process or the zygote stopped by a signal (a model's code the only
likely sender: they have no terminal) is continued. Costs a walk of ``/proc`` per case that
ends and per zygote that dies, and a look at the stop state of each case process per tick.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

from cl_validate import procs
from cl_validate.checks.compile import CaseKind
from cl_validate.suite.lifecycle import CaseOwner, CaseState, Job

#: How long a case process that closed its result pipe may take to end before it is killed.
EXIT_GRACE_S = 2.0


def case_over(job: Job, owner: CaseOwner) -> bool:
    """Whether `job` is over: failed, or its case process finished (it said so, or its
    pipe closed) and every target process's pipe closed; a target still owed then
    ended without reporting, and the case's own end (without `CaseDone`) is a crash.
    How a process ended comes a moment after its pipe closed (from the zygote or the
    case process): waited for, for a short grace period."""
    if job.failed:
        return True
    if job.over_at is None or any(not s.eof and not s.done for s in job.targets.values()):
        return False
    waiting = time.perf_counter() - job.over_at < EXIT_GRACE_S
    if job.state is not CaseState.REPORTED:  # it ended without saying it was done
        orphaned = owner.orphaned(job)
        if job.status is None and job.pid is not None and orphaned:
            job.status = collect(job.pid)  # its zygote died: it came here (a subreaper)
        gone = job.status is not None or (orphaned and job.pid is not None
                                          and not alive(job.pid))
        if not gone and waiting:
            return False
        if job.status is not None:
            owner.fail(job, f"case process {describe_status(job.status)} while running this "
                       "case", CaseKind.WORKER_CRASHED)
        else:
            owner.fail(job, "the case process closed its result pipe before it reported (the "
                       "model's code closed it, or the process died)", CaseKind.WORKER_CRASHED)
        return True
    lost = [t for t in job.pending if t in job.targets]
    if lost and waiting and any(t not in job.exited for t in lost):
        return False
    for t in lost:
        why = describe_status(job.exited[t]) if t in job.exited else "ended"
        owner.fail(job, f"the process measuring {t} {why} before it reported",
                   CaseKind.WORKER_CRASHED, only=[t])
    if job.pending:  # never granted, never answered: the case broke its word
        owner.fail(job, "the case process ended with targets it never measured",
                   CaseKind.WORKER_CRASHED)
    return True


class Reaper:
    """Ends processes and collects them; knows which case processes run (never taken for
    orphans, whatever their parent is now)."""

    def __init__(self, reap_orphans: bool) -> None:
        #: whether this process is a subreaper that ends what a dead zygote left behind
        self.reap_orphans = reap_orphans
        #: case processes that run: never taken for orphans, whatever their parent is now
        self.running_pids: set[int] = set()
        self._resumed: set[int] = set()  # processes continued after a stop (warned once)

    def kill(self, job: Job) -> None:
        """End `job`'s processes and everything they started."""
        if job.pid is not None:
            procs.kill([*procs.descendants(job.pid), job.pid])
            with contextlib.suppress(OSError):
                os.killpg(job.pid, signal.SIGKILL)  # its group: children it has not lost
        if job.control is not None:  # also ends a case the zygote had not started yet
            with contextlib.suppress(OSError):
                job.control.close()
            job.control = None

    @staticmethod
    def close(job: Job) -> None:
        """Close `job`'s pipes and log."""
        for s in job.streams():
            if s.fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(s.fd)
                s.fd = -1
        if job.control is not None:
            with contextlib.suppress(OSError):
                job.control.close()
            job.control = None
        if job.log_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(job.log_fd)
            job.log_fd = -1

    def retire(self, job: Job, *, orphaned: bool) -> None:
        """A case that is over: whatever of it is left ended, its pipes and log gone;
        `orphaned`: its zygote is not the current one, so its case process is this
        process's child now (collected here)."""
        self.kill(job)
        self.close(job)
        if job.pid is not None:
            self.running_pids.discard(job.pid)
            if orphaned:
                collect(job.pid)

    def end_orphans(self, zygote_pid: int | None) -> None:
        """What a dead zygote's tree left behind was re-parented to this process (a
        subreaper): every child of this process but the zygote (`zygote_pid`) and the
        running case processes. End them (and what they started), and collect them."""
        if not self.reap_orphans:
            return
        me = os.getpid()
        keep = set(self.running_pids)
        if zygote_pid is not None:
            keep.add(zygote_pid)
        for _ in range(3):  # a killed orphan's own children arrive a moment later
            ours = [p for p in procs.children(me, zombies=True) if p not in keep]
            if not ours:
                return
            for p in ours:
                procs.kill([*procs.descendants(p), p])
            procs.reap(ours)
            time.sleep(0.02)

    def resume_stopped(self, named: dict[int, str]) -> None:
        """Nothing but a case's code stops the zygote or a case process (they have no
        terminal): where the kernel does not keep cases apart (`session.sandbox`), one that
        stops the zygote would hold every case after it until its timeout, one that stops
        another case would have it blamed for a timeout. Continue them (`named`: pid → what
        it is, for the warning)."""
        for pid, what in named.items():
            if procs.resume_if_stopped(pid) and pid not in self._resumed:
                self._resumed.add(pid)
                print(f"cl-validate: warning: {what} (pid {pid}) was stopped by a "
                      "signal, a model's code the likely sender: continued", file=sys.stderr)


def collect(pid: int) -> int | None:
    """The wait status of `pid` if it is an ended child of this process (collected now)."""
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        return None
    return status if got == pid else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return describe_exit(-os.WTERMSIG(status))
    return describe_exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else None)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "stopped"
    if code < 0:
        try:
            return f"died with {signal.Signals(-code).name}"
        except ValueError:
            return f"died with signal {-code}"
    return f"exited with status {code}"
