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

from cl_validate.errors import CaseFileError
from cl_validate.spec.targets import DEVICES, TargetDef

DEFAULT_CUDA_ARCH = "sm_90"
_UNKNOWN_OPTION = re.compile(r"Unknown config option '([^']+)'\. Known options: (.*)")


def make_target(tdef: TargetDef) -> tvm.target.Target:
    """The TVM target of a declaration. cuda without an ``arch`` gets the local GPU's, else a
    fixed default (so a machine without a GPU compiles for a known one)."""
    config = dict(tdef.config)
    if tdef.kind == "cuda" and "arch" not in config:
        config["arch"] = DEFAULT_CUDA_ARCH
        dev = tvm.cuda(0)
        if dev.exist:
            config["arch"] = "sm_" + dev.compute_version.replace(".", "")
    try:
        if tdef.host is None:
            return tvm.target.Target(config)
        return tvm.target.Target(config, host=dict(tdef.host))
    except Exception as exc:  # TVM's ValueError/TVMError: one line says what it refused
        raise _refused(tdef, exc) from None


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
    return bool(device_for(device).exist)


def local_devices() -> dict[str, bool]:
    """Which device types this machine has (a case process tells the parent, which has no TVM)."""
    return {d: device_available(d) for d in dict.fromkeys(DEVICES.values())}
