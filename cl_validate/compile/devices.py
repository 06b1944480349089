"""Which devices this machine has, asked in a process of its own.

A GPU runtime does not survive ``fork()``: once a process has asked CUDA anything (TVM's
``Device.exist`` included), every process forked from it fails its first CUDA call with
``cudaErrorInitializationError``. The zygote forks every case process and each case process
forks its target processes, so none of them may touch a device runtime. The question "which
devices are here, and what are their limits" is asked once, by a short-lived probe
(``python -m cl_validate.compile.devices``, a fresh interpreter started with fork+exec), and
its answer is plain data the run keeps: the zygote asks it before its first fork and every
process forked after inherits it. Programs run on a GPU in a device host
(`cl_validate.session.device_host`), a fresh interpreter too; `cuda_driver_initialized` tells,
without initializing it, whether a process initialized the driver.

Every device type TVM has a target kind for is probed, not cuda alone; a GPU's answer
carries the limits TVM's ``Target.from_device`` reads from it (shared memory per block,
threads, warp size, architecture), so a cuda target schedules for the GPU at hand.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cl_validate import procs
from cl_validate.spec.placement import driver_loads
from cl_validate.spec.targets import DEVICES

#: How long the probe may take: creating a CUDA context on a large GPU can take seconds.
PROBE_TIMEOUT_S = 120.0
#: Where `keep_torch_off_gpus` keeps torch's own ``is_available`` and device-guard check.
_REAL_AVAILABLE = "_cl_validate_real_is_available"
_REAL_GUARD = "_cl_validate_real_ensureCUDADeviceGuardSet"


def keep_torch_off_gpus() -> None:
    """Make torch in this process (and all it forks) answer that it has no GPU.

    Not asking is not enough: torch's export opens a CUDA context whenever
    ``torch.cuda.is_available()`` says yes (``preserve_rng_state`` saves the CUDA RNG state;
    seen with torch 2.11 on an H200), and from then on every process forked from this one
    fails "Cannot re-initialize CUDA in forked subprocess". Models are exported and run by
    PyTorch on the CPU here, so torch needs no GPU in any process of a case; programs run on
    a GPU in a device host, which does not import torch. The GPU itself stays visible to the
    CUDA libraries (CUDA_VISIBLE_DEVICES is read when the driver loads: a device host,
    started from here, would not see it either)."""
    import torch  # lazy: called where torch is about to load anyway

    cuda = torch.cuda
    if not hasattr(cuda, _REAL_AVAILABLE):
        setattr(cuda, _REAL_AVAILABLE, cuda.is_available)
        cuda.is_available = _no_gpu
    # Told there is no GPU, torch's export (FakeTensorMode.__enter__) makes sure a CUDA device
    # guard is set, and on a CUDA build that asks c10's device count: cudaGetDeviceCount,
    # which initializes the driver (seen with torch 2.11+cu130 under a stand-in driver that
    # names its callers). Where a GPU is present the call sets nothing: skipped here.
    guard = getattr(torch._C, "_ensureCUDADeviceGuardSet", None)
    if guard is not None and not hasattr(torch._C, _REAL_GUARD):
        setattr(torch._C, _REAL_GUARD, guard)
        torch._C._ensureCUDADeviceGuardSet = _no_guard


def _no_gpu() -> bool:
    return False


def _no_guard() -> None:
    return None


#: The CUDA driver's answer to a call made before ``cuInit`` (CUDA_ERROR_NOT_INITIALIZED).
_CUDA_NOT_INITIALIZED = 3


def cuda_driver_initialized() -> bool:
    """Whether the CUDA driver was initialized (``cuInit``) in this process, asked without
    initializing it: only where the driver's library is already loaded, with a call that
    answers CUDA_ERROR_NOT_INITIALIZED before ``cuInit``. A process forked from one where
    this is true cannot use the GPU (``cudaErrorInitializationError``)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:  # never loaded here: never initialized here
        return False
    count = ctypes.c_int(0)
    return int(lib.cuDeviceGetCount(ctypes.byref(count))) != _CUDA_NOT_INITIALIZED


@dataclass(frozen=True)
class DeviceFacts:
    """What the probe learnt of one device type (plain data)."""

    exist: bool
    #: the device's name as its driver says it (``NVIDIA H200``), where it has one
    name: str = ""
    #: TVM target attributes read from the device (``arch``, ``max_shared_memory_per_block``,
    #: ``max_threads_per_block``, ``thread_warp_size``...), for GPU kinds
    attrs: dict[str, Any] = field(default_factory=dict)


#: The answer of this process's probe, once asked (inherited by every process forked after).
_known: dict[str, DeviceFacts] | None = None


class Probe:
    """A probe running in its own process: made early, its answer taken later (`answer`),
    so the wait overlaps other work (the zygote's warm-up)."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", __name__], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=procs.python_env())

    def answer(self) -> dict[str, DeviceFacts]:
        """The probe's answer; a probe that fails or hangs leaves only the CPU (and says why
        on stderr): a run without its GPU is reported as such, never a crashed run."""
        global _known
        try:
            out, err = self._proc.communicate(timeout=PROBE_TIMEOUT_S)
            facts = decode(out.decode()) if self._proc.returncode == 0 else None
            why = err.decode(errors="replace").strip().splitlines()[-1:] or ["no answer"]
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()
            facts, why = None, [f"no answer in {PROBE_TIMEOUT_S:.0f} s"]
        except (ValueError, KeyError, TypeError) as exc:  # JSON, but not the probe's
            facts, why = None, [f"unreadable answer ({exc!r})"]
        if facts is None:
            print(f"cl-validate: the device probe failed ({why[0]}); only the CPU is used",
                  file=sys.stderr)
            facts = {d: DeviceFacts(d == "cpu") for d in device_types()}
        _known = facts
        return facts


def device_types() -> list[str]:
    """Every device type a target kind runs on (``cpu``, ``cuda``, ``rocm``...)."""
    return list(dict.fromkeys(DEVICES.values()))


def device_facts() -> dict[str, DeviceFacts]:
    """This machine's devices: the answer this process (or the one it was forked from) already
    has, else a probe's, asked now."""
    return _known if _known is not None else Probe().answer()


def kinds_present(facts: Mapping[str, DeviceFacts]) -> dict[str, bool]:
    """Device type → whether this machine has one (what the parent of a run is told)."""
    return {kind: f.exist for kind, f in facts.items()}


def has_device(device: str) -> bool:
    if device == "cpu":  # the machine this runs on: nothing to probe
        return True
    facts = device_facts().get(device)
    return facts is not None and facts.exist


def decode(text: str) -> dict[str, DeviceFacts]:
    raw = json.loads(text)
    if not isinstance(raw, dict):
        raise ValueError("not an object")
    return {str(k): DeviceFacts(bool(v["exist"]), str(v.get("name", "")),
                                dict(v.get("attrs", {}))) for k, v in raw.items()}


def encode(facts: Mapping[str, DeviceFacts]) -> str:
    return json.dumps({k: {"exist": f.exist, "name": f.name, "attrs": f.attrs}
                       for k, f in facts.items()})


def _no_gpu_runtime() -> bool:
    """Whether no GPU device type can have a device here, found without TVM: on Linux, no
    driver library of any type loads. Importing TVM costs seconds of CPU, on every run, on the
    machines (CPU runners) that have nothing to find."""
    gpus = [kind for kind in device_types() if kind != "cpu"]
    return not any(map(driver_loads, gpus))  # off Linux every type "may" load: asked


def _probe_here() -> dict[str, DeviceFacts]:
    """Ask TVM about every device type (in the probe's own process only)."""
    if _no_gpu_runtime():
        return {kind: DeviceFacts(kind == "cpu") for kind in device_types()}
    import tvm  # lazy: the probe process alone touches a device runtime

    out: dict[str, DeviceFacts] = {}
    for kind in device_types():
        try:
            dev = tvm.device(kind, 0)
            exist = bool(dev.exist)
        except Exception:  # a runtime TVM was built without: no such device here
            exist = False
        if not exist or kind == "cpu":
            out[kind] = DeviceFacts(exist)
            continue
        attrs: dict[str, Any] = {}
        try:
            target = tvm.target.Target.from_device(dev)
            attrs = {str(k): (v if isinstance(v, int) else str(v))
                     for k, v in target.attrs.items() if isinstance(v, int | str)}
        except Exception:  # no detector for this kind: the device runs, with default limits
            pass
        name = ""
        try:
            name = str(dev.device_name or "")
        except Exception:
            pass
        out[kind] = DeviceFacts(True, name, attrs)
    return out


if __name__ == "__main__":
    sys.stdout.write(encode(_probe_here()))
