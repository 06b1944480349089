"""The loop of a worker process: receive a case, measure it in a `CaseSession`, send each
target's measurement to the parent as it is known (`cl_validate.suite.pool` starts workers and
enforces their limits).

A worker is its own process group and a subreaper: whatever a case starts stays in its tree,
where the worker (after each target) and the parent (when the worker dies) find it. Its
stdout and stderr (C-level output too: TVM, a segfault's last words) go to a log file the
parent reads the tail of; its stdin is /dev/null.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
import warnings
from multiprocessing.connection import Connection

import torch

from cl_validate import procs
from cl_validate.checks.compiled import CaseKind
from cl_validate.compile.tvm_targets import local_devices
from cl_validate.measurements.measurement import Measurement
from cl_validate.measurements.messages import (
    CaseDone,
    CaseFailed,
    Ready,
    RunCase,
    Stop,
    TargetMeasured,
)
from cl_validate.session.case_session import CaseSession


def main(conn: Connection, log_path: str, threads: int, token: str) -> None:
    """Loop in the worker: receive a case, measure it, send each target's result as it
    finishes. Its own process group, and a subreaper: whatever the case starts stays in its
    tree, where the worker (after each target) and the parent (when the worker dies) find
    it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides about interrupts
    os.environ[procs.POOL_ENV] = token  # inherited by whatever the case starts
    os.setpgid(0, 0)
    procs.become_subreaper()
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)  # C-level output (TVM, a segfault's last words) lands in the log too
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # a model that asks for input gets end-of-file, not a hang
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))
    warnings.filterwarnings("ignore", category=FutureWarning)
    torch.set_num_threads(threads)
    conn.send(Ready(local_devices()))
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
        print(f"=== {msg.case.label}", flush=True)

        def emit(m: Measurement, key: str | None, cached: bool) -> None:
            if not cached:
                m.peak_rss_mb = procs.peak_rss_mb()
                m.stray_processes = procs.end_descendants(os.getpid())
            conn.send(TargetMeasured(m, key, cached))
            procs.reset_peak_rss()  # the next target's peak is its own

        procs.reset_peak_rss()  # not the high-water mark of the cases before

        try:
            CaseSession(msg.case, msg.options).measure_or_reuse(emit)
        except SystemExit as exc:  # the model's code called sys.exit: that case's verdict
            conn.send(CaseFailed(f"the model's code called sys.exit({exc.code!r})",
                                 CaseKind.MODEL_EXITED, traceback.format_exc()))
        except BaseException:
            tb = traceback.format_exc()
            conn.send(CaseFailed("internal error in the worker: " + tb.strip().splitlines()[-1],
                                 CaseKind.INTERNAL_ERROR, tb))
        procs.end_descendants(os.getpid())
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send(CaseDone())
