"""Content-addressed cache of measurements, so an unchanged suite re-validates almost free.

A `Measurement` (kernel list, per-stage counts, op layouts, the TVM and PyTorch outputs) is
stored under a key that hashes everything that can change it: the case's model, inputs,
layouts, pipeline and seed; the source of the model's package (and of the local modules it
imports), of a user pipeline and of cl_validate itself; the weights and buffers; the target
and whether numerics ran there; the TVM, tvm-ffi, torch, numpy and Python versions.
Budgets, tolerances and how many [[outputs]] a case declares are *not* in the key: verdicts
are re-judged from the measurement and the case file as it is now, so editing them never
needs a recompile and can never be answered from a stale verdict.

Entries are written atomically (temporary file + rename), so several workers or CI jobs may
share one cache directory; a corrupt or unreadable entry is treated as a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path

from cl_validate.atomic import write_atomic
from cl_validate.checks.measurement import Measurement
from cl_validate.run.sources import module_source, own_source, versions
from cl_validate.spec import CaseSpec

FORMAT = 1
DEFAULT_DIR = ".cl_validate_cache"
#: Set to 1 to run cold by default (the test suite does); an explicit --cache-dir still wins.
NO_CACHE_ENV = "CL_VALIDATE_NO_CACHE"


def resolve_dir(cache_dir: str | None, no_cache: bool) -> str | None:
    """The cache directory a run uses, or None for no cache."""
    if no_cache:
        return None
    if cache_dir:
        return cache_dir
    return None if os.environ.get(NO_CACHE_ENV, "") not in ("", "0") else DEFAULT_DIR


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
        "model_source": module_source(case.model.partition(":")[0]),
        "weights": weights,
        "cl_validate": own_source(),
        "versions": versions(),
        "target": target,
        "target_desc": target_desc,
        "numerics": numerics,
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
        self.hits = 0
        self.misses = 0

    def _path(self, k: str) -> Path:
        return self.root / k[:2] / f"{k}.pkl"

    def get(self, k: str) -> Measurement | None:
        path = self._path(k)
        try:
            with open(path, "rb") as f:
                m = pickle.load(f)
        except FileNotFoundError:
            self.misses += 1
            return None
        except Exception:  # corrupt, truncated or from another version: a miss
            self.misses += 1
            return None
        self.hits += 1
        return m  # type: ignore[no-any-return]

    def unhit(self, n: int) -> None:
        """Count `n` hits as misses after all: their case is measured again anyway."""
        self.hits -= n
        self.misses += n

    def put(self, k: str, m: Measurement) -> None:
        write_atomic(self._path(k), pickle.dumps(m, protocol=pickle.HIGHEST_PROTOCOL))

    # Predictions (see `hint`): which key a case file's bytes led to last time.
    def _hint_path(self, h: str) -> Path:
        return self.root / "hints" / h[:2] / h

    def remember(self, h: str, k: str) -> None:
        path = self._hint_path(h)
        try:
            if path.read_text(encoding="ascii") == k:
                return
        except (OSError, UnicodeDecodeError):
            pass
        try:
            write_atomic(path, k.encode("ascii"))
        except OSError:  # a read-only or full cache still answers; it only predicts less
            pass

    def predicts_hits(self, hints: list[str]) -> bool:
        """True if every hint leads to a measurement that is in the cache."""
        for h in hints:
            try:
                k = self._hint_path(h).read_text(encoding="ascii").strip()
            except (OSError, UnicodeDecodeError):
                return False
            if len(k) != 64 or not self._path(k).is_file():
                return False
        return bool(hints)


def hint(case: CaseSpec, target: str, static_only: bool) -> str:
    """What can be known of a case × target without importing torch: the case file's bytes.

    `Cache.remember` maps it to the key last measured for it, so before anything is built
    `Cache.predicts_hits` can tell a run the cache will (very likely) answer. Only a prediction:
    the verdict always comes from the real key, computed after every model is built.
    """
    h = hashlib.sha256()
    try:
        h.update(case.path.read_bytes())
    except OSError:
        h.update(b"unreadable")
    # The case's name, not its path: a checkout somewhere else (another CI workspace) that
    # restores the cache predicts the same.
    h.update(f"\0{case.name}\0{target}\0{static_only}\0{FORMAT}".encode())
    return h.hexdigest()


def cacheable(m: Measurement) -> bool:
    """Errors are not cached: a crash or an environment problem must be retried."""
    return m.error is None and m.numerics_error is None


def target_description(target: str, static_only: bool) -> tuple[bool, str]:
    """Whether numerics will run on `target` here, and the compile target in words."""
    if target == "llvm":
        return (not static_only), "llvm"
    # lazy: TVM, to ask for the device (only when a cuda case is keyed)
    from cl_validate.compile.target import device_available, make_target

    return (not static_only and device_available(target)), str(make_target(target))
