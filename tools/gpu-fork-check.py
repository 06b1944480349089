"""Which part of a run's process tree keeps a GPU program from running: a diagnosis for a
machine with an NVIDIA GPU, TVM and torch on the import path.

A run forks: the zygote forks a case process, which confines itself (`session.sandbox`) and
forks a target process, which compiles the program and runs it in a device host (a fresh
interpreter: `session.device_host`). A CUDA runtime does not survive ``fork()``, and a wall
may refuse a call the driver makes. Each line below forks from a
parent that imported torch and TVM the way the zygote does and never touched the driver,
does one thing more, and then opens the GPU in the (grand)child and copies a tensor there:

- ``plain``: nothing more (a fork alone must work);
- ``landlock``, ``seccomp``, ``confined``: the child puts up Landlock's walls, the seccomp
  filter, or both (`sandbox.confine`) first;
- ``confined, then fork``: the child confines itself and forks again, the grandchild opens
  the GPU (a case process and its target process, all of /proc walled: no GPU seen on an
  H200);
- ``GPU case, host walled``: the child confines itself as a case that opens a GPU does
  (``/proc`` writable) and forks, the grandchild walls ``/proc`` but its own folder
  (`sandbox.wall_proc`, as a device host does) and opens the GPU;
- ``after warm-up``: the parent first runs the zygote's warm-up (an export and an import).

Before each fork it says whether the parent's CUDA driver is initialized
(`devices.cuda_driver_initialized`, asked without initializing it).

    python tools/gpu-fork-check.py
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _open_gpu() -> str:
    import numpy as np
    import tvm

    dev = tvm.cuda(0)
    if not dev.exist:
        return "no GPU seen"
    t = tvm.runtime.tensor(np.arange(4, dtype="float32"), dev)
    return f"ok ({dev.device_name}, {t.numpy().sum():.0f})"


def _landlock_only() -> str | None:
    from cl_validate.session import sandbox as sb

    libc = sb._libc()
    attr = struct.pack("=QQQ", sb._FS_WRITE_FILE, 0, sb._SCOPE_SIGNAL)
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = libc.syscall(sb._CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if fd < 0:
        return "landlock_create_ruleset failed"
    why = sb._allow_writes_but_proc(libc, fd)
    libc.prctl(sb._PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if why is None and libc.syscall(sb._RESTRICT_SELF, fd, ctypes.c_uint32(0)) != 0:
        why = "landlock_restrict_self failed"
    os.close(fd)
    return why


def _seccomp_only() -> str | None:
    from cl_validate.session import sandbox as sb

    libc = sb._libc()
    libc.prctl(sb._PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    return sb._deny_foreign_limits(libc, None)


def _confined() -> str | None:
    from cl_validate.session import sandbox

    return sandbox.confine()


def _gpu_case() -> str | None:
    from cl_validate.session import sandbox

    return sandbox.confine(proc_writes=True)


def _walled_host() -> str:
    from cl_validate.session import sandbox

    why = sandbox.wall_proc(own=True)
    return _open_gpu() + (f" (host wall not up: {why})" if why else "")


def _in_child(before: Callable[[], str | None] | None, grandchild: bool = False,
              opens: Callable[[], str] = _open_gpu) -> str:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            why = before() if before else None
            if grandchild:
                gpid = os.fork()
                if gpid == 0:
                    try:
                        out = opens()
                    except BaseException as exc:
                        out = f"FAILED {type(exc).__name__}: {str(exc).splitlines()[0]}"
                    os.write(w, out.encode())
                    os._exit(0)
                os.waitpid(gpid, 0)
                os._exit(0)
            out = _open_gpu()
            if why:
                out += f" (wall not up: {why})"
        except BaseException as exc:
            out = f"FAILED {type(exc).__name__}: {str(exc).splitlines()[0]}"
            traceback.print_exc()
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 4096):
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode(errors="replace")
    return text or f"no answer (wait status {status})"


def main() -> None:
    os.environ.update({"PYTORCH_NVML_BASED_CUDA_CHECK": "1",
                       "TVM_FFI_DISABLE_TORCH_C_DLPACK": "1"})
    from cl_validate.compile.devices import cuda_driver_initialized, keep_torch_off_gpus
    from cl_validate.session import sandbox

    keep_torch_off_gpus()
    import torch  # noqa: F401
    import tvm  # noqa: F401

    print(f"Landlock ABI {sandbox.abi()}; confinement available: {sandbox.available()}")
    checks: list[tuple[str, Callable[[], str | None] | None, bool]] = [
        ("plain", None, False), ("landlock", _landlock_only, False),
        ("seccomp", _seccomp_only, False), ("confined", _confined, False),
        ("confined, then fork", _confined, True)]
    for name, before, grand in checks:
        print(f"{name:22} driver initialized in parent: {cuda_driver_initialized()}; "
              f"child: {_in_child(before, grand)}", flush=True)
    print(f"{'GPU case, host walled':22} driver initialized in parent: "
          f"{cuda_driver_initialized()}; child: {_in_child(_gpu_case, True, _walled_host)}",
          flush=True)
    from cl_validate.session import zygote

    zygote._warm_up()
    print(f"{'after warm-up':22} driver initialized in parent: {cuda_driver_initialized()}; "
          f"child: {_in_child(_confined, True)}", flush=True)
    print(f"{'this process':22} {_open_gpu()}; driver initialized: "
          f"{cuda_driver_initialized()}")


if __name__ == "__main__":
    main()
