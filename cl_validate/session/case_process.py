"""A case process: the one process a case's model code runs in, forked fresh from the zygote
(`cl_validate.session.zygote`) for that case and gone when it ends.

Nothing a case's code changes in its process — a monkey-patched ``nn.Conv2d``, a default
dtype, a closed stdout, ``tvm.compile = None`` — can reach another case: the next case is
forked from the zygote, which never ran a model's code. What the case reports goes to the
parent on the case's own result pipe, as typed messages (`cl_validate.measurements.wire`);
the parent trusts nothing it reads there.

A case process builds the model, runs PyTorch and exports once (`CaseSession.prepare`), then
measures each target in a *target process* it forks when the parent grants it a slot: the
targets of a case share one export, and run side by side when the run has the cores (``-j``).
A target process reports on a pipe of its own, passed with its grant.

A case process is its own process group and a subreaper: whatever the case starts stays in
its tree, where it (after each target) and the parent (on a timeout, a limit, a crash) find
it. Its stdout and stderr go to the case's log file, stdin is /dev/null. Its control socket
to the parent is also its lifeline: when the parent goes away (killed with ``-9``, say), the
socket reads end-of-file and the case ends its whole tree and exits.
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path

from cl_validate import procs
from cl_validate.checks.compile import CaseKind
from cl_validate.compile.tvm_targets import device_available
from cl_validate.errors import ErrorRecord, first_line
from cl_validate.measurements import wire
from cl_validate.measurements.measurement import Measurement
from cl_validate.measurements.messages import (
    CaseDone,
    CaseFailed,
    ChildExited,
    FromCase,
    Grant,
    Prepared,
    StartCase,
    TargetMeasured,
    decode,
    frame,
)
from cl_validate.paths import repo_root
from cl_validate.session import device_host, sandbox
from cl_validate.session.case_session import CaseSession
from cl_validate.session.device_host import DeviceHost, hosted
from cl_validate.session.file_record import FileRecorder
from cl_validate.session.open_watch import OpenWatch
from cl_validate.spec.options import selected_targets

#: A grant: the target to measure and the pipe to report it on.
_Granted = tuple[str, int]
#: This case's own helpers among its children (its open watcher): not strays to end.
_KEEP: tuple[int, ...] = ()


def _send(fd: int, msg: FromCase) -> None:
    wire.write_all(fd, frame(msg))


class _Control:
    """The control socket, read on a thread: grants go to `grants` (and a byte to `wake`);
    its end — the parent is gone — ends this case's whole tree."""

    def __init__(self, fd: int) -> None:
        self.sock = socket.socket(fileno=fd)
        self.grants: queue.SimpleQueue[_Granted] = queue.SimpleQueue()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 1)
                if not data:
                    break
                try:
                    grant = decode(data, (Grant,))
                except wire.WireError:  # from the parent, so a bug: drop it
                    for fd in fds:
                        os.close(fd)
                    continue
                if fds:
                    self.grants.put((grant.target, fds[0]))
                    os.write(self.wake_w, b"g")
        procs.end_descendants(os.getpid(), settle_s=0.5)
        os._exit(70)

    def fds(self) -> tuple[int, ...]:
        return (self.sock.fileno(), self.wake_r, self.wake_w)


def _summary(exc: BaseException) -> str:
    """``Type: first meaningful line`` (a message's last line is often the middle of a
    sentence)."""
    return f"{type(exc).__name__}: {first_line(exc)}".rstrip(": ")


def case_main(msg: StartCase, result_fd: int, control_fd: int, log_fd: int,
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
        os.dup2(log_fd, 1)  # the log the parent made and reads (never by name)
        os.dup2(log_fd, 2)  # C-level output (TVM, a segfault's last words) lands there too
        os.close(log_fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # a model that asks for input gets end-of-file, not a hang
        os.close(null)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        left_out = _left_out(msg)
        watch = _start_watch(left_out) if msg.options.cache_dir else None
        # The kernel's wall, before any thread or model code: from here on this process and
        # what it starts may signal and trace only each other (`sandbox`), and its opens are
        # seen by the watcher; where the kernel cannot, the parent's defence stands alone.
        hosted = _hosted_targets(msg)
        sandbox.confine(proc_writes=bool(hosted),
                        watch=watch.hand_over if watch is not None else None)
        if watch is not None and not watch.watching:
            watch.abandon()
            watch = None
        os.environ["TVM_NUM_THREADS"] = str(msg.threads)  # the hosts' too
        hosts = _start_hosts(hosted)
        control = _Control(control_fd)
        import torch  # lazy: already imported by the zygote; the threads are this case's

        torch.set_num_threads(msg.threads)
        _run(msg, result_fd, control, watch, left_out, hosts)
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


def _hosted_targets(msg: StartCase) -> dict[str, str]:
    """The targets of this case whose programs run in a device host (a GPU of this machine;
    with ``CL_VALIDATE_HOST_CPU``, the CPU too), with their device."""
    devices = {t: msg.case.target_def(t).device for t in selected_targets(msg.case, msg.options)}
    return {t: d for t, d in devices.items()
            if hosted(d) and (d == "cpu" or device_available(d))}


def _start_hosts(hosted: dict[str, str]) -> dict[str, DeviceHost]:
    """A device host for each hosted target, started before any of the model's code runs,
    then ``/proc`` walled for this case: the CUDA driver names a host's threads in the
    host's own ``/proc/PID`` (each host walls the rest, `sandbox.wall_proc`), a folder no
    rule of the case's could name before the host existed. Their pids are kept among this
    case's own helpers; a host leaves when its target process and this one closed its
    pipes."""
    global _KEEP
    if not hosted:
        return {}
    walled = sandbox.confined
    hosts = {t: DeviceHost(d, wall_proc=walled) for t, d in hosted.items()}
    _KEEP = (*_KEEP, *(h.pid for h in hosts.values()))
    if walled:
        why = sandbox.wall_proc(own=False)
        if why is not None:
            print(f"/proc not walled for this case: {why}", file=sys.stderr)
    return hosts


def _left_out(msg: StartCase) -> list[str]:
    """Folders whose files are not the case's inputs: the cache's and the baselines'."""
    left_out = [msg.options.cache_dir] if msg.options.cache_dir else []
    left_out.append(str(msg.case.path.resolve().parent / "baselines"))
    return left_out


def _start_watch(left_out: list[str]) -> OpenWatch | None:
    """An open watcher for this case (whose stamps only the cache reads), where the wall
    will go up and can hold opens; None elsewhere, or when it did not start (said in the
    case's log)."""
    global _KEEP
    if not sandbox.filterable():
        return None
    try:
        watch = OpenWatch(left_out)
    except OSError as exc:
        print(f"open watcher not started: {exc}", file=sys.stderr)
        return None
    if not watch.ready():
        print("open watcher not started: it did not say it was up", file=sys.stderr)
        return None
    _KEEP = (watch.pid,)
    return watch


def _run(msg: StartCase, result_fd: int, control: _Control, watch: OpenWatch | None,
         left_out: list[str], hosts: dict[str, DeviceHost]) -> None:
    print(f"=== {msg.case.label}", flush=True)
    recorder = FileRecorder(left_out)
    recorder.start()
    root = repo_root(msg.case.path)

    def emit(m: Measurement, key: str | None, cached: bool) -> None:
        if not cached:
            m.peak_rss_mb = procs.peak_rss_mb()
            m.stray_processes = procs.end_descendants(os.getpid(), keep=_KEEP)
        _send(result_fd, TargetMeasured(m, key, cached))

    procs.reset_peak_rss()
    try:
        session = CaseSession(msg.case, msg.options)
        keys = session.start(emit)
        if keys is not None:
            error = session.prepare()
            if error is not None:
                for t in session.targets:
                    emit(session.failed(t, error), keys.get(t), False)
            else:
                _serve(session, keys, result_fd, control, recorder, root, hosts)
    except SystemExit as exc:  # the model's code called sys.exit: that case's verdict
        _send(result_fd, CaseFailed(f"the model's code called sys.exit({exc.code!r})",
                                    CaseKind.MODEL_EXITED, traceback.format_exc()))
        return
    except BaseException as exc:
        tb = traceback.format_exc()
        _send(result_fd, CaseFailed(f"internal error in the case process: {_summary(exc)}",
                                    CaseKind.INTERNAL_ERROR, tb))
        return
    recorder.stop()
    for host in hosts.values():  # a target never granted (its result cached) left its own
        host.close()
    procs.end_descendants(os.getpid(), keep=_KEEP)
    unseen = ""
    if watch is not None:  # what the case's processes opened, Python or not
        watched = watch.collect()
        recorder.merge(watched.taken)
        unseen = watched.unseen
        if unseen:
            print(f"not kept in the cache: {unseen}", flush=True)
    _send(result_fd, CaseDone(recorder.stamps(root), unseen))


def _serve(session: CaseSession, keys: dict[str, str], result_fd: int, control: _Control,
           recorder: FileRecorder, root: Path, hosts: dict[str, DeviceHost]) -> None:
    """Ready: fork a target process for each target the parent grants, and say how each
    ended, until every target was measured."""
    # What the model's code started while the case was prepared and left running: ended now,
    # and reported with the first target measured (after this, a target process's own).
    strays = procs.end_descendants(os.getpid(), keep=_KEEP)
    prep_peak = procs.peak_rss_mb()  # so is the memory the preparation took
    _send(result_fd, Prepared(tuple(session.targets)))
    left = set(session.targets)
    children: dict[int, str] = {}
    me = os.getpid()
    while left or children:
        with contextlib.suppress(InterruptedError):
            select.select([control.wake_r], [], [], 0.2)
        with contextlib.suppress(BlockingIOError, OSError):
            os.read(control.wake_r, 4096)
        while not control.grants.empty():
            target, fd = control.grants.get()
            if target not in left:  # not one of ours, or granted twice
                os.close(fd)
                continue
            left.discard(target)
            seen = recorder.seen()
            pid = os.fork()
            if pid == 0:
                for other, host in hosts.items():  # its own host only
                    (device_host.adopt if other == target else DeviceHost.release)(host)
                _target_main(session, target, keys.get(target), fd,
                             (result_fd, *control.fds()), recorder, seen, root, strays,
                             prep_peak)
            os.close(fd)
            if target in hosts:  # the target process holds it now: it leaves with it
                hosts.pop(target).release()
            children[pid] = target
            strays, prep_peak = [], 0.0
        for pid, status in procs.ended_children():
            target = children.pop(pid, "")
            if target:
                _send(result_fd, ChildExited(target, status))
        for orphan in procs.children(me):  # left by a target process that ended: end them
            if orphan not in children and orphan not in _KEEP:
                procs.kill([*procs.descendants(orphan), orphan])


def _target_main(session: CaseSession, target: str, key: str | None, fd: int,
                 close: Sequence[int], recorder: FileRecorder, seen: frozenset[str],
                 root: Path, strays: list[str], prep_peak: float) -> None:
    """A target process: measure `target`, report it on `fd`, exit; never returns."""
    code = 0
    try:
        for f in close:  # the case process's pipes and socket: not this target's
            with contextlib.suppress(OSError):
                os.close(f)
        procs.reset_peak_rss()
        try:
            m = session.measure(target)
        except SystemExit as exc:
            m = Measurement(target, ErrorRecord(
                f"the model's code called sys.exit({exc.code!r})", CaseKind.MODEL_EXITED,
                traceback.format_exc()))
        except BaseException as exc:
            m = Measurement(target, ErrorRecord(
                f"internal error in the target process: {_summary(exc)}",
                CaseKind.INTERNAL_ERROR, traceback.format_exc()))
        m.peak_rss_mb = max(procs.peak_rss_mb(), prep_peak)
        m.stray_processes = [*strays, *procs.end_descendants(os.getpid())]
        _send(fd, TargetMeasured(m, key, False, inputs=recorder.stamps(root, since=seen)))
    except BaseException:  # pragma: no cover - the pipe is gone
        code = 72
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
