"""Worker processes: every case runs isolated, with a timeout, a memory cap and an output cap.

Everything that runs a model's code happens in a worker: importing the factory's module and
calling it, the weights digest, export, compile, run (`cl_validate.session`). A segfault,
a hang, ``sys.exit`` or ``os._exit``, a model that eats the runner's memory or floods its
output, a child process left running: each costs that one case, never the report. The parent
sees the worker die, or kills it (its whole process tree), turns that into an `error` verdict
with the reason and the tail of the worker's output, starts a fresh worker, and goes on.

Workers are started once (importing torch and TVM costs seconds), take one case at a time,
and report each target as soon as it is known; the parent prints progress as results arrive.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import os
import re
import signal
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from cl_validate import procs
from cl_validate.checks.compiled import CaseKind
from cl_validate.errors import ClValidateError, DeviceUnavailableError, ErrorRecord
from cl_validate.measurements.measurement import Measurement
from cl_validate.measurements.messages import (
    CaseDone,
    CaseFailed,
    FromWorker,
    Ready,
    RunCase,
    Stop,
    TargetMeasured,
)
from cl_validate.spec import CaseSpec
from cl_validate.spec.options import RunOptions, require_devices, selected_targets

_POLL_S = 0.1
_TAIL_BYTES = 4000
#: Output one case may write (stdout and stderr together) before it is stopped: a model that
#: prints in a loop must not fill the runner's disk.
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
#: How long a worker may take to import torch and TVM before --require-device gives up.
_READY_TIMEOUT_S = 300.0

#: What the pool hands each target's result to (a failed case arrives as an error measurement)
OnTarget = Callable[[CaseSpec, TargetMeasured], None]


#: The module whose ``main`` a worker process runs (`cl_validate.session.worker`). Named, not
#: imported: this process never loads the session (torch, TVM); the worker does.
WORKER_MODULE = "cl_validate.session.worker"


def _start_worker(module: str, *args: Any) -> None:
    """A worker process's entry point: `module`'s ``main(*args)``."""
    importlib.import_module(module).main(*args)


@dataclass
class _Worker:
    process: Any
    conn: Connection
    log_path: Path
    case: CaseSpec | None = None
    started: float = 0.0  # when the current case was handed over
    spawned: float = field(default_factory=time.perf_counter)
    last_event: float | None = None  # the previous result, for the next one's wall time
    log_offset: int = 0
    pending: list[str] = field(default_factory=list)  # targets not reported yet
    ready: bool = False

    def output_size(self) -> int:
        try:
            return self.log_path.stat().st_size - self.log_offset
        except OSError:
            return 0

    def tail(self) -> str:
        """The last output of the current case (stdout and stderr, C-level output too), a
        native crash backtrace collapsed to its first frames."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(self.log_offset, self.log_path.stat().st_size - _READ_BYTES))
                data = f.read(_READ_BYTES)
        except OSError:
            return ""
        return readable_tail(data.decode("utf-8", "replace"), _TAIL_BYTES)


#: How much of a case's output `tail` reads before collapsing native backtraces.
_READ_BYTES = 256 * 1024
_NATIVE_FRAME = re.compile(r'^\s*File "(?![^"]*\.py")[^"]*", line \d+, in ')
_KEEP_FRAMES = 3


def readable_tail(text: str, limit: int) -> str:
    """The last `limit` characters of a worker's output, with each run of native stack
    frames (the backtrace TVM prints on a segfault: dozens of C frames of the interpreter)
    cut to its first few: what the model printed before it crashed stays in view."""
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
    """Runs cases on `jobs` worker processes; use as a context manager.

    With `reap_orphans` (the CLI), this process becomes a subreaper too: the processes a
    worker leaves behind when it dies come here, and are ended. Leave it off in a process
    that has children of its own (the pytest plugin: pytest-xdist's)."""

    def __init__(self, options: RunOptions, *, reap_orphans: bool = False) -> None:
        self.options = options
        self.jobs = max(1, options.jobs)
        self._ctx = mp.get_context("spawn")
        self._logdir = tempfile.TemporaryDirectory(prefix="cl_validate-workers-")
        self._workers: list[_Worker] = []
        self._spawned = 0
        self._devices: dict[str, bool] | None = None
        self._startup_failures = 0
        self._reap_orphans = reap_orphans and procs.become_subreaper()
        self._token = uuid.uuid4().hex
        # Spread the cores over the workers: oversubscribed threads slow everyone down.
        self._threads = max(1, (os.cpu_count() or 1) // self.jobs)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def prestart(self, n: int) -> None:
        """Start up to `n` workers now, so their torch/TVM imports overlap the caller's own
        work (reading the case files)."""
        self._plan(n)
        while len(self._workers) < min(n, self.jobs):
            self._spawn()

    def _plan(self, n_cases: int) -> None:
        """Spread the cores over the workers that will actually run: one case gets them all."""
        if not self._workers:
            busy = max(1, min(self.jobs, n_cases))
            self._threads = max(1, (os.cpu_count() or 1) // busy)

    def _spawn(self) -> _Worker:
        self._spawned += 1
        log = Path(self._logdir.name) / f"worker{self._spawned}.log"
        log.touch()
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_start_worker,
                                 args=(WORKER_MODULE, child, str(log), self._threads,
                                       self._token),
                                 daemon=True, name=f"cl_validate-worker{self._spawned}")
        proc.start()
        child.close()
        w = _Worker(proc, parent, log)
        self._workers.append(w)
        return w

    def _retire(self, w: _Worker) -> None:
        """End a worker and everything it started; forget it."""
        pid = w.process.pid
        procs.kill(procs.descendants(pid))
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)  # its process group: children it has not lost
        if w.process.is_alive():
            w.process.kill()
        w.process.join(timeout=5)
        w.conn.close()
        self._workers.remove(w)
        with contextlib.suppress(OSError):
            w.log_path.unlink()
        self._end_orphans()

    def _end_orphans(self) -> None:
        """Processes a dead worker's tree left behind were re-parented to this process (a
        subreaper): its children that carry this pool's token and are not workers. End them
        (and what they started), and collect them."""
        if not self._reap_orphans:
            return
        workers = {w.process.pid for w in self._workers}
        me = os.getpid()
        for _ in range(3):  # a killed orphan's own children arrive a moment later
            ours = [p for p in procs.children(me) if p not in workers
                    and procs.has_env(p, procs.POOL_ENV, self._token)]
            if not ours:
                return
            for p in ours:
                procs.kill([*procs.descendants(p), p])
            procs.reap(ours)
            time.sleep(0.02)

    def shutdown(self) -> None:
        for w in list(self._workers):
            try:
                # A worker still importing torch/TVM holds nothing: killed now rather than
                # waited for until it could read "stop".
                if w.ready and w.case is None and w.process.is_alive():
                    w.conn.send(Stop())
                    w.process.join(timeout=2)
            except (OSError, BrokenPipeError):
                pass
            self._retire(w)
        self._logdir.cleanup()

    def devices(self) -> dict[str, bool]:
        """Which device types (``cuda``, ``opencl``...) this machine has, as a worker sees
        them (the parent never loads TVM to ask). Starts a worker if none is running, and
        waits for it."""
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while self._devices is None:
            if not self._workers:
                self._spawn()
            self._poll_ready(timeout=_POLL_S)
            for w in list(self._workers):
                if not w.process.is_alive() and not w.ready:
                    self._startup_failed(w)
                    self._retire(w)
            if time.monotonic() > deadline:
                raise DeviceUnavailableError("no worker process came up to ask for devices",
                                             hint="check that torch and TVM import")
        return self._devices

    def require_devices(self, cases: Sequence[CaseSpec]) -> None:
        """``--require-device``, answered by a worker (see `devices`)."""
        have = self.devices()
        require_devices(cases, self.options, lambda d: have.get(d, False))

    def _poll_ready(self, timeout: float) -> None:
        wait([w.conn for w in self._workers] + [w.process.sentinel for w in self._workers],
             timeout=timeout)
        for w in self._workers:
            for msg in _drain(w.conn):
                self._ready(w, msg)

    def _ready(self, w: _Worker, msg: FromWorker) -> bool:
        if isinstance(msg, Ready):
            w.ready = True
            if self._devices is None:
                self._devices = dict(msg.devices)
            return True
        return False

    def run(self, cases: Sequence[CaseSpec], report: OnTarget) -> None:
        """Measure `cases`; each target's result goes to `report` as it arrives. A case a
        worker could not finish (crash, timeout, memory, output flood, ``sys.exit``) arrives
        as an error measurement per target not reported yet, with the worker output's tail."""
        queue = deque(c for c in cases if selected_targets(c, self.options))
        self._plan(len(queue))
        # What each case still owes: every target reported exactly once, whatever happens.
        owed = {id(c): set(selected_targets(c, self.options)) for c in queue}

        def on_target(case: CaseSpec, msg: TargetMeasured) -> None:
            left = owed.get(id(case), set())
            if msg.measurement.target in left:
                left.discard(msg.measurement.target)
                report(case, msg)

        def fail_rest(w: _Worker, message: str, kind: str, detail: str = "") -> None:
            """Error measurements for the targets of `w`'s case not reported yet. The worker
            stays busy until its CaseDone (or its end): freeing it here would let a late
            CaseDone of this case end the next one."""
            assert w.case is not None
            tail = w.tail()
            body = "\n\n".join(part for part in (
                detail.strip(), f"last output of the worker:\n{tail}" if tail.strip() else "")
                if part)
            line = w.case.line_of("model")  # the case's code did it (or ran into it)
            pending, w.pending = w.pending, []
            for t in pending:
                on_target(w.case, TargetMeasured(Measurement(
                    t, ErrorRecord(message, kind, body, line),
                    seconds=time.perf_counter() - w.started), wall_seconds=_tick(w)))

        while queue or any(w.case is not None for w in self._workers):
            # Keep `jobs` workers alive while there is work to hand out.
            while len(self._workers) < min(self.jobs, len(queue) + sum(
                    1 for w in self._workers if w.case is not None)):
                self._spawn()
            for w in self._workers:
                if w.ready and w.case is None and queue:
                    case = queue.popleft()
                    w.case, w.started = case, time.perf_counter()
                    if w.last_event is None:  # its first case carries its start-up
                        w.last_event = w.spawned
                    else:  # time idle between cases is nobody's
                        w.last_event = w.started
                    w.pending = selected_targets(case, self.options)
                    w.log_offset = w.log_path.stat().st_size
                    w.conn.send(RunCase(case, self.options))
            conns = [w.conn for w in self._workers]
            sentinels = [w.process.sentinel for w in self._workers]
            wait([*conns, *sentinels], timeout=_POLL_S)  # until a message, an exit or a tick
            tree = procs.Snapshot()  # once per tick, for every worker's limits
            for w in list(self._workers):
                for msg in _drain(w.conn):
                    if self._ready(w, msg):
                        continue
                    if isinstance(msg, TargetMeasured):
                        assert w.case is not None
                        # Reported before it leaves `pending`: if that raises, the case is
                        # still owed a verdict, never silently dropped.
                        on_target(w.case, replace(msg, wall_seconds=_tick(w)))
                        if msg.measurement.target in w.pending:
                            w.pending.remove(msg.measurement.target)
                    elif isinstance(msg, CaseDone):
                        w.case, w.pending = None, []
                    elif isinstance(msg, CaseFailed):
                        fail_rest(w, msg.message, msg.kind, msg.detail)
                if not w.process.is_alive():
                    if w.case is not None:
                        why = _describe_exit(w.process.exitcode)
                        fail_rest(w, f"worker process {why} while running this case",
                                  CaseKind.WORKER_CRASHED)
                        w.case = None
                    elif not w.ready:
                        self._startup_failed(w)
                    self._retire(w)
                    continue
                if w.case is not None:
                    self._enforce_limits(w, fail_rest, tree)
        self._end_orphans()
        for case in cases:  # a bug here must never drop a case from the report
            for t in sorted(owed.get(id(case), ())):
                report(case, TargetMeasured(Measurement(t, ErrorRecord(
                    "internal error: no result came back for this case", CaseKind.INTERNAL_ERROR))))

    def _startup_failed(self, w: _Worker) -> None:
        """A worker that dies before it is ready says nothing about a case: the environment
        is broken (torch or TVM do not import). Retried twice, then an internal error."""
        self._startup_failures += 1
        if self._startup_failures >= 3:
            tail = w.tail().strip()
            raise ClValidateError(
                f"worker processes {_describe_exit(w.process.exitcode)} while importing torch "
                f"and TVM, {self._startup_failures} times" + (f":\n{tail}" if tail else ""))

    def _enforce_limits(self, w: _Worker, fail: Callable[[_Worker, str, str], None],
                        snapshot: procs.Snapshot) -> None:
        assert w.case is not None
        limit_s = self.options.timeout or w.case.timeout
        if time.perf_counter() - w.started > limit_s:
            self._stop(w, fail, f"timed out after {limit_s:g} s (timeout)", CaseKind.TIMEOUT)
            return
        cap = self.options.max_memory_mb or w.case.max_memory_mb
        tree = [w.process.pid, *snapshot.below(w.process.pid)]
        rss = procs.rss_mb(tree)
        if rss is not None and rss > cap:
            what = "worker" if len(tree) == 1 else f"worker and {len(tree) - 1} process(es) it " \
                "started"
            self._stop(w, fail, f"{what} used {rss:.0f} MB, over the {cap} MB memory cap "
                       "(max_memory_mb)", CaseKind.OUT_OF_MEMORY)
            return
        if w.output_size() > MAX_OUTPUT_BYTES:
            self._stop(w, fail, f"the case wrote more than {MAX_OUTPUT_BYTES >> 20} MB to "
                       "stdout/stderr; stopped", CaseKind.OUTPUT_FLOOD)

    def _stop(self, w: _Worker, fail: Callable[[_Worker, str, str], None], message: str,
              kind: str) -> None:
        """End a worker over a limit: its pending targets are errors, read with the tail of
        its output before the log goes."""
        fail(w, message, kind)
        w.case = None
        self._retire(w)


def _tick(w: _Worker) -> float:
    """Wall time since `w`'s previous event (which this one becomes)."""
    now = time.perf_counter()
    last = w.last_event if w.last_event is not None else w.started
    w.last_event = now
    return max(now - last, 0.0)


def _drain(conn: Connection) -> list[FromWorker]:
    """Every message waiting on a worker's pipe; a pipe the worker closed (it died: the caller
    sees that from the process) ends the list."""
    out: list[FromWorker] = []
    try:
        while conn.poll():
            out.append(conn.recv())
    except (EOFError, OSError):
        pass
    return out


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "stopped"
    if code < 0:
        try:
            return f"died with {signal.Signals(-code).name}"
        except ValueError:
            return f"died with signal {-code}"
    return f"exited with status {code}"
