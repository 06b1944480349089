"""Numerics on a remote device, through TVM's RPC tracker (runs in a target's process: it
imports TVM).

The compiled program is exported as a shared library — linked by a cross compiler when its
CPU code is for another architecture (``cc`` in the target's declaration, else
``<mtriple>-gcc``, Debian's name for one, or the NDK's ``$TVM_NDK_CC`` for Android) —, a
session is requested from the tracker under the target's key, the library is uploaded and
loaded there, and the VM runs on the session's device with the case's inputs; the outputs
come back for the comparison with PyTorch, as for a local device.

Everything that can go wrong on the way (no tracker, no server under the key, a missing
cross compiler, a server that dies mid-run) is an `RpcError`: one line for that case's
``numerics`` verdict, never the run.
"""

from __future__ import annotations

import socket
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tvm import rpc
from tvm.support import cc as tvm_cc
from tvm.support import ndk

from cl_validate.checks.numerics import NumericsKind
from cl_validate.session.execute import run_tvm
from cl_validate.spec import CaseSpec
from cl_validate.spec.placement import Placement, RpcSettings
from cl_validate.spec.targets import TargetDef

#: How long to wait for the tracker to answer a connection (TVM's own client retries for a
#: minute when it is refused: a tracker that is down says so sooner here).
CONNECT_TIMEOUT_S = 10.0


class RpcError(Exception):
    """Running on the remote device failed; `kind` names how (JUnit ``error@type``)."""

    def __init__(self, message: str, kind: NumericsKind = NumericsKind.RPC_ERROR,
                 detail: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.detail = detail


def run_remote(executable: Any, case: CaseSpec, inputs: Sequence[Sequence[np.ndarray]],
               tdef: TargetDef, place: Placement, settings: RpcSettings, params: Sequence[Any],
               session_timeout: float) -> list[list[np.ndarray]]:
    """Export, upload and run the compiled program on a device the tracker hands out: the
    outputs for each set of `inputs` (every sample of a dynamic case), in one session."""
    assert settings.tracker is not None and place.key is not None
    host, port = settings.tracker
    where = place.remote()
    tracker = _connect(host, port)  # first: a farm that is not there costs no link
    try:
        if not _servers(tracker, place.key):
            raise RpcError(f"no RPC server is registered under key '{place.key}' at "
                           f"tracker {host}:{port}", NumericsKind.RPC_UNAVAILABLE,
                           _registered(tracker))
        with tempfile.TemporaryDirectory(prefix="cl_validate-rpc-") as tmp:
            lib = export(executable, tdef, Path(tmp) / f"{case.name}.{tdef.name}.so")
            try:
                sess = tracker.request(place.key, priority=1,
                                       session_timeout=max(1, int(session_timeout)))
                sess.upload(str(lib))
                module = sess.load_module(lib.name)
                device = sess.device(tdef.device, 0)
                return [run_tvm(module, case, arrays, device, params) for arrays in inputs]
            except Exception as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
                raise RpcError(f"running on {where} failed: {type(exc).__name__}: {first}",
                               detail=str(exc)) from exc
    finally:
        tracker.close()


def export(executable: Any, tdef: TargetDef, path: Path) -> Path:
    """The program as a shared library the device can load, cross-linked where needed."""
    fcompile: Any = None
    compiler = tdef.cc
    triple = tdef.triple or ""
    if tdef.foreign():
        if compiler is None and "android" in triple:
            fcompile, compiler = ndk.create_shared, "$TVM_NDK_CC (the NDK's compiler)"
        compiler = compiler or f"{triple}-gcc"
    if fcompile is None and compiler is not None:
        fcompile = tvm_cc.cross_compiler(compiler)
    try:
        executable.export_library(str(path), fcompile=fcompile)
    except FileNotFoundError:
        raise RpcError(f"cannot link the module for {tdef.name}: no compiler '{compiler}' on "
                       f"this machine (install it, or set cc in [targets.{tdef.name}])",
                       NumericsKind.EXPORT_ERROR) from None
    except Exception as exc:
        lines = [ln for ln in str(exc).splitlines() if ln.strip()]
        first = next((ln for ln in lines if "error" in ln.lower()), lines[0] if lines else "")
        raise RpcError(f"cannot link the module for {tdef.name} with "
                       f"{compiler or 'the system compiler'}: {first.strip()[:300]}",
                       NumericsKind.EXPORT_ERROR, str(exc)) from exc
    return path


def _connect(host: str, port: int) -> Any:
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise RpcError(f"cannot reach the RPC tracker at {host}:{port}: "
                       f"{exc.strerror or exc}", NumericsKind.RPC_UNAVAILABLE) from None
    try:
        return rpc.connect_tracker(host, port)
    except Exception as exc:
        raise RpcError(f"{host}:{port} does not answer as a TVM RPC tracker: {exc}",
                       NumericsKind.RPC_UNAVAILABLE) from None


def _servers(tracker: Any, key: str) -> list[Any]:
    """The servers registered under `key` (busy ones too: a request waits for them)."""
    info = tracker.summary().get("server_info", [])
    return [s for s in info if s.get("key") == f"server:{key}"]


def _registered(tracker: Any) -> str:
    keys = sorted({str(s.get("key", "")).removeprefix("server:")
                   for s in tracker.summary().get("server_info", [])})
    return "keys registered there: " + (", ".join(keys) if keys else "none")
