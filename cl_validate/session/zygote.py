"""The zygote: a process that imports torch, TVM and cl_validate once, warms them up, and
then forks a fresh case process for every case (`cl_validate.session.case_process`).

Forking gives each case a process with everything imported and nothing of another case in
it, in milliseconds: the zygote itself never runs a model's code. It talks to the run's
parent over a Unix socket (one message per packet; a case's result pipe and control socket arrive
with its `StartCase` as passed file descriptors), reports each case process it forks and how it
ended, and ends whatever orphans a dead case process leaves to it (it is a subreaper). When
the parent goes away, the socket reads end-of-file and the zygote ends every process below
it and exits.

``python -m cl_validate.session.zygote FD`` — FD is its end of the socket.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import time
import warnings
from pathlib import Path

from cl_validate import procs
from cl_validate.measurements import wire
from cl_validate.measurements.messages import (
    CASE_PACKET,
    SYS_PATH_ENV,
    Exited,
    Forked,
    Ready,
    StartCase,
    Stop,
    decode,
    frame,
)
from cl_validate.spec.casefile import load_text_as_case

#: The largest control packet (a case's message comes in a file beside it).
_MAX_PACKET = 1 << 16
#: Set before torch and TVM load here, so that neither touches the CUDA driver in a process
#: that forks: torch's ``cuda.is_available()`` asks the driver (``cudaGetDeviceCount``) and
#: marks every later fork bad unless it may ask NVML instead; tvm-ffi's optional torch
#: extension asks it on import. (Seen on an H200: every case "Cannot re-initialize CUDA in
#: forked subprocess".) torch is told it has no GPU (`keep_torch_off_gpus`); a target
#: process, which forks nothing, gives torch its answer back and opens its device as usual.
FORK_SAFE_ENV = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1", "TVM_FFI_DISABLE_TORCH_C_DLPACK": "1"}


def _send(sock: socket.socket, msg: object) -> None:
    sock.send(frame(msg)[8:])  # a packet is one message: no length prefix


def _warm_up() -> None:
    """Pay once, here, what every case would pay on its first export: the lazy imports of
    torch.export (sympy, networkx, dynamo) and of TVM's Relax frontend (about 2 s per case).
    Compiling is not warmed: a second compile in one process is no faster than the first
    (0.2-0.3 s for a small model on llvm and cuda alike), so it would only lengthen the
    run's serial start. Symbolic only: no kernel runs (threads started here would not
    survive a fork)."""
    # lazy: torch, TVM and the session load in `main`, with the parent's import path set
    import torch

    from cl_validate.session import case_session

    case = load_text_as_case(
        Path.cwd() / "_cl_validate_warm_up.toml",
        'model = "cl_validate_warm_up:net"\n[[inputs]]\nname = "x"\nshape = [1, 3, 8, 8]\n'
        '[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n')
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1)).eval()
    case_session.export_and_import(model, case, [torch.zeros(1, 3, 8, 8)])


def main(fd: int) -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, [])  # the parent's blocked signals: not ours
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides about interrupts
    warnings.filterwarnings("ignore")
    procs.become_subreaper()
    sock = socket.socket(fileno=fd)
    os.environ.update(FORK_SAFE_ENV)
    path = os.environ.pop(SYS_PATH_ENV, None)
    if path:  # the parent's import path, as a process it spawned would have it
        sys.path[:] = json.loads(path)
    # lazy: torch, TVM and the session, with the parent's import path in place; torch
    # answers that it has no GPU from the start
    from cl_validate.compile.devices import (
        Probe,
        cuda_driver_initialized,
        keep_torch_off_gpus,
        kinds_present,
    )

    keep_torch_off_gpus()
    # lazy: torch, TVM and the session, once torch answers that it has no GPU
    from cl_validate.session import case_process  # noqa: F401 - imports torch, TVM, the session

    # Never ask a device runtime here: a CUDA context does not survive the forks below. The
    # probe asks in its own process, during the warm-up; every case process inherits its answer.
    probe = Probe()
    t0 = time.perf_counter()
    try:
        _warm_up()
    except Exception as exc:  # the cases pay the warm-up themselves; say why here
        print(f"zygote: warm-up failed ({type(exc).__name__}: {exc})", file=sys.stderr)
    devices = kinds_present(probe.answer())
    print(f"zygote: warm in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    if cuda_driver_initialized():  # harmless to the cases (a GPU opens in a device host)
        print("zygote: the warm-up initialized the CUDA driver here", file=sys.stderr,
              flush=True)
    _send(sock, Ready(devices))
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    jobs: dict[int, int] = {}  # case process pid → job
    try:
        _serve(sock, wake_r, jobs)
    finally:
        for pid in list(jobs):
            procs.kill([*procs.descendants(pid), pid])
        procs.end_descendants(os.getpid(), settle_s=1.0)
        os._exit(0)


def _serve(sock: socket.socket, wake: int, jobs: dict[int, int]) -> None:
    while True:
        watched: list[socket.socket | int] = [sock, wake]
        ready, _, _ = select.select(watched, [], [], 1.0)
        if wake in ready:
            with contextlib.suppress(OSError):
                os.read(wake, 4096)
        _reap(sock, jobs)
        if sock not in ready:
            continue
        data, fds, _, _ = socket.recv_fds(sock, _MAX_PACKET, 4)
        if not data:  # the parent is gone
            return
        try:
            if data == CASE_PACKET:  # a case: its message in the fourth descriptor
                if len(fds) != 4:
                    raise wire.WireError(f"a case with {len(fds)} descriptors, not 4")
                body = fds.pop()
                try:
                    data = wire.read_message_file(body)
                finally:
                    os.close(body)
            msg = decode(data, (StartCase, Stop))
            if isinstance(msg, StartCase) and len(fds) != 3:
                raise wire.WireError(f"a case with {len(fds)} descriptors, not 3")
        except wire.WireError as exc:  # from the parent, so a bug: say it and go on
            print(f"zygote: bad message from the parent: {exc}", file=sys.stderr)
            for f in fds:
                os.close(f)
            continue
        if isinstance(msg, Stop):
            return
        result_fd, control_fd, log_fd = fds
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            # lazy: imported by `main` already (torch, TVM); here only by name
            from cl_validate.session.case_process import case_main

            case_main(msg, result_fd, control_fd, log_fd, close=(sock.fileno(), wake))
        for f in fds:
            os.close(f)
        jobs[pid] = msg.job
        _send(sock, Forked(msg.job, pid))


def _reap(sock: socket.socket, jobs: dict[int, int]) -> None:
    """Collect every child that ended: a case process (reported to the parent), or an orphan
    a dead case left here (ended, with what it started)."""
    for child in procs.children(os.getpid(), zombies=True):
        if child not in jobs:  # an orphan: nothing of it may outlive its case
            procs.kill([*procs.descendants(child), child])
    for pid, status in procs.ended_children():
        job = jobs.pop(pid, None)
        if job is not None:
            with contextlib.suppress(OSError):
                _send(sock, Exited(job, pid, status))


if __name__ == "__main__":
    main(int(sys.argv[1]))
