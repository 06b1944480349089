"""Worker processes: each case runs isolated, with a timeout and a memory cap.

A segfault in TVM, a compile that hangs, or a model that eats the runner's memory must cost
that one case, never the report: the parent sees the worker die or kills it, turns that into
`error` verdicts with the reason and the tail of the worker's output, starts a fresh worker,
and goes on. Workers are started once (importing torch and TVM costs seconds) and take one
case at a time; the parent prints progress as results arrive.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from cl_validate.checks.judge import error_checks, judge
from cl_validate.checks.measurement import Measurement
from cl_validate.checks.verdict import CaseResult
from cl_validate.errors import ErrorRecord
from cl_validate.run.messages import (
    CaseCrashed,
    CaseDone,
    FromWorker,
    Ready,
    RunCase,
    Stop,
    TargetMeasured,
)
from cl_validate.run.options import RunOptions, selected_targets
from cl_validate.spec import CaseSpec

_POLL_S = 0.25
_TAIL_BYTES = 4000


def _rss_mb(pid: int) -> float | None:
    """Resident memory of a process (Linux /proc); None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError):
        return None
    return None


def _worker_main(conn: Connection, log_path: str, threads: int) -> None:
    """Loop in the worker: receive a case, run it, send each target's result as it finishes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides about interrupts
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)  # C-level output (TVM, a segfault's last words) lands in the log too
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))
    warnings.filterwarnings("ignore", category=FutureWarning)
    # lazy: torch and TVM are imported here, in the worker, once, before the first case
    import torch

    from cl_validate.compile.factory import build_model
    from cl_validate.run.measure import measure_case

    torch.set_num_threads(threads)
    conn.send(Ready())
    while True:
        msg = conn.recv()
        if isinstance(msg, Stop):
            # Nothing here needs finalizing, and tearing down torch and TVM at interpreter exit
            # takes ~0.7 s that the parent would spend waiting in shutdown().
            sys.stdout.flush()
            sys.stderr.flush()
            conn.close()
            os._exit(0)
        assert isinstance(msg, RunCase)
        case, options = msg.case, msg.options
        print(f"=== {case.name}", flush=True)
        try:
            model = build_model(case)

            def send(m: Measurement) -> None:
                m.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
                conn.send(TargetMeasured(m))

            measure_case(case, model, options, send)
            conn.send(CaseDone())
        except Exception:
            conn.send(CaseCrashed(traceback.format_exc()))


@dataclass
class _Worker:
    process: Any
    conn: Connection
    log_path: Path
    case: CaseSpec | None = None
    started: float = 0.0
    log_offset: int = 0
    pending: list[str] = field(default_factory=list)  # targets not reported yet
    ready: bool = False

    def tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                data = f.read()
        except OSError:
            return ""
        return data[-_TAIL_BYTES:].decode("utf-8", "replace")


class WorkerPool:
    """Runs cases on `jobs` worker processes; use as a context manager."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.jobs = max(1, options.jobs)
        self._ctx = mp.get_context("spawn")
        self._logdir = tempfile.TemporaryDirectory(prefix="cl_validate-workers-")
        self._workers: list[_Worker] = []
        self._spawned = 0
        # Spread the cores over the workers: oversubscribed threads slow everyone down.
        self._threads = max(1, (os.cpu_count() or 1) // self.jobs)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def prestart(self, n: int) -> None:
        """Start up to `n` workers now, so their torch/TVM imports overlap the caller's own
        work (validating every case before the first compile)."""
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
        proc = self._ctx.Process(target=_worker_main, args=(child, str(log), self._threads),
                                 daemon=True, name=f"cl_validate-worker{self._spawned}")
        proc.start()
        child.close()
        w = _Worker(proc, parent, log)
        self._workers.append(w)
        return w

    def _retire(self, w: _Worker) -> None:
        if w.process.is_alive():
            w.process.kill()
        w.process.join(timeout=5)
        w.conn.close()
        self._workers.remove(w)

    def shutdown(self) -> None:
        for w in list(self._workers):
            try:
                # A worker still importing torch/TVM (prestarted for a run the cache answered)
                # holds nothing: killed now rather than waited for until it could read "stop".
                if w.ready and w.case is None and w.process.is_alive():
                    w.conn.send(Stop())
                    w.process.join(timeout=2)
            except (OSError, BrokenPipeError):
                pass
            self._retire(w)
        self._logdir.cleanup()

    def run(self, cases: Sequence[CaseSpec],
            on_result: Callable[[CaseResult], None] | None = None, *,
            on_measurement: Callable[[CaseSpec, Measurement], CaseResult] | None = None
            ) -> list[CaseResult]:
        """Measure and judge `cases`; a case a worker could not finish becomes `error` results.

        `on_measurement` turns a measurement into its result (the default judges it); the
        suite runner uses it to store measurements in the cache on the way.
        """
        queue = deque(c for c in cases if selected_targets(c, self.options))
        self._plan(len(queue))
        results: list[CaseResult] = []

        def emit(r: CaseResult) -> None:
            results.append(r)
            if on_result is not None:
                on_result(r)

        def fail_rest(w: _Worker, message: str, kind: str) -> None:
            assert w.case is not None
            tail = w.tail()
            body = f"{message}\n\nlast output of the worker:\n{tail}" if tail else message
            for t in w.pending:
                emit(CaseResult(w.case, t, error_checks(ErrorRecord(message, kind, body)),
                                time.perf_counter() - w.started))
            w.case, w.pending = None, []

        while queue or any(w.case is not None for w in self._workers):
            # Keep `jobs` workers alive while there is work to hand out.
            while len(self._workers) < min(self.jobs, len(queue) + sum(
                    1 for w in self._workers if w.case is not None)):
                self._spawn()
            for w in self._workers:
                if w.ready and w.case is None and queue:
                    case = queue.popleft()
                    w.case, w.started = case, time.perf_counter()
                    w.pending = selected_targets(case, self.options)
                    w.log_offset = w.log_path.stat().st_size
                    w.conn.send(RunCase(case, self.options))
            conns = [w.conn for w in self._workers]
            sentinels = [w.process.sentinel for w in self._workers]
            wait([*conns, *sentinels], timeout=_POLL_S)  # until a message, an exit or a tick
            for w in list(self._workers):
                for msg in _drain(w.conn):
                    if isinstance(msg, Ready):
                        w.ready = True
                    elif isinstance(msg, TargetMeasured):
                        assert w.case is not None
                        m = msg.measurement
                        # Judged (and reported) before it leaves `pending`: if that raises,
                        # the case is still owed a verdict, never silently dropped.
                        emit(on_measurement(w.case, m) if on_measurement
                             else judge(w.case, m, self.options.stale_budget))
                        if m.target in w.pending:
                            w.pending.remove(m.target)
                    elif isinstance(msg, CaseDone):
                        w.case, w.pending = None, []
                    elif isinstance(msg, CaseCrashed):
                        first = msg.traceback.strip().splitlines()[-1]
                        fail_rest(w, f"internal error in the worker: {first}",
                                  "InternalError")
                if not w.process.is_alive():
                    code = w.process.exitcode
                    if w.case is not None:
                        why = _describe_exit(code)
                        fail_rest(w, f"worker process {why} while running this case",
                                  "WorkerCrashed")
                    self._retire(w)
                    continue
                if w.case is None:
                    continue
                limit_s = self.options.timeout or w.case.timeout
                if time.perf_counter() - w.started > limit_s:
                    self._retire(w)
                    fail_rest(w, f"timed out after {limit_s:g} s (timeout)", "Timeout")
                    continue
                cap = self.options.max_memory_mb or w.case.max_memory_mb
                rss = _rss_mb(w.process.pid)
                if rss is not None and rss > cap:
                    self._retire(w)
                    fail_rest(w, f"worker used {rss:.0f} MB, over the {cap} MB memory cap "
                              "(max_memory_mb)", "OutOfMemory")
        return results


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
