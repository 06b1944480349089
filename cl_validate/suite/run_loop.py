"""One run of the pool over a list of cases: the loop that hands cases out, shares the
slots, reads what comes back, enforces the limits and reports every target exactly once.

`RunLoop` holds what the loop's steps share — the cases still to hand out, the jobs running,
what each case still owes, the cases handed out again after their zygote died — and each
step is a method on it; the helpers that watch one case (`result_pipes`, `limits`,
`reaping`) report back through its `deliver` and `fail`. Every selected target of every case
is reported exactly once, whatever happens: a result, an error measurement with the reason
and the tail of the case's output, or, should the loop itself have a bug, an internal error.
A tick waits at most `POLL_S` for a message or output, so a case's end is seen within a
tenth of a second; the loop itself costs a few system calls per running case per tick.
"""

from __future__ import annotations

import itertools
import os
import queue
import select
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from dataclasses import replace

from cl_validate import procs
from cl_validate.checks.compile import CaseKind
from cl_validate.errors import ErrorRecord
from cl_validate.measurements.measurement import Measurement
from cl_validate.measurements.messages import (
    Exited,
    FileStamp,
    Forked,
    Grant,
    StartCase,
    TargetMeasured,
    frame,
)
from cl_validate.spec import CaseSpec
from cl_validate.spec.options import RunOptions, selected_targets
from cl_validate.suite.case_logs import LogFiles
from cl_validate.suite.lifecycle import CaseState, Job, Stream
from cl_validate.suite.limits import enforce_limits, memory_cap
from cl_validate.suite.reaping import Reaper, case_over
from cl_validate.suite.result_pipes import read_results
from cl_validate.suite.slots import next_targets, reserve, share_slots
from cl_validate.suite.zygote_client import POLL_S, Zygote, ZygoteClient

#: What the pool hands each target's result to (a failed case arrives as an error measurement)
OnTarget = Callable[[CaseSpec, TargetMeasured], None]
#: What the pool hands the files a case read to, with its targets' cache keys and why they
#: are not known whole ("" when they are): `cl_validate.suite.driver.OnInputs`
OnInputs = Callable[[CaseSpec, dict[str, str], tuple[FileStamp, ...], str], None]
#: A signal one of the run's own processes sent to this one: signal, sender, its ancestors
Hostile = tuple[signal.Signals, int, list[int]]


class RunLoop:
    """One `WorkerPool.run`: its state, and the steps of its loop. The pool's lasting parts
    (its zygote, reaper, logs, job ids) are lent to it; `jobs` slots are shared."""

    def __init__(self, cases: Sequence[CaseSpec], options: RunOptions, jobs: int, *,
                 zygotes: ZygoteClient, reaper: Reaper, logs: LogFiles,
                 hostile: queue.SimpleQueue[Hostile], ids: Iterator[int], started: float,
                 report: OnTarget, on_inputs: OnInputs | None) -> None:
        self.cases = cases
        self.options = options
        self.jobs = jobs
        self.zygotes = zygotes
        self.reaper = reaper
        self.logs = logs
        self.hostile = hostile
        self.ids = ids
        self.started = started  # when the pool started: the first cases carry its start-up
        self.report = report
        self.on_inputs = on_inputs
        #: cases not handed out yet, in order
        self.todo = deque(c for c in cases if selected_targets(c, options))
        # Spread the cores over the cases that will actually run at once.
        busy = max(1, min(jobs, sum(len(selected_targets(c, options)) for c in self.todo)))
        self.threads = max(1, (os.cpu_count() or 1) // busy)
        #: what each case still owes: every target reported exactly once, whatever happens
        self.owed = {id(c): set(selected_targets(c, options)) for c in cases}
        #: the cases handed out, by job id
        self.running: dict[int, Job] = {}
        #: cases handed out again after their zygote died (once: one that kills it twice is
        #: not innocent)
        self.retried: set[str] = set()

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while self.todo or self.running:
                self.tick()
        finally:
            for job in self.running.values():
                self.retire(job)
            self.zygotes.end_orphans()
        for case in self.cases:  # a bug here must never drop a case from the report
            for t in sorted(self.owed.get(id(case), ())):
                self.report(case, TargetMeasured(Measurement(t, ErrorRecord(
                    "internal error: no result came back for this case",
                    CaseKind.INTERNAL_ERROR))))

    def tick(self) -> None:
        """Share the free slots, wait for news (a tick at most), read it, and settle every
        case that is over."""
        z = self.zygotes.ensure()
        self.share(z)
        self.wait(z)
        self.resume_stopped(z)
        for msg in self.zygotes.messages(z):
            self.zygote_news(msg)
        if not z.alive():
            self.hand_back()
            self.zygotes.ensure()
        self.signals()
        for job in list(self.running.values()):
            self.settle(job)

    def share(self, z: Zygote) -> None:
        """Free slots to waiting targets and to cases to prepare (`slots.share_slots`)."""
        free = self.jobs - sum(j.busy for j in self.running.values())
        waiting = next_targets(self.running.values(), free, self.options,
                               self.zygotes.devices or {})
        upcoming = [len(selected_targets(c, self.options))
                    for c in itertools.islice(self.todo, max(free, 0))] if z.ready else []
        prepare, grant = share_slots(free, self.jobs, reserve(self.running.values()),
                                     len(waiting), upcoming)
        for job, target in waiting[:grant]:
            job.waiting.remove(target)
            self.grant(job, target)
        for _ in range(prepare):
            job = self.hand_out(z, self.todo.popleft())
            self.running[job.id] = job

    def settle(self, job: Job) -> None:
        """Read what `job` sent, hold it to its limits, and retire it once it is over."""
        read_results(job, self, memory_cap(self.options, job))
        if not job.failed:
            enforce_limits(self.options, job, self)
        if not case_over(job, self):
            return
        self.running.pop(job.id)
        ok = not job.failed
        if ok and self.on_inputs is not None and job.keys and (job.inputs or job.unseen):
            self.on_inputs(job.case, dict(job.keys),
                           tuple(job.inputs[p] for p in sorted(job.inputs)), job.unseen)
        self.retire(job)
        if ok:
            job.advance(CaseState.DONE)

    # -- a case's results ---------------------------------------------------------------------
    def deliver(self, job: Job, msg: TargetMeasured, since: float) -> None:
        """A target's result, to `report` if the case still owes it, its wall time counted
        from `since`."""
        target = msg.measurement.target
        if target in job.pending:
            job.pending.remove(target)
        left = self.owed.get(id(job.case), set())
        if target in left:
            left.discard(target)
            now = time.perf_counter()
            self.report(job.case, replace(msg, wall_seconds=max(now - since, 0.0)))

    def fail(self, job: Job, message: str, kind: str, detail: str = "",
             only: Sequence[str] | None = None) -> None:
        """Error measurements for the targets of `job` not reported yet (or `only`
        those); failing all of them ends the case."""
        tail = job.tail()
        body = "\n\n".join(part for part in (
            detail.strip(), f"last output of the case:\n{tail}" if tail.strip() else "")
            if part)
        line = job.case.line_of("model")  # the case's code did it (or ran into it)
        targets = list(job.pending) if only is None else [t for t in only if t in job.pending]
        if only is None:
            self.reaper.kill(job)
            job.advance(CaseState.FAILED)
        for t in targets:
            stream = job.targets.get(t)
            since = stream.since if stream is not None else job.main.since
            self.deliver(job, TargetMeasured(Measurement(
                t, ErrorRecord(message, kind, body, line),
                seconds=time.perf_counter() - job.handed)), since)
            if stream is not None:
                stream.done = True

    def orphaned(self, job: Job) -> bool:
        """Whether the zygote `job` was handed to is gone (dead, or not the current one)."""
        z = self.zygotes.current
        return not self.zygotes.holds(job.zygote) or z is None or not z.alive()

    # -- handing out, granting, ending --------------------------------------------------------
    def hand_out(self, z: Zygote, case: CaseSpec) -> Job:
        """`case` to zygote `z`, with a result pipe, a control socket and a log of its own."""
        job_id = next(self.ids)
        result_r, result_w = os.pipe()
        control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        os.set_blocking(result_r, False)
        log = self.logs.new_log(f"case{job_id}-")
        now = time.perf_counter()
        # the first cases' first results carry the zygote's start-up
        since = self.started if job_id <= self.jobs else now
        job = Job(job_id, case, log, Stream(result_r, since=since), control, now,
                  selected_targets(case, self.options), zygote=z.number)
        try:
            self.zygotes.send_case(z, StartCase(job_id, case, self.options, self.threads),
                                   [result_w, theirs.fileno(), log])
        finally:
            os.close(result_w)
            theirs.close()
        return job

    def grant(self, job: Job, target: str) -> None:
        """A slot for `target` of prepared `job`: a pipe for its target process."""
        result_r, result_w = os.pipe()
        os.set_blocking(result_r, False)
        # the case's first target carries its preparation (model, PyTorch, export)
        since = job.main.since if not job.targets else time.perf_counter()
        job.targets[target] = Stream(result_r, since=since)
        try:
            assert job.control is not None
            socket.send_fds(job.control, [frame(Grant(target))[8:]], [result_w])
        except (OSError, AssertionError):
            self.fail(job, "the case process stopped taking its targets",
                      CaseKind.WORKER_CRASHED)
        finally:
            os.close(result_w)

    def hand_back(self) -> None:
        """The zygote died: the cases it was about to start go to the next one (once: one
        that kills it twice is not innocent); those it started run on regardless."""
        for job in [j for j in self.running.values() if j.pid is None]:
            self.running.pop(job.id)
            self.reaper.close(job)
            if job.case.label in self.retried:
                self.fail(job, "the process that starts cases died twice while this "
                          "case was handed to it", CaseKind.WORKER_CRASHED)
            else:
                self.retried.add(job.case.label)
                self.todo.appendleft(job.case)

    def retire(self, job: Job) -> None:
        self.reaper.retire(job, orphaned=not self.zygotes.holds(job.zygote))

    # -- news -----------------------------------------------------------------------------------
    def wait(self, z: Zygote) -> None:
        """Until a message, a case's output, or a tick."""
        fds: list[int | socket.socket] = [z.sock]
        fds += [s.fd for j in self.running.values() for s in j.streams() if not s.eof]
        with suppress(InterruptedError, ValueError, OSError):
            select.select(fds, [], [], POLL_S)

    def resume_stopped(self, z: Zygote) -> None:
        """The zygote or a case process stopped by a signal: continued
        (`Reaper.resume_stopped`)."""
        named = {z.process.pid: "the process that starts cases"}
        named |= {j.pid: f"{j.case.label}'s case process" for j in self.running.values()
                  if j.pid is not None}
        self.reaper.resume_stopped(named)

    def zygote_news(self, msg: object) -> None:
        if isinstance(msg, Forked) and msg.job in self.running:
            self.running[msg.job].forked(msg.pid)
            self.reaper.running_pids.add(msg.pid)
        elif isinstance(msg, Exited) and msg.job in self.running:
            self.running[msg.job].status = msg.status

    def signals(self) -> None:
        """Signals the run's own processes sent to this one (`suite.signals`): the case
        they came from fails; one no running case owns has its sender ended."""
        while True:
            try:
                signo, sender, chain = self.hostile.get_nowait()
            except queue.Empty:
                return
            job = next((j for j in self.running.values() if j.pid in chain), None)
            what = "from the case process itself" if job is not None and sender == job.pid \
                else f"from {procs.describe(sender)}"
            if job is None:  # a process the run started that no case owns: end it
                procs.kill([*procs.descendants(sender), sender])
                print(f"cl-validate: warning: {signo.name} {what}, a process of the run that "
                      "no running case owns: ignored, the process ended",
                      file=sys.stderr)
                continue
            if not job.failed:
                self.fail(job, f"the model's code sent {signo.name} to the cl-validate "
                          f"process ({what}); ignored there, the case ended",
                          CaseKind.SIGNALLED_RUN)
