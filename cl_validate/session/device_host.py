"""A device host: the fresh process that runs a compiled program on a GPU (any device but the
CPU) for a target process, and the client the target process talks to it with.

A GPU runtime does not survive ``fork()``: once the CUDA driver is initialized in a process,
every process forked from it fails its first CUDA call (``cudaErrorInitializationError``).
The processes a case's work is done in are forks — the zygote forks the case process, which
forks its target processes — and what ran before the fork is not ours to promise: torch's
export, TVM's import and the model's own code all ran there, and on an H200 with torch 2.11
the zygote's warm-up alone initialized the driver (seen with `devices.cuda_driver_initialized`:
every case errored). So a target process never opens a GPU itself. It exports the compiled
program as a shared library and sends it to a device host — a new interpreter started with
fork+exec, which imports TVM and NumPy only (not torch, nor the model) and inherits no
driver state —, with the program's arguments, and gets the outputs back, as typed data on
two pipes (`cl_validate.measurements.wire`: arrays as dtype, shape and bytes, never
pickles). One host serves a target process for all its runs of one device (numerics,
``--profile``, the kernel-by-kernel check of a failing program), and ends with it. In an
isolated run the case process starts each target's host before the model's code runs (the
``/proc`` wall, `session.sandbox.wall_proc`) and the target process adopts it (`adopt`);
in one process, the host is started on first use (`host_for`).

The host is a process of the case: it inherits the case's walls (`session.sandbox`), its
process group and its limits, and a timeout or a crash of the case ends it with the rest.
A host that dies mid-request (a segfault in a kernel) is a `DeviceHostError` naming its exit
(its pid, where the process asking did not start it), for that target's verdict.

    python -m cl_validate.session.device_host DEVICE REQUEST_FD REPLY_FD   (started by `DeviceHost`)

The CPU runs in the target process itself, as before; ``CL_VALIDATE_HOST_CPU=1`` sends it
through a host as well (how a CPU-only runner tests this path).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from cl_validate import procs
from cl_validate.errors import first_line
from cl_validate.measurements import wire

#: Set (to anything) to run CPU programs through a device host too (tests of this path).
HOST_CPU_ENV = "CL_VALIDATE_HOST_CPU"
#: How long `close` waits for a host to leave after its pipe closed.
_LEAVE_S = 10.0
#: The host's argument that has it wall /proc but its own folder (`sandbox.wall_proc`)
_WALL_PROC = "--wall-proc"


def hosted(device: str) -> bool:
    """Whether programs for `device` (``cpu``, ``cuda``...) run in a device host."""
    return device != "cpu" or bool(os.environ.get(HOST_CPU_ENV))


def flatten_outputs(out: Any) -> list[Any]:
    """A VM result as a flat list of tensors (tuples and lists flattened in order); a
    model's result is `named_outputs`'."""
    if isinstance(out, (tuple, list)):
        return [leaf for o in out for leaf in flatten_outputs(o)]
    # tvm.runtime containers (Array / tuple objects) are sequences; a tensor has numpy()
    if hasattr(out, "__len__") and hasattr(out, "__getitem__") and not hasattr(out, "numpy"):
        return [leaf for i in range(len(out)) for leaf in flatten_outputs(out[i])]
    return [out]


class RunMain(msgspec.Struct, tag=True):
    """Run the library's Relax ``main`` once on `args`; the outputs come back."""

    lib: str
    args: list[np.ndarray]


class ProfileMain(msgspec.Struct, tag=True):
    """Time every call of ``main`` (`time_calls`, for `kernel_timer.profile_case`)."""

    lib: str
    args: list[np.ndarray]
    names: list[str]
    repeats: int


class RunKernel(msgspec.Struct, tag=True):
    """Call the library's one PrimFunc ``main`` on `buffers`; the buffers come back."""

    lib: str
    buffers: list[np.ndarray]


Request = RunMain | ProfileMain | RunKernel


class Arrays(msgspec.Struct, tag=True):
    arrays: list[np.ndarray]


class Timings(msgspec.Struct, tag=True):
    device: str
    per_kernel: list[list[int]]


class Failed(msgspec.Struct, tag=True):
    message: str
    detail: str = ""


Reply = Arrays | Timings | Failed


class DeviceHostError(RuntimeError):
    """The device host could not answer: the request failed there, or the host died."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


def _plain(a: np.ndarray) -> np.ndarray:
    """An array that can travel: bfloat16 and the float8s (ml_dtypes, not numbers to the
    wire) as float32, which holds them exactly."""
    return a if a.dtype.kind in "biufc" else a.astype(np.float32)


class DeviceHost:
    """A device host for `device`, started now; `close` ends it (so does the end of the
    target process, whose descendants are ended). With `wall_proc`, the host walls files
    under ``/proc`` but its own folder before it opens the device (`sandbox.wall_proc`): a
    case that opens a GPU starts its hosts so, before any of its model's code runs, and then
    walls ``/proc`` for itself (`cl_validate.session.case_process`). A host may be started
    by one process and used by a process forked from it (a case's target process): the
    process that started it waits for its end."""

    def __init__(self, device: str, wall_proc: bool = False) -> None:
        self.device = device
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", __name__, device, str(req_r), str(rep_w),
                 *([_WALL_PROC] if wall_proc else [])],
                pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL, env=procs.python_env())
        finally:
            os.close(req_r)
            os.close(rep_w)
        self._w, self._r = req_w, rep_r
        self._owner = os.getpid()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._libs: dict[int, tuple[Any, str]] = {}  # id(module) → (module, library path)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def library(self, module: Any) -> str:
        """`module` (an executable or a runtime module) exported as a shared library, once;
        in a folder of the process that uses the host (so two never share a name)."""
        if self._tmp is None or not self._tmp.name.endswith(f"-{os.getpid()}"):
            self._tmp = tempfile.TemporaryDirectory(prefix="cl_validate-device-",
                                                    suffix=f"-{os.getpid()}")
            self._libs = {}
        held = self._libs.get(id(module))
        if held is None:
            path = str(Path(self._tmp.name) / f"program{len(self._libs)}.so")
            try:
                module.export_library(path)
            except Exception as exc:  # no C compiler to link it with, most often
                raise DeviceHostError(
                    f"cannot link the program for the {self.device} device host: "
                    f"{type(exc).__name__}: {first_line(exc)} (hint: the host loads it as a "
                    "shared library, linked by a C++ compiler: install g++, or name one in "
                    "CXX)", str(exc)) from exc
            held = self._libs[id(module)] = (module, path)  # held: its id stays its own
        return held[1]

    def run_main(self, executable: Any, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        reply = self._ask(RunMain(self.library(executable), [np.ascontiguousarray(a)
                                                             for a in args]))
        assert isinstance(reply, Arrays)
        return list(reply.arrays)

    def profile_main(self, executable: Any, args: Sequence[np.ndarray], names: Sequence[str],
                     repeats: int) -> Timings:
        reply = self._ask(ProfileMain(self.library(executable),
                                      [np.ascontiguousarray(a) for a in args], list(names),
                                      repeats))
        assert isinstance(reply, Timings)
        return reply

    def run_kernel(self, module: Any, buffers: Sequence[np.ndarray]) -> list[np.ndarray]:
        reply = self._ask(RunKernel(self.library(module), list(buffers)))
        assert isinstance(reply, Arrays)
        return list(reply.arrays)

    def _ask(self, request: Request) -> Reply:
        try:
            wire.write_all(self._w, wire.frame(request))
            data = wire.read_frame(self._r)
        except (BrokenPipeError, ConnectionResetError):
            data = None
        if data is None:
            raise DeviceHostError(f"the {self.device} device host died ({self._exit()})")
        reply: Reply = wire.decode(data, Reply)  # type: ignore[arg-type]
        if isinstance(reply, Failed):
            raise DeviceHostError(reply.message, reply.detail)
        return reply

    def _exit(self) -> str:
        if os.getpid() != self._owner:  # its exit status is its parent's to read
            return f"pid {self._proc.pid}"
        try:
            code = self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "it stopped answering"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
        return f"exit {code}"

    def release(self) -> None:
        """This process's ends of the host's pipes closed: the host leaves when every process
        that holds them did (the case process, once a target process it forked holds them;
        it reaps the host with its other children)."""
        for fd in (self._w, self._r):
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        """`release`, and this process's libraries removed; the process that started the
        host also waits for it to leave."""
        self.release()
        if os.getpid() == self._owner:
            try:
                self._proc.wait(timeout=_LEAVE_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._tmp is not None and self._tmp.name.endswith(f"-{os.getpid()}"):
            self._tmp.cleanup()


#: This process's hosts, by device type (`host_for`), until `close_hosts`.
_hosts: dict[str, DeviceHost] = {}


def adopt(host: DeviceHost) -> None:
    """`host` (started by the case process for this target) serves this process's
    programs for its device."""
    _hosts[host.device] = host


def host_for(device: str) -> DeviceHost:
    """This process's device host for `device`: the one adopted, else one started on first
    use."""
    host = _hosts.get(device)
    if host is None:
        host = _hosts[device] = DeviceHost(device)
    return host


def close_hosts() -> None:
    """End this process's device hosts (a target's measurement is done)."""
    while _hosts:
        _, host = _hosts.popitem()
        host.close()


atexit.register(close_hosts)


def time_calls(executable: Any, device: Any, args: Sequence[Any], names: Sequence[str],
               repeats: int) -> list[list[int]]:
    """The nanoseconds of each call of ``main`` to the kernel `names[i]`, in each of
    `repeats` runs after an untimed one (the device synchronized at both ends of every
    call; the names in execution order)."""
    # lazy: TVM, imported where a program runs (a host after its exec, or a target process)
    from tvm import relax
    from tvm.runtime.vm import VMInstrumentReturnKind

    vm = relax.VirtualMachine(executable, device)
    calls: list[tuple[str, int]] = []
    started = [0]

    def instrument(func: Any, symbol: str, before: bool, ret: Any, *call_args: Any) -> int:
        device.sync()
        now = time.perf_counter_ns()
        if before:
            started[0] = now
        else:
            calls.append((str(symbol), now - started[0]))
        return int(VMInstrumentReturnKind.NO_OP)

    vm["main"](*args)  # warm-up, untimed
    vm.set_instrument(instrument)
    per_kernel: list[list[int]] = [[] for _ in names]
    for _ in range(repeats):
        calls.clear()
        vm["main"](*args)
        pos = 0  # the kernel list is in execution order; builtins come between kernels
        for symbol, ns in calls:
            # the next kernel of that name: a call that matches none (a builtin, or a kernel
            # not in the list) leaves the matching of the kernels after it intact
            hit = next((i for i in range(pos, len(names)) if names[i] == symbol), None)
            if hit is not None:
                per_kernel[hit].append(ns)
                pos = hit + 1
    return per_kernel


# ---- the host's side -------------------------------------------------------------------


def _answer(request: Request, device: Any, libs: dict[str, Any]) -> Reply:
    # lazy: TVM, the host's own import, after its fork+exec
    import tvm
    from tvm import relax

    lib = libs.get(request.lib)
    if lib is None:
        lib = libs[request.lib] = tvm.runtime.load_module(request.lib)
    if isinstance(request, RunKernel):
        tensors = [tvm.runtime.tensor(b, device) for b in request.buffers]
        lib["main"](*tensors)
        return Arrays([_plain(t.numpy()) for t in tensors])
    args = [tvm.runtime.tensor(a, device) for a in request.args]
    if isinstance(request, ProfileMain):
        return Timings(str(device), time_calls(lib, device, args, request.names,
                                                request.repeats))
    vm = relax.VirtualMachine(lib, device)
    return Arrays([_plain(t.numpy()) for t in flatten_outputs(vm["main"](*args))])


def serve(device_type: str, req_fd: int, rep_fd: int) -> None:
    """Answer requests until the request pipe closes. TVM is imported at the first request:
    a host whose target was answered from the cache costs an interpreter, not TVM's import
    (2.6 s on a 2-core machine)."""
    os.dup2(2, 1)  # a library's prints land in the log, never in the replies
    device: Any = None
    libs: dict[str, Any] = {}
    while True:
        data = wire.read_frame(req_fd)
        if data is None:
            return
        try:
            request: Request = wire.decode(data, Request)  # type: ignore[arg-type]
            if device is None:
                import tvm  # lazy: only the host opens the device, and only when asked

                device = tvm.device(device_type, 0)
            reply = _answer(request, device, libs)
        except Exception as exc:
            reply = Failed(f"{type(exc).__name__}: {first_line(exc)}", traceback.format_exc())
        wire.write_all(rep_fd, wire.frame(reply))


if __name__ == "__main__":
    if _WALL_PROC in sys.argv[4:]:
        from cl_validate.session import sandbox  # lazy: only a walled host needs it

        why = sandbox.wall_proc(own=True)  # before the device is opened
        if why is not None:
            print(f"device host: /proc not walled: {why}", file=sys.stderr)
    serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
