"""What a measurement depends on besides the case file: source code and versions, hashed.

The cache key (`cl_validate.measurements.cache.key`) includes the source of the model's package (and
of the local modules it imports, followed transitively), of a user pipeline and of
cl_validate itself, and the versions of TVM, tvm-ffi, torch, numpy and Python. Files are read,
never executed: an import hidden behind ``importlib.import_module`` is not followed.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import importlib.resources
import importlib.util
import os
import platform
import stat
import sys
import sysconfig
from pathlib import Path

from cl_validate.measurements.messages import FileStamp


def _hash_files(files: dict[Path, str]) -> str:
    """Hash of files by content, each under its name relative to its root's folder (so a
    clone elsewhere hashes the same), in name order."""
    h = hashlib.sha256()
    for f, label in sorted(files.items(), key=lambda item: item[1]):
        h.update(label.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


#: What setuptools-scm writes at build time: the version, which between tags names the
#: commit (0.2.1.devN+gHASH) and changes no measurement.
_VERSION_FILE = "_version.py"


@functools.cache
def own_source() -> str:
    return package_source(Path(__file__).resolve().parent.parent)


def package_source(root: Path) -> str:
    """cl_validate's source (the package at `root`): a changed line may change a measurement.
    Not its generated version file: a cache would otherwise miss on every commit of a
    checkout that installs itself (this repository's CI runs its own action)."""
    return _hash_files({f: str(f.relative_to(root.parent)) for f in _py_files(root)
                        if f.parent != root or f.name != _VERSION_FILE})


def module_source(module_name: str) -> str:
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
def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "machine": platform.machine()}
    for dist in ("apache-tvm", "apache-tvm-ffi", "torch", "numpy"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


#: The pinned distributions a measurement's counts depend on: another version may import,
#: fuse or schedule differently (`off_pins`).
COUNTED_PINS = ("apache-tvm", "apache-tvm-ffi", "torch")


def pin_text() -> str:
    """The pins file shipped with the package (``cl_validate/pins.txt``), as written."""
    return (importlib.resources.files("cl_validate") / "pins.txt").read_text(encoding="utf-8")


def pins() -> dict[str, str]:
    """Distribution name → exact version, from `pin_text` (``name==version`` lines)."""
    out = {}
    for raw in pin_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, sep, ver = line.partition("==")
            if not sep:
                raise ValueError(f"cl_validate/pins.txt: not name==version: {raw!r}")
            out[name.strip()] = ver.strip()
    return out


def installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def pin_matches(have: str, pinned: str) -> bool:
    """PEP 440 ``==`` without a local label in the pin: ``2.13.0+cpu`` satisfies ``2.13.0``."""
    return have == pinned or have.split("+", 1)[0] == pinned


def off_pins() -> list[str]:
    """``torch 2.11.0+cu130 (pinned 2.13.0)`` for each distribution of `COUNTED_PINS` whose
    installed version is not the pinned one: budgets were recorded under the pins, so this
    run's counts may differ for that reason alone."""
    pinned = pins()
    out = []
    for name in COUNTED_PINS:
        have = installed(name)
        if name in pinned and (have is None or not pin_matches(have, pinned[name])):
            out.append(f"{name} {have or 'absent'} (pinned {pinned[name]})")
    return out


def off_pins_line(differ: list[str]) -> str:
    """One line saying that this run is not under the pins, or "" when it is."""
    if not differ:
        return ""
    return ("not the pinned versions: " + ", ".join(differ) + "; counts may not match "
            "budgets recorded under the pins (cl-validate pins --check)")


def stamp(path: str) -> FileStamp | None:
    """`path` as it is now (size, mtime, SHA-256), None when it is not a regular file."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
        return FileStamp(path, st.st_size, st.st_mtime_ns, _file_sha256(path))
    except OSError:
        return None


def link_stamp(path: str) -> FileStamp | None:
    """A symbolic link at `path` and where it points; None when `path` is not one."""
    try:
        return FileStamp(path, 0, 0, "", link=os.readlink(path))
    except OSError:
        return None


def matches(s: FileStamp, root: Path) -> bool:
    """Whether the file of `s` (a relative path: under `root`) is still as it was: the same
    size and mtime (trusted, as ccache trusts them), else the same content; a link, still
    pointing where it did; a path where nothing was, still empty."""
    path = os.path.join(root, s.path)
    if s.absent:
        return not os.path.lexists(path)
    if s.link is not None:
        try:
            return os.readlink(path) == s.link
        except OSError:
            return False
    try:
        st = os.stat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size != s.size:
        return False
    if st.st_mtime_ns == s.mtime_ns:
        return True
    try:
        return _file_sha256(path) == s.sha256
    except OSError:
        return False


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
