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

import functools
import hashlib
import importlib.metadata
import json
import os
import pickle
import platform
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cl_validate.spec import CaseSpec

if TYPE_CHECKING:
    from cl_validate.runner import Measurement, RunOptions

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


def _hash_files(files: dict[Path, str]) -> str:
    """Hash of files by content, each under its name relative to its root's folder (so a
    clone elsewhere hashes the same), in name order."""
    h = hashlib.sha256()
    for f, label in sorted(files.items(), key=lambda item: item[1]):
        h.update(label.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _hash_tree(root: Path) -> str:
    return _hash_files({f: str(f.relative_to(root.parent)) for f in _py_files(root)})


@functools.cache
def _own_source() -> str:
    return _hash_tree(Path(__file__).resolve().parent)


def _module_source(module_name: str) -> str:
    """Hash of the source behind `module_name`: its top-level package tree (every folder of a
    namespace package) or single module, and the local modules those files import, followed
    transitively: a helper module next to a flat model, or a sibling package. "Local" means
    found outside the Python installation (stdlib, site-packages). Imports are read from the
    files, not executed: one hidden behind ``importlib.import_module`` is not followed."""
    top = module_name.split(".")[0]
    roots = _source_roots(top)
    if not roots:
        return f"unhashable:{module_name}"
    seen = {top}
    queue = list(roots)
    files: dict[Path, str] = {}
    while queue:
        root = queue.pop()
        for f in _py_files(root):
            if f in files:
                continue
            files[f] = str(f.relative_to(root.parent))
            for name in _imported_tops(f):
                if name not in seen:
                    seen.add(name)
                    queue.extend(_source_roots(name, local_only=True))
    return _hash_files(files)


def _source_roots(top: str, *, local_only: bool = False) -> list[Path]:
    """The file of a top-level module, or the folder(s) of a package; [] if unknown (or, with
    `local_only`, part of the Python installation)."""
    import importlib.util

    mod = sys.modules.get(top)
    spec = getattr(mod, "__spec__", None) if mod is not None else None
    if spec is None:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return []
    if spec is None:
        return []
    if spec.submodule_search_locations:  # a package, regular or namespace
        paths = [Path(p).resolve() for p in spec.submodule_search_locations]
    elif spec.origin and spec.origin.endswith(".py"):
        paths = [Path(spec.origin).resolve()]
    else:  # built-in, frozen or compiled extension
        return []
    if local_only:
        paths = [p for p in paths if not _installed(p)]
    return paths


@functools.cache
def _install_dirs() -> tuple[Path, ...]:
    import sysconfig

    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, *sysconfig.get_paths().values()}
    return tuple(Path(d).resolve() for d in dirs if d)


def _installed(path: Path) -> bool:
    return any(path.is_relative_to(d) for d in _install_dirs()) or any(
        part in ("site-packages", "dist-packages") for part in path.parts)


def _py_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return [f for f in root.rglob("*.py") if "__pycache__" not in f.parts]


_IMPORTS: dict[tuple[Path, int, int], frozenset[str]] = {}


def _imported_tops(path: Path) -> frozenset[str]:
    """Top-level names of the absolute imports in a Python file (memoized per file version)."""
    import ast

    st = path.stat()
    memo = (path, st.st_mtime_ns, st.st_size)
    if memo not in _IMPORTS:
        names: set[str] = set()
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError):
            tree = None
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        _IMPORTS[memo] = frozenset(names)
    return _IMPORTS[memo]


@functools.cache
def _versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "machine": platform.machine()}
    for dist in ("apache-tvm", "apache-tvm-ffi", "torch", "numpy"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


def weights_digest(model: Any) -> str:
    """Hash of everything a model carries into the compiled program: every parameter and
    buffer (non-persistent buffers too: they are exported as constants) by name, dtype, shape
    and bytes, and the extra state of modules that define ``get_extra_state``."""
    import torch

    h = hashlib.sha256()
    tensors = dict(model.named_parameters())
    tensors.update(model.named_buffers())
    for name, t in sorted(tensors.items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    base = torch.nn.Module.get_extra_state
    for name, module in sorted(model.named_modules()):
        if getattr(type(module), "get_extra_state", base) is base:
            continue
        try:
            state = pickle.dumps(module.get_extra_state(), protocol=4)
        except Exception:  # not picklable: its repr is the best stable account there is
            state = repr(module.get_extra_state()).encode()
        h.update(f"extra:{name}:".encode() + state)
    return h.hexdigest()


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
        "pipeline_source": _module_source(case.pipeline.partition(":")[0])
        if ":" in case.pipeline else "",
        "seed": case.seed,
        "model_source": _module_source(case.model.partition(":")[0]),
        "weights": weights,
        "cl_validate": _own_source(),
        "versions": _versions(),
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
        _write_atomic(self._path(k), pickle.dumps(m, protocol=pickle.HIGHEST_PROTOCOL))

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
            _write_atomic(path, k.encode("ascii"))
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


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: Read once, at import (before any thread): entries get the mode a plain open() would give
#: them, not mkstemp's 0600, so a cache shared between users stays readable to them.
_FILE_MODE = 0o666 & ~_umask()


def _write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file and a rename: readers see the old
    file or the new one, never a part (several workers or CI jobs may share the cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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


def target_description(target: str, options: RunOptions) -> tuple[bool, str]:
    """Whether numerics will run on `target` here, and the compile target in words."""
    if target == "llvm":
        return (not options.static_only), "llvm"
    from cl_validate.pipeline import device_available, make_target

    return (not options.static_only and device_available(target)), str(make_target(target))
