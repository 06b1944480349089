"""Where a target's numerics run: on this machine, on a device TVM's RPC tracker hands out, or
nowhere (static checks only) — decided without TVM, so the parent of a run can answer
``--require-device`` and a case process keys its cache entry on the same answer.

The tracker comes from ``--rpc-tracker HOST:PORT``, else from TVM's own environment variables
``TVM_TRACKER_HOST`` and ``TVM_TRACKER_PORT`` (what TVM's device tests and its RPC runner
read). A target runs remotely under the key

1. given to it by name: ``--rpc-key TARGET=KEY``, else ``rpc_key`` in its declaration;
2. else, when this machine has no device for it (or it is compiled for another
   architecture), the run's default key: ``--rpc-key KEY``, else ``TVM_TRACKER_KEY`` (TVM's
   RPC runner), else ``RPC_DEVICE_KEY`` (TVM's device tests).

A target with a device here and no key of its own runs here, as llvm always did. Without a
tracker, a target that would run remotely or has no device here is static checks only.
"""

from __future__ import annotations

import _ctypes
import argparse
import ctypes
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from cl_validate.errors import UsageError
from cl_validate.spec.targets import TargetDef

TRACKER_HOST_ENV = "TVM_TRACKER_HOST"
TRACKER_PORT_ENV = "TVM_TRACKER_PORT"
#: The default key's variables, first set wins: TVM's RPC runner (meta-schedule's
#: RPCConfig), then TVM's own device tests.
KEY_ENVS = ("TVM_TRACKER_KEY", "RPC_DEVICE_KEY")
_KEY_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_TARGET_KEY_RE = re.compile(r"^([A-Za-z0-9_.-]+)=([A-Za-z0-9_.-]+)$")
_SKIP = ": static checks only"


@dataclass(frozen=True)
class RpcSettings:
    """The tracker and keys of a run (plain data: it travels to the case processes)."""

    tracker: tuple[str, int] | None = None
    key: str | None = None  # for targets with no device here and no key of their own
    keys: tuple[tuple[str, str], ...] = ()  # (target, key) from --rpc-key TARGET=KEY

    def key_for(self, tdef: TargetDef) -> str | None:
        """The key `tdef` was given by name (``--rpc-key T=K`` wins over its declaration)."""
        return dict(self.keys).get(tdef.name, tdef.rpc_key)

    def tracker_text(self) -> str:
        return f"{self.tracker[0]}:{self.tracker[1]}" if self.tracker else "no tracker"


@dataclass(frozen=True)
class Placement:
    """Where one target's numerics run: ``local``, ``rpc`` (under `key`) or ``none`` (then
    `missing` says what is missing)."""

    where: str
    key: str | None = None
    tracker: str = ""
    missing: str = ""

    @property
    def runs(self) -> bool:
        return self.where != "none"

    @property
    def reason(self) -> str:
        """Why the numerics are skipped, as the verdict says it."""
        return self.missing + _SKIP

    def describe(self) -> str:
        """Part of the cache key: a measurement from another device is another one."""
        return f"rpc:{self.key}" if self.where == "rpc" else self.where

    def remote(self) -> str:
        return f"RPC key '{self.key}' at {self.tracker}"


def placement(tdef: TargetDef, rpc: RpcSettings, have_device: Callable[[str], bool]
              ) -> Placement:
    """Where `tdef`'s numerics run in a run with `rpc` on a machine with `have_device`."""
    tracker = rpc.tracker_text()
    own = rpc.key_for(tdef)
    if own is not None:
        if rpc.tracker is None:
            return Placement("none", missing=f"{tdef.name} runs on RPC key '{own}' and no RPC "
                             "tracker is configured (--rpc-tracker HOST:PORT)")
        return Placement("rpc", own, tracker)
    here = not tdef.foreign() and have_device(tdef.device)
    if here:
        return Placement("local")
    if rpc.key is not None and rpc.tracker is not None:
        return Placement("rpc", rpc.key, tracker)
    what = f"{tdef.device} device" if tdef.builtin else f"{tdef.name} device ({tdef.kind}" + (
        f", {tdef.triple})" if tdef.foreign() else ")")
    missing = f"no {what} on this machine"
    if rpc.tracker is None and not tdef.builtin:
        missing += " and no RPC tracker (--rpc-tracker HOST:PORT --rpc-key KEY)"
    elif rpc.tracker is not None:
        missing += f" and no RPC key for it (--rpc-key {tdef.name}=KEY)"
    return Placement("none", missing=missing)


#: The libraries each GPU device type's runtime cannot work without (its driver's, loaded by
#: TVM's runtime through the system's loader). A type none of whose libraries loads has no
#: device here; a type missing from this table is always asked.
DRIVERS: dict[str, tuple[str, ...]] = {
    "cuda": ("libcuda.so.1",),
    "rocm": ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"),
    "opencl": ("libOpenCL.so.1", "libOpenCL.so"),
    "vulkan": ("libvulkan.so.1", "libvulkan.so"),
}


def driver_loads(device: str) -> bool:
    """Whether `device` (a device type) may have a device here: False only where, on Linux,
    none of its driver's libraries loads, which no probe can overrule; True for the CPU, a
    type without an entry, or another system. Answered without TVM and without a device
    runtime: a library that loads is unloaded again (nothing of it stays in this process,
    and its initialization, ``cuInit``, is never called)."""
    if device == "cpu" or device not in DRIVERS or not sys.platform.startswith("linux"):
        return True
    for name in DRIVERS[device]:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        _ctypes.dlclose(lib._handle)
        return True
    return False


def parse_tracker(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (argparse type)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"not HOST:PORT: {text!r}")
    return host, int(port)


def parse_rpc_key(text: str) -> str:
    """``KEY`` (the run's default key) or ``TARGET=KEY`` (argparse type)."""
    if not (_KEY_RE.match(text) or _TARGET_KEY_RE.match(text)):
        raise argparse.ArgumentTypeError(f"not KEY or TARGET=KEY (letters, digits, '_', '.', "
                                         f"'-'): {text!r}")
    return text


def rpc_settings(tracker: tuple[str, int] | None, keys: Sequence[str] | None,
                 env: Mapping[str, str] | None = None) -> RpcSettings:
    """The run's RPC settings: the command line's, else TVM's environment variables."""
    env = os.environ if env is None else env
    if tracker is None and env.get(TRACKER_HOST_ENV):
        port = env.get(TRACKER_PORT_ENV, "")
        try:
            tracker = parse_tracker(f"{env[TRACKER_HOST_ENV]}:{port}")
        except argparse.ArgumentTypeError:
            raise UsageError(f"{TRACKER_HOST_ENV} is set but {TRACKER_PORT_ENV}={port!r} is "
                             "not a port", hint=f"export {TRACKER_PORT_ENV}=9190, or unset "
                             f"{TRACKER_HOST_ENV}") from None
    default: str | None = None
    by_target: dict[str, str] = {}
    for text in keys or ():
        m = _TARGET_KEY_RE.match(text)
        if m:
            by_target[m.group(1)] = m.group(2)
        elif default is not None and default != text:
            raise UsageError(f"two default RPC keys: --rpc-key {default} and --rpc-key {text}",
                             hint="name the target for each: --rpc-key TARGET=KEY")
        else:
            default = text
    if default is None:
        default = next((env[k] for k in KEY_ENVS if env.get(k)), None)
        if default is not None and not _KEY_RE.match(default):
            raise UsageError(f"RPC key {default!r} from the environment is not a key",
                             hint="letters, digits, '_', '.', '-'")
    return RpcSettings(tracker, default, tuple(sorted(by_target.items())))
