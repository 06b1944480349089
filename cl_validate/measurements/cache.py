"""Content-addressed cache of measurements, so an unchanged suite re-validates almost free.

A `Measurement` (kernel list, per-stage counts, op layouts, the TVM and PyTorch outputs) is
stored under a key that hashes everything that can change it: the case's model, inputs,
layouts, pipeline and seed; the source of the model's package (and of the local modules it
imports), of a user pipeline and of cl_validate itself; the weights and buffers; the target
and whether numerics ran there; the TVM, tvm-ffi, torch, numpy and Python versions.
The case's part of the key is the whole parsed case file but what is judged (`JUDGED`):
budgets, tolerances and how many [[outputs]] a case declares are *not* in the key: verdicts
are re-judged from the measurement and the case file as it is now, so editing them never
needs a recompile and can never be answered from a stale verdict. A new case-file key is in
the key unless declared judged: it cannot be forgotten.

That key needs the weights, so it is computed where the model is built, in a case process.
An unchanged case must not need one: its *direct key* (as ccache's direct mode) hashes what
the parent knows without running any of the model's code — the case file's parts of the key,
the target's declaration, this machine's devices, cl_validate's source and the versions —
and leads to a manifest of the files the case read when it was measured
(`cl_validate.session.file_record`), with their stamps and the full key they gave. When
every stamped file is as it was, the parent reads the measurement without starting a case process.

Entries are typed data (`cl_validate.measurements.wire`), never pickles: a cache restored in
CI may come from another branch, and reading it must not run anything. They are written
atomically (temporary file + rename), so several runs or CI jobs may share one cache
directory; a corrupt or unreadable entry is treated as a miss.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from cl_validate.atomic import write_atomic
from cl_validate.measurements import wire
from cl_validate.measurements.measurement import Measurement
from cl_validate.measurements.messages import FileStamp
from cl_validate.measurements.sources import matches, module_source, own_source, versions
from cl_validate.paths import read_regular
from cl_validate.spec import CaseSpec
from cl_validate.spec.options import RunOptions

FORMAT = 2
#: Manifests kept per direct key: the file versions a case was measured at, newest first.
_MANIFEST_ENTRIES = 8
def key(case: CaseSpec, target: str, weights: str, numerics: bool, target_desc: str,
        static_only: bool = False) -> str:
    """The cache key of one case × target measurement."""
    parts = {
        **_case_parts(case),
        "pipeline_source": module_source(case.pipeline.partition(":")[0])
        if ":" in case.pipeline else "",
        # a float64 reference run is measured only where a tolerance asks for it
        "float64": case.needs_float64(target) and numerics,
        "model_source": module_source(case.model.partition(":")[0]),
        "weights_digest": weights,  # the values; the case's `weights` kind is in its parts
        "cl_validate": own_source(),
        "versions": versions(),
        "target": target,
        "target_desc": target_desc,
        "numerics_run": numerics,
        "static_only": static_only,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


#: The case-file fields that do not change a measurement: verdicts are judged from the
#: measurement and the case file as it is now (budgets, tolerances, the numerics rule for
#: insensitive inputs), or they say where and how long to run (targets, limits), or where
#: things stand in the file. Every other field is in the key (`_case_parts`): a new case-file
#: key is in it unless it is declared here.
JUDGED = frozenset({"name", "path", "description", "targets", "budget", "tolerance",
                    "overrides", "lines", "timeout", "max_memory_mb", "variants",
                    "target_defs", "input_sensitivity", "output_names"})
#: The same for the fields of what a case holds ([[inputs]], the variant it runs...).
_JUDGED_NESTED = frozenset({"line", "budget", "tolerance", "overrides"})


def _case_parts(case: CaseSpec) -> dict[str, object]:
    """What the case file says that changes a measurement: the whole parsed case but
    `JUDGED`. Of [[outputs]], the layouts only: one that sets a tolerance (or a selection)
    is judged against the measurement."""
    parts: dict[str, object] = {"format": FORMAT}
    for f in dataclasses.fields(case):
        if f.name not in JUDGED:
            value = getattr(case, f.name)
            parts[f.name] = _output_layouts(case) if f.name == "outputs" else _plain(value)
    return parts


def _plain(value: object) -> object:
    """`value` as JSON data, dataclasses by their fields but `_JUDGED_NESTED`."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.name not in _JUDGED_NESTED}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def direct_key(case: CaseSpec, target: str, options: RunOptions) -> str:
    """The key of a case × target the parent computes without running the model's code:
    everything of the full key but what the case process learns (the weights, the sources
    the model imports, the TVM target and where it runs), which the manifest's file stamps
    and this machine's devices stand for."""
    tdef = case.target_def(target)
    parts = {
        **_case_parts(case),
        "float64": case.needs_float64(target),
        "target": target,
        "target_decl": [dict(tdef.config), dict(tdef.host or {}), tdef.rpc_key, tdef.cc],
        "rpc": [options.rpc.tracker, options.rpc.key_for(tdef)] if options.rpc.tracker
        else None,
        "static_only": options.static_only,
        "machine": machine(),
        "cl_validate": own_source(),
        "versions": versions(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def machine() -> str:
    """What of this machine decides where numerics run and what a target compiles to, read
    without TVM: the architecture, and the GPUs (models and driver) the NVIDIA and AMD
    drivers list."""
    found = [platform.machine()]
    for pattern in ("/proc/driver/nvidia/version", "/proc/driver/nvidia/gpus/*/information",
                    "/sys/class/kfd/kfd/topology/nodes/*/name"):
        for path in sorted(glob.glob(pattern)):
            with contextlib.suppress(OSError):
                found.append(Path(path).read_text(encoding="utf-8", errors="replace"))
    return hashlib.sha256("\0".join(found).encode()).hexdigest()


@dataclass(frozen=True)
class ManifestEntry:
    """The files a case read when it was measured, and the full key that measurement has."""

    stamps: tuple[FileStamp, ...]
    key: str


def _output_layouts(case: CaseSpec) -> list[str | None]:
    layouts = [o.layout for o in case.outputs]
    while layouts and layouts[-1] is None:
        layouts.pop()
    return layouts


#: The largest cache file read (a measurement is kilobytes): anything else found there — a
#: FIFO, a device, a link to one, gigabytes — is a miss, never a hang or a blow-up.
_MAX_ENTRY = 64 << 20


class Cache:
    """Measurements under `root/<2 hex>/<key>.m`; manifests under `root/direct/<2 hex>/<key>`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _path(self, k: str) -> Path:
        return self.root / k[:2] / f"{k}.m"

    def _manifest(self, direct: str) -> Path:
        return self.root / "direct" / direct[:2] / direct

    def get(self, k: str) -> Measurement | None:
        path = self._path(k)
        try:
            m = wire.decode(read_regular(path, _MAX_ENTRY), Measurement)
        except (OSError, wire.WireError):  # missing, unreadable, corrupt, another format
            return None
        with contextlib.suppress(OSError):  # a read-only cache still answers
            os.utime(path)  # "used by this run": what CI's pruning keeps
        return m

    def put(self, k: str, m: Measurement) -> None:
        write_atomic(self._path(k), wire.encode(m))

    def _entries(self, direct: str) -> list[ManifestEntry]:
        try:
            return wire.decode(read_regular(self._manifest(direct), _MAX_ENTRY),
                               list[ManifestEntry])
        except (OSError, wire.WireError):
            return []

    def remember(self, direct: str, stamps: tuple[FileStamp, ...], k: str) -> None:
        """Note that a case × target of direct key `direct` that read `stamps` measured as
        `k` (the newest first; a few versions kept, for a branch switched back and forth)."""
        entry = ManifestEntry(stamps, k)
        entries = [entry, *(e for e in self._entries(direct) if e != entry)]
        write_atomic(self._manifest(direct), wire.encode(entries[:_MANIFEST_ENTRIES]))

    def recall(self, direct: str, root: Path) -> str | None:
        """The full key of the measurement whose files are all as they are now, if any (the
        stamps' relative paths are under `root`, the case's repository)."""
        for entry in self._entries(direct):
            if all(matches(s, root) for s in entry.stamps) and self._path(entry.key).is_file():
                with contextlib.suppress(OSError):
                    os.utime(self._manifest(direct))
                return entry.key
        return None


def cacheable(m: Measurement) -> bool:
    """Errors are not cached: a crash or an environment problem must be retried (and a model
    that leaked processes must keep being told so)."""
    return m.error is None and m.numerics_error is None and not m.stray_processes
