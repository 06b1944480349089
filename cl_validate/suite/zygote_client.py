"""This process's side of the zygote: starting it, reading what it says, handing it cases,
and starting it again when it dies.

The zygote (`cl_validate.session.zygote`) imports torch and TVM once and forks a fresh case
process for every case it is handed; this process names its module and never imports it. It
talks on a socket of packets: `Ready` (with the device types the machine has: this process
never loads TVM to ask), `Forked` and `Exited` for each case. A case travels as a file of its
own with the descriptors of its pipes and log (a packet holds about 208 kB, a case file may
be larger). A zygote may die (a case may kill it): the next one is started when the loop next
asks for it, and what the dead one's tree left behind is ended (`cl_validate.suite.reaping`).
One that dies before it is ready says the environment is broken (torch or TVM do not
import): after three, the run stops with an internal error instead of failing every case.
Costs one process (torch and TVM loaded, some hundreds of MB) for the pool's life, and its
start-up (seconds) once per pool and per zygote that dies.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from cl_validate import procs
from cl_validate.errors import ClValidateError, DeviceUnavailableError
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
from cl_validate.suite.case_logs import LogFiles, log_tail
from cl_validate.suite.reaping import Reaper, describe_exit

#: How often a loop waiting on the zygote or the cases wakes up, in seconds.
POLL_S = 0.1
#: How long the zygote may take to import torch and TVM and warm up.
_READY_TIMEOUT_S = 300.0
#: The module the zygote runs. Named, not imported: this process never loads torch or TVM.
ZYGOTE_MODULE = "cl_validate.session.zygote"


@dataclass
class Zygote:
    """A running zygote: its process, the socket to it, its log."""

    number: int  # the how-manieth zygote of its pool: what a case handed to it remembers
    process: subprocess.Popen[bytes]
    sock: socket.socket
    log_fd: int
    ready: bool = False

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self) -> str:
        return log_tail(self.log_fd)


class ZygoteClient:
    """The zygote of one pool: `ensure` one runs, read its `messages`, `send_case` to it,
    `stop` it."""

    def __init__(self, logs: LogFiles, reaper: Reaper) -> None:
        self.logs = logs
        self.reaper = reaper
        self.current: Zygote | None = None
        #: device types this machine has, from the first zygote's `Ready`
        self.devices: dict[str, bool] | None = None
        self._started = 0
        self._startup_failures = 0

    def ensure(self) -> Zygote:
        """The running zygote, started (again) if there is none."""
        z = self.current
        if z is not None and z.alive():
            return z
        if z is not None:
            self._died(z)
        self._started += 1
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log = self.logs.new_log(f"zygote{self._started}-")
        env = {**os.environ, SYS_PATH_ENV: json.dumps([p or os.getcwd() for p in sys.path])}
        proc = subprocess.Popen(
            [sys.executable, "-m", ZYGOTE_MODULE, str(child.fileno())],
            pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, stdout=log,
            stderr=log, start_new_session=True, env=env)
        child.close()
        parent.setblocking(False)
        if self.current is not None:  # the dead one's log: read by now
            with contextlib.suppress(OSError):
                os.close(self.current.log_fd)
        self.current = Zygote(self._started, proc, parent, log)
        return self.current

    def _died(self, z: Zygote) -> None:
        """A zygote that died before it was ready says nothing about a case: the environment
        is broken (torch or TVM do not import). Tried three times, then an internal error."""
        with contextlib.suppress(OSError):
            z.sock.close()
        if not z.ready:
            self._startup_failures += 1
            if self._startup_failures >= 3:
                tail = z.tail().strip()
                raise ClValidateError(
                    f"the process that starts cases {describe_exit(z.process.returncode)} "
                    f"while importing torch and TVM, {self._startup_failures} times"
                    + (f":\n{tail}" if tail else ""))
        self.end_orphans()

    def end_orphans(self) -> None:
        """End what dead zygotes left behind, the current one kept (`Reaper.end_orphans`)."""
        self.reaper.end_orphans(self.current.process.pid if self.current is not None else None)

    def holds(self, number: int) -> bool:
        """Whether zygote `number` is the current one."""
        return self.current is not None and self.current.number == number

    def messages(self, z: Zygote) -> list[object]:
        """What `z` said since the last call, without blocking."""
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
                if self.devices is None:
                    self.devices = dict(msg.devices)
            out.append(msg)

    def wait_for_devices(self) -> dict[str, bool]:
        """Which device types (``cuda``, ``opencl``...) this machine has, as the zygote sees
        them (this process never loads TVM to ask)."""
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while self.devices is None:
            z = self.ensure()
            select.select([z.sock], [], [], POLL_S)
            self.messages(z)
            if time.monotonic() > deadline:
                raise DeviceUnavailableError("the process that starts cases never came up to "
                                             "ask for devices",
                                             hint="check that torch and TVM import")
        return self.devices

    def send_case(self, z: Zygote, run: StartCase, fds: list[int]) -> None:
        """Hand `run` to `z` with `fds` (its result pipe, control socket and log). The case
        travels in a file of its own: a packet holds about 208 kB, a case file (a long
        description, thousands of outputs) may be larger. A zygote that is gone is noticed
        by the run loop, and the case handed out again."""
        body = wire.message_file(frame(run)[8:])
        try:
            socket.send_fds(z.sock, [CASE_PACKET], [*fds, body])
        except OSError:
            pass  # the zygote is gone: noticed by the loop, the case is handed out again
        finally:
            os.close(body)

    def stop(self) -> None:
        """Stop the zygote (killed if it does not end in two seconds) and end what is left."""
        z, self.current = self.current, None
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
        self.end_orphans()
        if z is not None:
            with contextlib.suppress(OSError):
                os.close(z.log_fd)
