"""TVM targets and devices by the names case files use (``llvm``, ``cuda``)."""

from __future__ import annotations

from typing import Any

import tvm

from cl_validate.errors import UsageError

DEFAULT_CUDA_ARCH = "sm_90"


def make_target(name: str) -> tvm.target.Target:
    """TVM 0.27 targets are dicts; cuda gets the local GPU's arch, else a fixed default."""
    if name == "llvm":
        return tvm.target.Target({"kind": "llvm"})
    if name == "cuda":
        arch = DEFAULT_CUDA_ARCH
        dev = tvm.cuda(0)
        if dev.exist:
            arch = "sm_" + dev.compute_version.replace(".", "")
        return tvm.target.Target({"kind": "cuda", "arch": arch}, host={"kind": "llvm"})
    raise UsageError(f"unknown target '{name}'", hint="use llvm or cuda")


def device_for(name: str) -> Any:
    return tvm.cpu(0) if name == "llvm" else tvm.cuda(0)


def device_available(name: str) -> bool:
    return bool(device_for(name).exist)
