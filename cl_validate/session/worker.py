"""A case process: the one process a case's model code runs in, forked fresh from the zygote
(`cl_validate.session.zygote`) for that case and gone when it ends.

Nothing a case's code changes in its process — a monkey-patched ``nn.Conv2d``, a default
dtype, a closed stdout, ``tvm.compile = None`` — can reach another case: the next case is
forked from the zygote, which never ran a model's code. What the case reports goes to the
parent on the case's own result pipe, as typed messages (`cl_validate.measurements.wire`);
the parent trusts nothing it reads there.

A case process is its own process group and a subreaper: whatever the case starts stays in
its tree, where it (after each target) and the parent (on a timeout, a limit, a crash) find
it. Its stdout and stderr go to the case's log file, stdin is /dev/null. It holds a lifeline
from the parent: when the parent goes away (killed with ``-9``, say), the lifeline reads
end-of-file and the case ends its whole tree and exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence

from cl_validate import procs
from cl_validate.checks.compiled import CaseKind
from cl_validate.measurements.measurement import Measurement
from cl_validate.measurements.messages import (
    CaseDone,
    CaseFailed,
    FromCase,
    RunCase,
    TargetMeasured,
    frame,
)
from cl_validate.paths import repo_root
from cl_validate.session.case_session import CaseSession
from cl_validate.session.file_record import FileRecorder


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _watch_lifeline(fd: int) -> None:
    """Block on the lifeline; end-of-file means the parent is gone: end this case's tree."""
    with contextlib.suppress(OSError):
        while os.read(fd, 64):
            pass
    procs.end_descendants(os.getpid(), settle_s=0.5)
    os._exit(70)


def case_main(msg: RunCase, result_fd: int, lifeline_fd: int,
              close: Sequence[int] = ()) -> None:
    """Run one case in this (just forked) process and exit; never returns."""
    code = 0
    try:
        for fd in close:  # the zygote's own descriptors: not the case's business
            with contextlib.suppress(OSError):
                os.close(fd)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides about interrupts
        os.setpgid(0, 0)
        procs.become_subreaper()
        log = os.open(msg.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)  # C-level output (TVM, a segfault's last words) lands there too
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # a model that asks for input gets end-of-file, not a hang
        os.close(null)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        threading.Thread(target=_watch_lifeline, args=(lifeline_fd,), daemon=True).start()
        os.environ["TVM_NUM_THREADS"] = str(msg.threads)
        import torch  # lazy: already imported by the zygote; the threads are this case's

        torch.set_num_threads(msg.threads)
        _run(msg, result_fd)
    except BaseException:  # pragma: no cover - a bug here; said on the pipe if possible
        code = 71
        with contextlib.suppress(BaseException):
            _send(result_fd, CaseFailed("internal error in the case process",
                                        CaseKind.INTERNAL_ERROR, traceback.format_exc()))
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _send(fd: int, msg: FromCase) -> None:
    _write_all(fd, frame(msg))


def _run(msg: RunCase, result_fd: int) -> None:
    print(f"=== {msg.case.label}", flush=True)
    left_out = [msg.options.cache_dir] if msg.options.cache_dir else []
    left_out.append(str(msg.case.path.resolve().parent / "baselines"))
    recorder = FileRecorder(left_out)
    recorder.start()

    def emit(m: Measurement, key: str | None, cached: bool) -> None:
        if not cached:
            m.peak_rss_mb = procs.peak_rss_mb()
            m.stray_processes = procs.end_descendants(os.getpid())
        _send(result_fd, TargetMeasured(m, key, cached))
        procs.reset_peak_rss()  # the next target's peak is its own

    procs.reset_peak_rss()
    try:
        CaseSession(msg.case, msg.options).measure_or_reuse(emit)
    except SystemExit as exc:  # the model's code called sys.exit: that case's verdict
        _send(result_fd, CaseFailed(f"the model's code called sys.exit({exc.code!r})",
                                    CaseKind.MODEL_EXITED, traceback.format_exc()))
        return
    except BaseException:
        tb = traceback.format_exc()
        _send(result_fd, CaseFailed("internal error in the case process: "
                                    + tb.strip().splitlines()[-1], CaseKind.INTERNAL_ERROR, tb))
        return
    recorder.stop()
    procs.end_descendants(os.getpid())
    _send(result_fd, CaseDone(recorder.stamps(repo_root(msg.case.path))))
