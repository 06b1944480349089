"""Content-addressed cache of measurements, so an unchanged suite re-validates almost free.

A `Measurement` (kernel list, per-stage counts, op layouts, the TVM and PyTorch outputs) is
stored under a key that hashes everything that can change it: the case's model, inputs,
layouts, pipeline and seed; the source of the model's package (and of the local modules it
imports), of a user pipeline and of cl_validate itself; the weights and buffers; the target
and whether numerics ran there; the TVM, tvm-ffi, torch, numpy and Python versions.
Budgets, tolerances and how many [[outputs]] a case declares are *not* in the key: verdicts
are re-judged from the measurement and the case file as it is now, so editing them never
needs a recompile and can never be answered from a stale verdict.

The key needs the weights, so it is computed where the model is built: in the worker
(`cl_validate.session.case_session`), which also reads the entries; the parent writes them.
Entries are written atomically (temporary file + rename), so several runs or CI jobs may
share one cache directory; a corrupt or unreadable entry is treated as a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
from pathlib import Path

from cl_validate.atomic import write_atomic
from cl_validate.measurements.measurement import Measurement
from cl_validate.measurements.sources import module_source, own_source, versions
from cl_validate.spec import CaseSpec

FORMAT = 1
def key(case: CaseSpec, target: str, weights: str, numerics: bool, target_desc: str,
        static_only: bool = False) -> str:
    """The cache key of one case × target measurement."""
    inputs = [[i.name, list(i.shape), i.dtype, i.layout, i.range] for i in case.inputs]
    parts = {
        "format": FORMAT,
        "model": case.model,
        "inputs": inputs,
        # Layouts change the exported program; an [[outputs]] table that only sets a
        # tolerance does not (how many are declared is judged against the measurement).
        "outputs": _output_layouts(case),
        "layout": {k: list(v) for k, v in sorted(case.layout.items())},
        "layout_overrides": {k: list(v) for k, v in sorted(case.layout_overrides.items())},
        "pipeline": case.pipeline,
        "pipeline_source": module_source(case.pipeline.partition(":")[0])
        if ":" in case.pipeline else "",
        "seed": case.seed,
        "seeds": case.seeds,  # more input draws: more samples
        # a float64 reference run is measured only where a tolerance asks for it
        "float64": case.needs_float64(target) and numerics,
        # a symbolic dimension's range changes the exported program, its sizes the numerics
        "dynamic": {n: [d.min, d.max, list(d.values)] for n, d in sorted(case.dynamic.items())},
        "model_source": module_source(case.model.partition(":")[0]),
        "weights": weights,
        "cl_validate": own_source(),
        "versions": versions(),
        "target": target,
        "target_desc": target_desc,
        "numerics_run": numerics,
        "static_only": static_only,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _output_layouts(case: CaseSpec) -> list[str | None]:
    layouts = [o.layout for o in case.outputs]
    while layouts and layouts[-1] is None:
        layouts.pop()
    return layouts


class Cache:
    """Measurements on disk under `root/<2 hex>/<key>.pkl`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _path(self, k: str) -> Path:
        return self.root / k[:2] / f"{k}.pkl"

    def get(self, k: str) -> Measurement | None:
        path = self._path(k)
        try:
            with open(path, "rb") as f:
                m = pickle.load(f)
        except FileNotFoundError:
            return None
        except Exception:  # corrupt, truncated or from another version: a miss
            return None
        if not isinstance(m, Measurement):
            return None
        with contextlib.suppress(OSError):  # a read-only cache still answers
            os.utime(path)  # "used by this run": what CI's pruning keeps
        return m

    def put(self, k: str, m: Measurement) -> None:
        write_atomic(self._path(k), pickle.dumps(m, protocol=pickle.HIGHEST_PROTOCOL))


def cacheable(m: Measurement) -> bool:
    """Errors are not cached: a crash or an environment problem must be retried (and a model
    that leaked processes must keep being told so)."""
    return m.error is None and m.numerics_error is None and not m.stray_processes
