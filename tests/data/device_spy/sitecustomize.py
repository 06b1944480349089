"""A spy on TVM's device runtime for tests/test_fork_safety.py, loaded by every Python process
a run starts (this folder first on PYTHONPATH; the interpreter imports ``sitecustomize`` at
start-up). It writes to the file named by CL_VALIDATE_TEST_DEVICE_SPY:

- ``start PID PPID ARGV...`` when an interpreter starts (forked processes do not start one);
- ``query PID PPID DEVICE_TYPE WHAT`` whenever TVM's runtime is asked about a device or
  allocates on one: ``Device._GetDeviceAttr`` (``exist``, ``compute_version``,
  ``Target.from_device``...), the FFI's ``GetDeviceAttr`` itself, and tensors made on a
  device other than the CPU; and whenever torch asks the CUDA driver (``is_available``
  without NVML) or opens a context (``torch.cuda._lazy_init``).

The test then knows which process asked: the parent, the zygote, a case process (forked by
the zygote), a target process, or the device probe.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from pathlib import Path

_LOG = os.environ.get("CL_VALIDATE_TEST_DEVICE_SPY")


def _write(line: str) -> None:
    if _LOG:
        with open(_LOG, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def _note(device_type: object, what: str) -> None:
    import traceback

    where = [f"{Path(f.filename).name}:{f.lineno}" for f in traceback.extract_stack()[:-2]
             if "cl_validate" in f.filename]
    chain = " < ".join(where[::-1][:4])
    _write(f"query {os.getpid()} {os.getppid()} {device_type} {what} from {chain}")


def _patch_device(module: object) -> None:
    device = module.Device  # type: ignore[attr-defined]
    original = device._GetDeviceAttr

    def spied(self, device_type, device_id, attr_id):  # type: ignore[no-untyped-def]
        _note(device_type, f"attr{attr_id}")
        return original(self, device_type, device_id, attr_id)

    device._GetDeviceAttr = spied


def _patch_ffi(module: object) -> None:
    original = module.GetDeviceAttr  # type: ignore[attr-defined]

    def spied(device_type, device_id, attr_id):  # type: ignore[no-untyped-def]
        _note(device_type, f"ffi-attr{attr_id}")
        return original(device_type, device_id, attr_id)

    module.GetDeviceAttr = spied  # type: ignore[attr-defined]


def _patch_tensor(module: object) -> None:
    for name in ("tensor", "empty"):
        original = getattr(module, name, None)
        if original is None:
            continue

        def spied(*args, _original=original, _name=name, **kwargs):  # type: ignore[no-untyped-def]
            dev = kwargs.get("device", args[2] if _name == "empty" and len(args) > 2 else
                             args[1] if _name == "tensor" and len(args) > 1 else None)
            kind = getattr(dev, "dlpack_device_type", lambda: 1)()
            if kind != 1:  # the CPU's is no runtime to spoil
                _note(kind, _name)
            return _original(*args, **kwargs)

        setattr(module, name, spied)


def _patch_torch_cuda(module: object) -> None:
    """torch: ``is_available`` asks the CUDA driver (and poisons every later fork) unless
    PYTORCH_NVML_BASED_CUDA_CHECK=1 lets it ask NVML; ``_lazy_init`` opens a context."""
    available, lazy_init = module.is_available, module._lazy_init  # type: ignore[attr-defined]

    def spied_available():  # type: ignore[no-untyped-def]
        if os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") != "1":
            _note(2, "torch.cuda.is_available (asking the driver)")
        else:  # torch acts on the answer: its export opens a context when it is yes
            _note(2, "torch.cuda.is_available (torch's export opens a GPU it is told of)")
        return available()

    def spied_init():  # type: ignore[no-untyped-def]
        _note(2, "torch.cuda._lazy_init")
        return lazy_init()

    module.is_available = spied_available  # type: ignore[attr-defined]
    module._lazy_init = spied_init  # type: ignore[attr-defined]


_PATCHES = {"tvm.runtime.device": _patch_device, "tvm.runtime._ffi_api": _patch_ffi,
            "tvm.runtime": _patch_tensor, "torch.cuda": _patch_torch_cuda}


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name not in _PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        loader, patch = spec.loader, _PATCHES[name]
        run = loader.exec_module

        def exec_module(module):  # type: ignore[no-untyped-def]
            run(module)
            patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if _LOG:
    with open("/proc/self/cmdline", "rb") as f:  # sys.argv is not complete this early
        _cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    _write(f"start {os.getpid()} {os.getppid()} {_cmd}")
    sys.meta_path.insert(0, _Finder())
