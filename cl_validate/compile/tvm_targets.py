"""TVM targets, backends and devices for the targets case files name.

A target's declaration (`cl_validate.spec.targets.TargetDef`) was checked without TVM; here
TVM builds it. What TVM refuses (an attribute its kind does not have, a value of the wrong
type) is the declaration's mistake: a `CaseFileError` at its file and line.
"""

from __future__ import annotations

import difflib
import importlib
import re
from types import ModuleType
from typing import Any

import tvm
from tvm.support.rocm import find_rocm_path

from cl_validate.compile.devices import device_facts, has_device
from cl_validate.errors import CaseFileError
from cl_validate.spec.targets import TargetDef

DEFAULT_CUDA_ARCH = "sm_90"
#: The limits dlight schedules a cuda kernel by, every NVIDIA GPU since Kepler alike (48 KiB
#: is the shared memory a block may hold without opting in at launch): what a cuda target
#: without a GPU and without a TVM tag of its architecture gets.
_CUDA_LIMITS = {"max_num_threads": 1024, "max_threads_per_block": 1024,
                "thread_warp_size": 32, "max_shared_memory_per_block": 49152,
                "registers_per_block": 65536}
_UNKNOWN_OPTION = re.compile(r"Unknown config option '([^']+)'\. Known options: (.*)")


def make_target(tdef: TargetDef) -> tvm.target.Target:
    """The TVM target of a declaration. A cuda target without an ``arch`` gets the local
    GPU's, else a fixed default (so a machine without a GPU compiles for a known one); the
    limits it does not declare come from the GPU when its architecture is this machine's,
    else from TVM's tag of that architecture (`cuda_limits`). The device's answer is the
    probe's (`cl_validate.compile.devices`): asking here would spoil every fork after."""
    config = dict(tdef.config)
    if tdef.kind == "cuda":
        gpu = device_facts().get("cuda")
        here = dict(gpu.attrs) if gpu is not None and gpu.exist else {}
        config.setdefault("arch", _plain_arch(str(here.get("arch", DEFAULT_CUDA_ARCH))))
        for key, value in cuda_limits(str(config["arch"]), here).items():
            config.setdefault(key, value)
    try:
        if tdef.host is None:
            return tvm.target.Target(config)
        return tvm.target.Target(config, host=dict(tdef.host))
    except Exception as exc:  # TVM's ValueError/TVMError: one line says what it refused
        raise _refused(tdef, exc) from None


def _plain_arch(arch: str) -> str:
    """``sm_90a`` → ``sm_90``: the arch-specific suffix asks for instructions that only that
    exact chip has; code for the family runs on it too."""
    return arch[:-1] if arch.startswith("sm_") and arch.endswith("a") else arch


def cuda_limits(arch: str, device: dict[str, Any]) -> dict[str, int]:
    """The scheduling limits of a cuda target for `arch`: the local GPU's (`device`, its
    probed attributes, its L2 size too) when it is of that architecture, else those of TVM's
    first tag for that architecture, else the limits every NVIDIA GPU shares. (A chip's L2
    size is the chip's, not its architecture's: only a GPU at hand gives it.)"""
    if device and _plain_arch(str(device.get("arch", ""))) == _plain_arch(arch):
        return {k: int(v) for k, v in device.items()
                if k in _CUDA_LIMITS or k == "l2_cache_size_bytes"}
    for _, tag in sorted(tvm.target.list_tags().items()):
        attrs = tag.attrs
        if tag.kind.name == "cuda" and _plain_arch(str(attrs.get("arch", ""))) == \
                _plain_arch(arch):
            return {k: int(attrs[k]) if k in attrs else v for k, v in _CUDA_LIMITS.items()}
    return dict(_CUDA_LIMITS)


def _refused(tdef: TargetDef, exc: Exception) -> CaseFileError:
    text = " ".join(str(exc).split())
    first = text.split(" Target creation from config dict failed")[0][:300]
    hint = None
    m = _UNKNOWN_OPTION.match(first)
    if m:
        known = re.findall(r"'([^']+)'", m.group(2))
        close = difflib.get_close_matches(m.group(1), known, n=1)
        first = f"unknown attribute '{m.group(1)}' for kind '{tdef.kind}'"
        hint = f"did you mean '{close[0]}'?" if close else "TVM knows: " + ", ".join(known)
    return CaseFileError(f"TVM refuses target '{tdef.name}': {first}", file=tdef.file,
                         line=tdef.line, hint=hint)


def backend(target: tvm.target.Target) -> ModuleType:
    """The ``tvm.relax.backend.<x>.pipeline`` module that lowers for `target`, as TVM's
    default pipeline picks it (its own dispatcher names modules that do not exist for CPU
    kinds in 0.27, so it is not called)."""
    kind = target.kind.name
    if kind in ("llvm", "cuda", "rocm"):
        name = "cpu_generic" if kind == "llvm" else kind
    elif kind == "opencl" and "adreno" in target.keys:
        name = "adreno"
    else:  # opencl, vulkan
        name = "gpu_generic"
    return importlib.import_module(f"tvm.relax.backend.{name}.pipeline")


def build_unavailable(target: tvm.target.Target) -> str | None:
    """Why this machine cannot build code for `target`, or None. The IR (and so the static
    checks) does not need the build; running the program does."""
    kind = target.kind.name
    if tvm.get_global_func(f"target.build.{kind}", allow_missing=True) is None:
        return f"this TVM has no {kind} code generator (it was built without " \
               f"USE_{kind.upper()})"
    if kind == "rocm":
        try:
            find_rocm_path()
        except RuntimeError:
            return "no ROCm installation on this machine (ROCM_PATH, /opt/rocm): a rocm " \
                   "build links with its ld.lld and device libraries"
    return None


def device_for(device: str) -> Any:
    """The local device of a device type (`TargetDef.device`: ``cpu``, ``cuda``, ...)."""
    return tvm.device(device, 0)


def device_available(device: str) -> bool:
    """Whether this machine has a device of type `device` (the probe's answer)."""
    return has_device(device)
