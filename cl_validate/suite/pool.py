"""Case processes: every case runs in a fresh process of its own, with a timeout, a memory cap
and an output cap, and nothing it does reaches another case, the cache or this process.

A *zygote* (`cl_validate.session.zygote`) imports torch and TVM once and forks a new process
for every case (`cl_validate.session.case_process`): whatever a case's code changes in its process
(a monkey-patch, a global flag, a closed stdout) dies with it. A case reports on a pipe of its
own, in typed messages read without ever blocking and bounded in size
(`cl_validate.measurements.wire`): stray bytes, a forged pickle or a silent half-message are
that case's error. A segfault, a hang, ``sys.exit`` or ``os._exit``, a model that eats the
runner's memory or floods its output, a child process left running, a signal sent to this
process: each costs that one case, never the report. This process sees the case end, or ends
it (its whole process tree), turns that into an `error` verdict with the reason and the tail of
the case's output, and goes on. A zygote that dies (a case may kill it) is started again; the
cases it was about to start are handed to the new one.

This process never imports torch or TVM and never runs a model's code.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import queue
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from cl_validate import procs
from cl_validate.checks.compiled import CaseKind
from cl_validate.errors import ClValidateError, DeviceUnavailableError, ErrorRecord
from cl_validate.measurements import wire
from cl_validate.measurements.measurement import Measurement
from cl_validate.measurements.messages import (
    CASE_PACKET,
    SYS_PATH_ENV,
    CaseDone,
    CaseFailed,
    ChildExited,
    Exited,
    FileStamp,
    Forked,
    Grant,
    Prepared,
    Ready,
    RunCase,
    Stop,
    TargetMeasured,
    decode,
    frame,
)
from cl_validate.spec import CaseSpec
from cl_validate.spec.options import RunOptions, require_devices, selected_targets
from cl_validate.spec.placement import placement

_POLL_S = 0.1
_TAIL_BYTES = 4000
#: Output one case may write (stdout and stderr together) before it is stopped: a model that
#: prints in a loop must not fill the runner's disk.
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
#: What one case may send on its result pipe, all messages together.
MAX_RESULT_BYTES = 2 * wire.MAX_FRAME
#: How long the zygote may take to import torch and TVM and warm up.
_READY_TIMEOUT_S = 300.0
#: How long a case process that closed its result pipe may take to end before it is killed.
_EXIT_GRACE_S = 2.0
#: The module the zygote runs. Named, not imported: this process never loads torch or TVM.
ZYGOTE_MODULE = "cl_validate.session.zygote"


#: What the pool hands each target's result to (a failed case arrives as an error measurement)
OnTarget = Callable[[CaseSpec, TargetMeasured], None]
#: What the pool hands the files a case read to, with its targets' cache keys
OnInputs = Callable[[CaseSpec, dict[str, str], tuple[FileStamp, ...]], None]


def _new_log(folder: str, prefix: str) -> int:
    """A new log file in `folder`, open for appending and reading: the process that writes it
    gets this descriptor, never its path, and this process reads it through the same
    descriptor — a model that swaps the file's name for a FIFO or a link to /dev/zero
    changes nothing the run reads (nor hides an output flood)."""
    fd, path = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".log")
    os.unlink(path)  # nothing to find by name; gone with its last descriptor
    os.set_inheritable(fd, False)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
    return fd


def _log_size(fd: int) -> int:
    try:
        return os.fstat(fd).st_size
    except OSError:
        return 0


def _log_tail(fd: int) -> str:
    """The last output in log `fd`, a native crash backtrace collapsed to its first frames."""
    try:
        data = os.pread(fd, _READ_BYTES, max(0, _log_size(fd) - _READ_BYTES))
    except OSError:
        return ""
    return readable_tail(data.decode("utf-8", "replace"), _TAIL_BYTES)


@dataclass
class _Zygote:
    process: subprocess.Popen[bytes]
    sock: socket.socket
    log_fd: int
    ready: bool = False
    spawned: float = field(default_factory=time.perf_counter)

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self) -> str:
        return _log_tail(self.log_fd)


@dataclass
class _Stream:
    """A pipe a case reports on: its own, or one of its target processes'."""

    fd: int
    reader: wire.FrameReader = field(default_factory=wire.FrameReader)
    eof: bool = False
    done: bool = False  # its last message arrived (a target's result; the case's end)
    since: float = 0.0  # what its next result's wall time counts from


@dataclass
class _Job:
    """One case handed to a case process, and its target processes."""

    id: int
    case: CaseSpec
    log_fd: int  # its output (`_new_log`); -1 once closed
    main: _Stream  # the case process's result pipe
    control: socket.socket | None  # grants go here; closing it ends the case
    handed: float  # when it was handed out
    pending: list[str]  # targets not reported yet
    zygote: _Zygote | None = None
    pid: int | None = None
    status: int | None = None  # its wait status, once the zygote reported it
    prepared: bool = False  # its export is done: its targets wait for grants
    waiting: list[str] = field(default_factory=list)  # prepared, not granted yet
    targets: dict[str, _Stream] = field(default_factory=dict)  # granted
    exited: dict[str, int] = field(default_factory=dict)  # a target process's wait status
    received: int = 0
    keys: dict[str, str] = field(default_factory=dict)  # target → cache key
    inputs: dict[str, FileStamp] = field(default_factory=dict)
    over_at: float | None = None  # when the case process finished (or its pipe closed)
    failed: bool = False

    @property
    def busy(self) -> int:
        """Slots it holds: one while it prepares, one per target process measuring."""
        if self.failed:
            return 0
        measuring = sum(1 for s in self.targets.values() if not s.done and not s.eof)
        return measuring if self.prepared or self.main.done else 1 + measuring

    def streams(self) -> list[_Stream]:
        return [self.main, *self.targets.values()]

    def buffered(self) -> int:
        """Bytes of results this process holds for the case, not whole messages yet."""
        return sum(s.reader.pending for s in self.streams())

    def tail(self) -> str:
        """The last output of the case (stdout and stderr, C-level output too), a native
        crash backtrace collapsed to its first frames."""
        return _log_tail(self.log_fd)

    def output_size(self) -> int:
        return _log_size(self.log_fd)


#: How much of a case's output `tail` reads before collapsing native backtraces.
_READ_BYTES = 256 * 1024
_NATIVE_FRAME = re.compile(r'^\s*File "(?![^"]*\.py")[^"]*", line \d+, in ')
_KEEP_FRAMES = 3


def readable_tail(text: str, limit: int) -> str:
    """The last `limit` characters of a case's output, with each run of native stack frames
    (the backtrace TVM prints on a segfault: dozens of C frames of the interpreter) cut to its
    first few: what the model printed before it crashed stays in view."""
    out: list[str] = []
    run = 0
    for line in text.splitlines():
        if _NATIVE_FRAME.match(line):
            run += 1
            if run <= _KEEP_FRAMES:
                out.append(line)
            continue
        if run > _KEEP_FRAMES:
            out.append(f"  … {run - _KEEP_FRAMES} more native frames …")
        run = 0
        out.append(line)
    if run > _KEEP_FRAMES:
        out.append(f"  … {run - _KEEP_FRAMES} more native frames …")
    joined = "\n".join(out) + ("\n" if text.endswith("\n") else "")
    return joined[-limit:]


class WorkerPool:
    """Runs cases in fresh case processes, `jobs` at a time; use as a context manager.

    With `reap_orphans` (the CLI), this process becomes a subreaper too: what a dead zygote
    leaves behind comes here, and is ended. Leave it off in a process that has children of
    its own (the pytest plugin: pytest-xdist's)."""

    def __init__(self, options: RunOptions, *, reap_orphans: bool = False) -> None:
        self.options = options
        self.jobs = max(1, options.jobs)
        self._logdir = tempfile.TemporaryDirectory(prefix="cl_validate-cases-")
        self._zygote: _Zygote | None = None
        self._zygotes = 0
        self._devices: dict[str, bool] | None = None
        self._startup_failures = 0
        self._reap_orphans = reap_orphans and procs.become_subreaper()
        self._ids = itertools.count(1)
        self._threads = max(1, (os.cpu_count() or 1) // self.jobs)
        #: signals this process got from the run's own processes (`suite.signals`)
        self._hostile: queue.SimpleQueue[tuple[signal.Signals, int, list[int]]] = \
            queue.SimpleQueue()
        self._started = time.perf_counter()
        #: case processes that run: never taken for orphans, whatever their parent is now
        self._running_pids: set[int] = set()
        self._resumed: set[int] = set()  # processes continued after a stop (warned once)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- the zygote -------------------------------------------------------------------------
    def _plan(self, n_cases: int) -> None:
        """Spread the cores over the cases that will actually run at once."""
        busy = max(1, min(self.jobs, n_cases))
        self._threads = max(1, (os.cpu_count() or 1) // busy)

    def _ensure_zygote(self) -> _Zygote:
        z = self._zygote
        if z is not None and z.alive():
            return z
        if z is not None:
            self._zygote_died(z)
        self._zygotes += 1
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log = _new_log(self._logdir.name, f"zygote{self._zygotes}-")
        env = {**os.environ, SYS_PATH_ENV: json.dumps([p or os.getcwd() for p in sys.path])}
        proc = subprocess.Popen(
            [sys.executable, "-m", ZYGOTE_MODULE, str(child.fileno())],
            pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, stdout=log,
            stderr=log, start_new_session=True, env=env)
        child.close()
        parent.setblocking(False)
        if self._zygote is not None:  # the dead one's log: read by now
            with contextlib.suppress(OSError):
                os.close(self._zygote.log_fd)
        self._zygote = _Zygote(proc, parent, log)
        return self._zygote

    def _zygote_died(self, z: _Zygote) -> None:
        """A zygote that died before it was ready says nothing about a case: the environment
        is broken (torch or TVM do not import). Tried three times, then an internal error."""
        with contextlib.suppress(OSError):
            z.sock.close()
        if not z.ready:
            self._startup_failures += 1
            if self._startup_failures >= 3:
                tail = z.tail().strip()
                raise ClValidateError(
                    f"the process that starts cases {_describe_exit(z.process.returncode)} "
                    f"while importing torch and TVM, {self._startup_failures} times"
                    + (f":\n{tail}" if tail else ""))
        self._end_orphans()

    def _zygote_messages(self, z: _Zygote) -> list[object]:
        out: list[object] = []
        while True:
            try:
                data = z.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                return out
            except OSError:
                return out
            if not data:
                return out
            try:
                msg = decode(data, (Ready, Forked, Exited))
            except wire.WireError:  # the zygote is ours: nothing else can write there
                continue
            if isinstance(msg, Ready):
                z.ready = True
                if self._devices is None:
                    self._devices = dict(msg.devices)
            out.append(msg)

    def devices(self) -> dict[str, bool]:
        """Which device types (``cuda``, ``opencl``...) this machine has, as the zygote sees
        them (this process never loads TVM to ask)."""
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while self._devices is None:
            z = self._ensure_zygote()
            select.select([z.sock], [], [], _POLL_S)
            self._zygote_messages(z)
            if time.monotonic() > deadline:
                raise DeviceUnavailableError("the process that starts cases never came up to "
                                             "ask for devices",
                                             hint="check that torch and TVM import")
        return self._devices

    def require_devices(self, cases: Sequence[CaseSpec]) -> None:
        """``--require-device``, answered by the zygote (see `devices`)."""
        have = self.devices()
        require_devices(cases, self.options, lambda d: have.get(d, False))

    def hostile_signal(self, signo: signal.Signals, sender: int, chain: list[int]) -> None:
        """A signal one of the run's own processes sent to this one (`suite.signals`): the
        case it came from fails; called from the signal thread."""
        self._hostile.put((signo, sender, chain))

    # -- running cases ----------------------------------------------------------------------
    def run(self, cases: Sequence[CaseSpec], report: OnTarget,
            on_inputs: OnInputs | None = None) -> None:
        """Measure `cases`; each target's result goes to `report` as it arrives, and the files
        a case read (with its targets' cache keys) to `on_inputs`. A case that could not
        finish arrives as an error measurement per target not reported yet, with the tail of
        the case's output.

        `jobs` slots are shared by preparing cases (model, PyTorch, export) and measuring
        targets (`share_slots`): no slot idles while there is work, and cases are prepared
        ahead of their turn so that a run ends with targets on every slot, not with one
        last preparation the other slots wait for."""
        todo = deque(c for c in cases if selected_targets(c, self.options))
        self._plan(sum(len(selected_targets(c, self.options)) for c in todo))
        # What each case still owes: every target reported exactly once, whatever happens.
        owed = {id(c): set(selected_targets(c, self.options)) for c in cases}
        running: dict[int, _Job] = {}
        retried: set[str] = set()

        def deliver(job: _Job, msg: TargetMeasured, since: float) -> None:
            target = msg.measurement.target
            if target in job.pending:
                job.pending.remove(target)
            left = owed.get(id(job.case), set())
            if target in left:
                left.discard(target)
                now = time.perf_counter()
                report(job.case, replace(msg, wall_seconds=max(now - since, 0.0)))

        def fail(job: _Job, message: str, kind: str, detail: str = "",
                 only: Sequence[str] | None = None) -> None:
            """Error measurements for the targets of `job` not reported yet (or `only`
            those); failing all of them ends the case."""
            tail = job.tail()
            body = "\n\n".join(part for part in (
                detail.strip(), f"last output of the case:\n{tail}" if tail.strip() else "")
                if part)
            line = job.case.line_of("model")  # the case's code did it (or ran into it)
            targets = list(job.pending) if only is None else [t for t in only
                                                              if t in job.pending]
            if only is None:
                self._kill(job)
                job.failed = True
            for t in targets:
                stream = job.targets.get(t)
                since = stream.since if stream is not None else job.main.since
                deliver(job, TargetMeasured(Measurement(
                    t, ErrorRecord(message, kind, body, line),
                    seconds=time.perf_counter() - job.handed)), since)
                if stream is not None:
                    stream.done = True

        try:
            while todo or running:
                z = self._ensure_zygote()
                free = self.jobs - sum(j.busy for j in running.values())
                waiting = self._next_targets(running, free)
                upcoming = [len(selected_targets(c, self.options))
                            for c in itertools.islice(todo, max(free, 0))] if z.ready else []
                prepare, grant = share_slots(free, self.jobs, _reserve(running),
                                             len(waiting), upcoming)
                for job, target in waiting[:grant]:
                    job.waiting.remove(target)
                    self._grant(job, target, fail)
                for _ in range(prepare):
                    job = self._hand_out(z, todo.popleft())
                    running[job.id] = job
                self._wait(z, running)
                self._resume_stopped(z, running)
                for msg in self._zygote_messages(z):
                    self._zygote_news(msg, running)
                if not z.alive():
                    # The cases it was about to start go to the next zygote (once: one that
                    # kills it twice is not innocent); those it started run on regardless.
                    for job in [j for j in running.values() if j.pid is None]:
                        running.pop(job.id)
                        self._close(job)
                        if job.case.label in retried:
                            fail(job, "the process that starts cases died twice while this "
                                 "case was handed to it", CaseKind.WORKER_CRASHED)
                        else:
                            retried.add(job.case.label)
                            todo.appendleft(job.case)
                    self._ensure_zygote()
                self._signals(running, fail)
                for job in list(running.values()):
                    self._read(job, deliver, fail)
                    if not job.failed:
                        self._enforce_limits(job, fail)
                    if self._over(job, fail):
                        running.pop(job.id)
                        if on_inputs is not None and job.keys and job.inputs \
                                and not job.failed:
                            on_inputs(job.case, dict(job.keys),
                                      tuple(job.inputs[p] for p in sorted(job.inputs)))
                        self._retire(job)
        finally:
            for job in running.values():
                self._retire(job)
            self._end_orphans()
        for case in cases:  # a bug here must never drop a case from the report
            for t in sorted(owed.get(id(case), ())):
                report(case, TargetMeasured(Measurement(t, ErrorRecord(
                    "internal error: no result came back for this case",
                    CaseKind.INTERNAL_ERROR))))

    def _next_targets(self, running: dict[int, _Job], free: int) -> list[tuple[_Job, str]]:
        """The prepared targets the `free` slots go to: those whose numerics run here first
        (they take the longest: a run ends sooner when the long ones start early), then in
        the order the cases were handed out."""
        have = self._devices or {}
        waiting = [(job, t) for job in running.values() if job.prepared and not job.failed
                   for t in job.waiting]

        def runs_here(job: _Job, target: str) -> bool:
            place = placement(job.case.target_def(target), self.options.rpc,
                              lambda d: have.get(d, False))
            return place.where == "local" and not self.options.static_only

        waiting.sort(key=lambda jt: (not runs_here(*jt), jt[0].id,
                                     jt[0].waiting.index(jt[1])))
        return waiting[:max(free, 0)]

    def _hand_out(self, z: _Zygote, case: CaseSpec) -> _Job:
        job_id = next(self._ids)
        result_r, result_w = os.pipe()
        control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        os.set_blocking(result_r, False)
        log = _new_log(self._logdir.name, f"case{job_id}-")
        now = time.perf_counter()
        # the first cases' first results carry the zygote's start-up
        since = self._started if job_id <= self.jobs else now
        job = _Job(job_id, case, log, _Stream(result_r, since=since), control, now,
                   selected_targets(case, self.options), zygote=z)
        # the case travels in a file of its own: a packet holds about 208 kB, a case file
        # (a long description, thousands of outputs) may be larger
        body = wire.message_file(frame(RunCase(job_id, case, self.options, self._threads))[8:])
        try:
            socket.send_fds(z.sock, [CASE_PACKET], [result_w, theirs.fileno(), log, body])
        except OSError:
            pass  # the zygote is gone: noticed by the loop, the case is handed out again
        finally:
            os.close(result_w)
            os.close(body)
            theirs.close()
        return job

    def _grant(self, job: _Job, target: str, fail: Callable[..., None]) -> None:
        """A slot for `target` of prepared `job`: a pipe for its target process."""
        result_r, result_w = os.pipe()
        os.set_blocking(result_r, False)
        # the case's first target carries its preparation (model, PyTorch, export)
        since = job.main.since if not job.targets else time.perf_counter()
        job.targets[target] = _Stream(result_r, since=since)
        try:
            assert job.control is not None
            socket.send_fds(job.control, [frame(Grant(target))[8:]], [result_w])
        except (OSError, AssertionError):
            fail(job, "the case process stopped taking its targets", CaseKind.WORKER_CRASHED)
        finally:
            os.close(result_w)

    def _wait(self, z: _Zygote, running: dict[int, _Job]) -> None:
        """Until a message, a case's output, or a tick."""
        fds: list[int | socket.socket] = [z.sock]
        fds += [s.fd for j in running.values() for s in j.streams() if not s.eof]
        with contextlib.suppress(InterruptedError, ValueError, OSError):
            select.select(fds, [], [], _POLL_S)

    def _resume_stopped(self, z: _Zygote, running: dict[int, _Job]) -> None:
        """Nothing but a case's code stops the zygote or a case process (they have no
        terminal): where the kernel does not keep cases apart (`session.sandbox`), one that
        stops the zygote would hold every case after it until its timeout, one that stops
        another case would have it blamed for a timeout. Continue them."""
        named = {z.process.pid: "the process that starts cases"}
        named |= {j.pid: f"{j.case.label}'s case process" for j in running.values()
                  if j.pid is not None}
        for pid, what in named.items():
            if procs.resume_if_stopped(pid) and pid not in self._resumed:
                self._resumed.add(pid)
                print(f"cl-validate: warning: {what} (pid {pid}) was stopped by a "
                      "signal, a model's code the likely sender: continued", file=sys.stderr)

    def _zygote_news(self, msg: object, running: dict[int, _Job]) -> None:
        if isinstance(msg, Forked) and msg.job in running:
            running[msg.job].pid = msg.pid
            self._running_pids.add(msg.pid)
        elif isinstance(msg, Exited) and msg.job in running:
            running[msg.job].status = msg.status

    def _read(self, job: _Job, deliver: Callable[[_Job, TargetMeasured, float], None],
              fail: Callable[..., None]) -> None:
        """Whatever the case and its target processes sent since the last tick, without
        blocking: the targets' pipes first (a result written before the case said it was
        done is read before the case's end)."""
        if job.failed:
            return
        for target, stream in list(job.targets.items()):
            self._drain(job, stream, target, deliver, fail)
            if job.failed:
                return
        self._drain(job, job.main, None, deliver, fail)

    def _drain(self, job: _Job, stream: _Stream, target: str | None,
               deliver: Callable[[_Job, TargetMeasured, float], None],
               fail: Callable[..., None]) -> None:
        while not stream.eof and not job.failed:
            try:
                data = os.read(stream.fd, 1 << 20)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                stream.eof = True
                if target is None and job.over_at is None:
                    job.over_at = time.perf_counter()
                return
            job.received += len(data)
            cap = self._memory_cap(job)
            if job.received > cap << 20:  # what it sends counts toward its cap
                fail(job, f"the case process sent {job.received >> 20} MB of results, over its "
                     f"{cap} MB memory cap (max_memory_mb: the results it sends count toward "
                     "it)", CaseKind.OUT_OF_MEMORY)
                return
            try:
                if job.received > MAX_RESULT_BYTES:
                    raise wire.WireError(f"more than {MAX_RESULT_BYTES >> 20} MB of results")
                for payload in stream.reader.feed(data):
                    if stream.done:
                        raise wire.WireError("more after its last message")
                    if target is None:
                        self._case_news(job, payload, deliver, fail)
                    else:
                        self._target_news(job, target, stream, payload, deliver)
            except wire.WireError as exc:
                fail(job, f"the case process sent what is not a result on its result pipe "
                     f"({exc}): the model's code writes there", CaseKind.CORRUPT_RESULT)
                return

    def _target_news(self, job: _Job, target: str, stream: _Stream, payload: bytes | memoryview,
                     deliver: Callable[[_Job, TargetMeasured, float], None]) -> None:
        msg = decode(payload, (TargetMeasured,))
        if msg.measurement.target != target or target not in job.pending:
            raise wire.WireError(f"a result for target {msg.measurement.target!r} on the "
                                 f"pipe of {target!r}")
        stream.done = True
        self._note(job, msg)
        deliver(job, msg, stream.since)

    def _case_news(self, job: _Job, payload: bytes | memoryview,
                   deliver: Callable[[_Job, TargetMeasured, float], None],
                   fail: Callable[..., None]) -> None:
        msg = decode(payload, (TargetMeasured, Prepared, ChildExited, CaseDone, CaseFailed))
        if isinstance(msg, TargetMeasured):  # answered without measuring: cache, an error
            target = msg.measurement.target
            if target not in job.pending or target in job.targets:
                raise wire.WireError(f"a result for target {target!r} it does not owe")
            self._note(job, msg)
            deliver(job, msg, job.main.since)
            job.main.since = time.perf_counter()
        elif isinstance(msg, Prepared):
            if job.prepared or not set(msg.targets) <= set(job.pending):
                raise wire.WireError("prepared targets it does not owe")
            job.prepared = True
            job.waiting = [t for t in job.pending if t in msg.targets]
        elif isinstance(msg, ChildExited):
            if msg.target not in job.targets:
                raise wire.WireError(f"an exit of target {msg.target!r} it was not granted")
            job.exited[msg.target] = msg.status
        elif isinstance(msg, CaseDone):
            job.main.done = True
            job.over_at = time.perf_counter()
            for s in msg.inputs:
                job.inputs[s.path] = s
        elif isinstance(msg, CaseFailed):
            fail(job, msg.message, msg.kind, msg.detail)

    def _note(self, job: _Job, msg: TargetMeasured) -> None:
        if msg.key is not None:
            job.keys[msg.measurement.target] = msg.key
        for s in msg.inputs:
            job.inputs[s.path] = s

    def _over(self, job: _Job, fail: Callable[..., None]) -> bool:
        """Whether `job` is over: failed, or its case process finished (it said so, or its
        pipe closed) and every target process's pipe closed; a target still owed then
        ended without reporting, and the case's own end (without `CaseDone`) is a crash.
        How a process ended comes a moment after its pipe closed (from the zygote or the
        case process): waited for, for a short grace period."""
        if job.failed:
            return True
        if job.over_at is None or any(not s.eof and not s.done for s in job.targets.values()):
            return False
        waiting = time.perf_counter() - job.over_at < _EXIT_GRACE_S
        if not job.main.done:  # the case process ended without saying it was done
            orphaned = job.zygote is not self._zygote or not (job.zygote and
                                                               job.zygote.alive())
            if job.status is None and job.pid is not None and orphaned:
                job.status = _collect(job.pid)  # its zygote died: it came here (a subreaper)
            gone = job.status is not None or (orphaned and job.pid is not None
                                              and not _alive(job.pid))
            if not gone and waiting:
                return False
            if job.status is not None:
                fail(job, f"case process {_describe_status(job.status)} while running this "
                     "case", CaseKind.WORKER_CRASHED)
            else:
                fail(job, "the case process closed its result pipe before it reported (the "
                     "model's code closed it, or the process died)", CaseKind.WORKER_CRASHED)
            return True
        lost = [t for t in job.pending if t in job.targets]
        if lost and waiting and any(t not in job.exited for t in lost):
            return False
        for t in lost:
            why = _describe_status(job.exited[t]) if t in job.exited else "ended"
            fail(job, f"the process measuring {t} {why} before it reported",
                 CaseKind.WORKER_CRASHED, only=[t])
        if job.pending:  # never granted, never answered: the case broke its word
            fail(job, "the case process ended with targets it never measured",
                 CaseKind.WORKER_CRASHED)
        return True

    def _signals(self, running: dict[int, _Job], fail: Callable[..., None]) -> None:
        while True:
            try:
                signo, sender, chain = self._hostile.get_nowait()
            except queue.Empty:
                return
            job = next((j for j in running.values() if j.pid in chain), None)
            what = "from the case process itself" if job is not None and sender == job.pid \
                else f"from {procs.describe(sender)}"
            if job is None:  # a process the run started that no case owns: end it
                procs.kill([*procs.descendants(sender), sender])
                print(f"cl-validate: warning: {signo.name} {what}, a process of the run that "
                      "no running case owns: ignored, the process ended",
                      file=sys.stderr)
                continue
            if not job.failed:
                fail(job, f"the model's code sent {signo.name} to the cl-validate process "
                     f"({what}); ignored there, the case ended", CaseKind.SIGNALLED_RUN)

    def _enforce_limits(self, job: _Job, fail: Callable[..., None]) -> None:
        limit_s = self.options.timeout or job.case.timeout
        if time.perf_counter() - job.handed > limit_s:
            fail(job, f"timed out after {limit_s:g} s (timeout)", CaseKind.TIMEOUT)
            return
        if job.pid is not None:
            cap = self._memory_cap(job)
            tree = [job.pid, *procs.tree(job.pid)]
            rss = procs.rss_mb(tree)
            held = job.buffered() / (1 << 20)  # results it sent that this process holds
            if rss is not None and rss + held > cap:
                what = "case process" if len(tree) == 1 else \
                    f"case process and {len(tree) - 1} process(es) it started"
                also = f" and {held:.0f} MB of results sent" if held >= 1 else ""
                fail(job, f"{what} used {rss:.0f} MB{also}, over the {cap} MB memory cap "
                     "(max_memory_mb)", CaseKind.OUT_OF_MEMORY)
                return
        if job.output_size() > MAX_OUTPUT_BYTES:
            fail(job, f"the case wrote more than {MAX_OUTPUT_BYTES >> 20} MB to "
                 "stdout/stderr; stopped", CaseKind.OUTPUT_FLOOD)

    def _memory_cap(self, job: _Job) -> int:
        """The case's memory cap in MB (the run's ``--max-memory-mb`` or the case's)."""
        return int(self.options.max_memory_mb or job.case.max_memory_mb)

    def _kill(self, job: _Job) -> None:
        """End `job`'s processes and everything they started."""
        if job.pid is not None:
            procs.kill([*procs.descendants(job.pid), job.pid])
            with contextlib.suppress(OSError):
                os.killpg(job.pid, signal.SIGKILL)  # its group: children it has not lost
        if job.control is not None:  # also ends a case the zygote had not started yet
            with contextlib.suppress(OSError):
                job.control.close()
            job.control = None

    def _close(self, job: _Job) -> None:
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

    def _retire(self, job: _Job) -> None:
        """A case that is over: whatever of it is left ended, its pipes and log gone."""
        self._kill(job)
        self._close(job)
        if job.pid is not None:
            self._running_pids.discard(job.pid)
            if job.zygote is not self._zygote:
                _collect(job.pid)

    def _end_orphans(self) -> None:
        """What a dead zygote's tree left behind was re-parented to this process (a
        subreaper): every child of this process but the zygote. End them (and what they
        started), and collect them."""
        if not self._reap_orphans:
            return
        me = os.getpid()
        keep = set(self._running_pids)
        if self._zygote is not None:
            keep.add(self._zygote.process.pid)
        for _ in range(3):  # a killed orphan's own children arrive a moment later
            ours = [p for p in procs.children(me, zombies=True) if p not in keep]
            if not ours:
                return
            for p in ours:
                procs.kill([*procs.descendants(p), p])
            procs.reap(ours)
            time.sleep(0.02)

    def shutdown(self) -> None:
        z, self._zygote = self._zygote, None
        if z is not None:
            with contextlib.suppress(OSError):
                z.sock.send(frame(Stop())[8:])
            with contextlib.suppress(OSError):
                z.sock.close()
            try:
                z.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                procs.kill([*procs.descendants(z.process.pid), z.process.pid])
                with contextlib.suppress(subprocess.TimeoutExpired):
                    z.process.wait(timeout=2)
        self._end_orphans()
        if z is not None:
            with contextlib.suppress(OSError):
                os.close(z.log_fd)
        self._logdir.cleanup()


def share_slots(free: int, jobs: int, reserve: int, waiting: int,
                upcoming: Sequence[int]) -> tuple[int, int]:
    """How `free` slots are shared: (cases to start preparing, waiting targets to grant).

    `reserve` is the targets that will want a slot without another case being prepared
    (waiting for a grant, or of cases being prepared), `waiting` those ready for a grant now,
    `upcoming` the target counts of the next cases (empty while no case can start). Cases
    are prepared ahead while the reserve is under `jobs`: the end of a run then has targets
    to spread over the slots, not one last preparation every other slot waits for. Then
    waiting targets; a slot still free prepares another case. Never more than `free`."""
    prepare = 0
    while prepare < min(free, len(upcoming)) and reserve < jobs:
        reserve += upcoming[prepare]
        prepare += 1
    grant = max(0, min(free - prepare, waiting))
    prepare += max(0, min(free - prepare - grant, len(upcoming) - prepare))
    return prepare, grant


def _reserve(running: dict[int, _Job]) -> int:
    """The targets of `running` that will want a slot without another case being prepared:
    those waiting for a grant, and those of cases still being prepared."""
    return sum(len(j.waiting) if j.prepared else len(j.pending)
               for j in running.values() if not j.failed)


def _collect(pid: int) -> int | None:
    """The wait status of `pid` if it is an ended child of this process (collected now)."""
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        return None
    return status if got == pid else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return _describe_exit(-os.WTERMSIG(status))
    return _describe_exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else None)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "stopped"
    if code < 0:
        try:
            return f"died with {signal.Signals(-code).name}"
        except ValueError:
            return f"died with signal {-code}"
    return f"exited with status {code}"
