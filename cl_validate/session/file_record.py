"""The files a case reads while it is measured: the cache's direct key is checked against them.

A case's measurement depends on its case file and on what its model's code reads: the
factory's module and everything it imports, and the data files it opens (weights, configs).
The case process records both — an audit hook sees every file Python code opens for reading,
and the modules that were imported while the case ran are read off ``sys.modules`` — and
stamps each file (size, mtime, SHA-256) as it is first read: a file edited while the case
runs keeps the stamp of what the case read, so the next run sees the edit; a path is
resolved against the working directory of that moment (a later ``chdir`` changes nothing). A
module's compiled ``.pyc`` stands for its source too: the source is stamped beside it. Where
the import system looked for a module before the place it found it (the import path's
earlier folders, a package's earlier ``__path__`` entries), each name it would have taken
there is stamped absent: a module put there later shadows the one the case imported. The
next run checks the stamps against the files as they are then
(`cl_validate.measurements.cache.Cache.recall`, without running any of the model's code) and
reuses the measurement when none changed, as ccache's direct mode does.

Left out, because the cache key covers them otherwise: files of TVM, tvm-ffi, torch and NumPy
(their versions are in the key), of cl_validate (its source is), of the Python standard
library (the Python version is), the cache's own entries, and a file the case made itself
(created or truncated, then read back). Files opened by native code without Python (a C
library's ``fopen``) are stamped by the case's open watcher (`cl_validate.session.open_watch`)
wherever the case's seccomp filter goes in, and merged here (`merge`). Not seen: what is not a file
(environment variables, the clock, the network): a model that depends on those needs
``--no-cache``. A
path opened relative to a directory descriptor (``os.open(name, flags, dir_fd=fd)``) is
stamped where the descriptor points: ``os.open`` is wrapped, because the audit event does
not carry the descriptor. Devices and
``/proc`` are not files to stamp; a regular file under ``/dev/shm`` is.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import posix
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from cl_validate.measurements.messages import FileStamp
from cl_validate.measurements.sources import link_stamp, stamp

#: What a recorder stamped: each path as opened, with its stamp and its links' (real path,
#: stamp) — `FileRecorder.taken`, as an open watcher sends it
Taken = tuple[tuple[str, tuple[tuple[str, FileStamp], ...]], ...]
#: Packages whose versions are in the cache key: their files are not stamped.
_VERSIONED = ("torch", "tvm", "tvm_ffi", "numpy", "cl_validate")
_SYSTEM = ("/proc/", "/sys/")
#: The dynamic loader's index of libraries: how a library was found, not an input (the
#: library it found is stamped)
_LOADER = ("/etc/ld.so.cache",)


def _package_dir(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    locations = spec.submodule_search_locations if spec is not None else None
    return os.path.realpath(next(iter(locations))) + os.sep if locations else None


def _left_out(extra: Iterable[str]) -> tuple[str, ...]:
    roots = [d for d in (_package_dir(n) for n in _VERSIONED) if d]
    for key in ("stdlib", "platstdlib"):
        roots.append(os.path.realpath(sysconfig.get_paths()[key]) + os.sep)
    roots.extend(os.path.realpath(e) + os.sep for e in extra)
    return tuple(dict.fromkeys(roots))


class _Searches(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: notes where each module is looked for (the import path,
    or its package's ``__path__``, as the path finder will search it), finds nothing."""

    def __init__(self) -> None:
        self.searched: dict[str, tuple[str, ...]] = {}

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if fullname not in self.searched:
            entries = sys.path if path is None else path
            self.searched[fullname] = tuple(os.path.abspath(e) for e in list(entries)
                                            if isinstance(e, str))
        return None


def _shadows(name: str, origin: str, searched: tuple[str, ...]) -> list[str]:
    """The paths where a module `name` found at `origin` would have been found first: each
    name the path finder takes (``mod.py``, ``mod/``, ``mod.so``, ...) in every folder it
    searched before the one that held it."""
    leaf = name.rpartition(".")[2]
    home = os.path.dirname(origin)
    if os.path.basename(origin).startswith("__init__."):
        home = os.path.dirname(home)
    home = os.path.realpath(home)
    before = []
    for entry in searched:
        if os.path.realpath(entry) == home:
            break
        if os.path.isdir(entry):
            before.append(entry)
    else:
        return []  # not found on the path searched (a loader of its own): nothing to shadow
    names = [leaf, *(leaf + suffix for suffix in importlib.machinery.all_suffixes())]
    return [os.path.join(entry, n) for entry in before for n in names]


class FileRecorder:
    """Notes the files this process opens for reading and the modules it imports, from
    `start` on; `stamps` hashes them."""

    def __init__(self, left_out: Iterable[str] = ()) -> None:
        self._paths: set[str] = set()
        self._written: set[str] = set()  # made (created or truncated) by the case itself
        self._modules = set(sys.modules)
        self._active = False
        self._busy = False  # stamping opens the file: not recorded again
        self._extra = tuple(left_out)
        self._skip: tuple[str, ...] = ()
        #: absolute path as opened → its stamp and its links', taken when first read
        self._stamped: dict[str, list[tuple[str, FileStamp]]] = {}
        self._searches = _Searches()

    def start(self) -> None:
        """Begin recording (an audit hook: it lasts as long as the process, which is the
        case's own; ``os.open`` wrapped, for the directory a ``dir_fd`` stands for)."""
        self._modules = set(sys.modules)
        self._skip = _left_out(self._extra)
        self._active = True
        sys.addaudithook(self._hook)
        sys.meta_path.insert(0, self._searches)
        os.open = posix.open = self._open_at(os.open)  # type: ignore[assignment]

    def _open_at(self, original: Any) -> Any:
        """`original` (``os.open``), noting a path opened relative to a directory descriptor
        where it is: the audit event carries the path but not the descriptor."""

        def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None
                  ) -> int:
            if dir_fd is not None and self._active and not isinstance(path, int):
                try:
                    name = os.fsdecode(path)
                    if not os.path.isabs(name):
                        self._record(os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"),
                                                  name), "", flags)
                except (OSError, TypeError, ValueError):
                    pass
            return original(path, flags, mode, dir_fd=dir_fd)  # type: ignore[no-any-return]

        return open_

    def stop(self) -> None:
        self._active = False

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        """Every file opened for reading, read-write included (``np.memmap(mode="r+")``, an
        ``O_RDWR`` open); not one opened only to write, nor one the case creates or
        truncates (it is the case's output, not its input)."""
        if not self._active or event != "open" or not args:
            return
        path, mode = args[0], args[1] if len(args) > 1 else None
        if isinstance(path, int):
            return  # an fd: opened before
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        try:
            name = os.fsdecode(path)
        except (TypeError, ValueError):
            return
        self._record(name, str(mode or ""), flags)

    def note(self, name: str, flags: int) -> None:
        """An absolute path opened with `flags` by another process of the case (as an open
        watcher, `cl_validate.session.open_watch`, sees it): recorded and stamped now."""
        if not self._skip:
            self._skip = _left_out(self._extra)
        self._record(name, "", flags)

    def taken(self) -> Taken:
        """Every stamp taken so far, for `merge` in another process."""
        return tuple((path, tuple(pairs)) for path, pairs in self._stamped.items())

    def merge(self, taken: Taken) -> None:
        """Stamps another process took (an open watcher's): recorded as if read here; a
        path stamped here already keeps its own (both were taken as it was first read)."""
        for path, pairs in taken:
            self._paths.add(path)
            self._stamped.setdefault(path, list(pairs))

    def _record(self, name: str, text: str, flags: int) -> None:
        """`name` opened with mode `text` or `flags`: noted and stamped if it is read, and
        not a file the case made itself (created or truncated before)."""
        only_writes = (flags & os.O_ACCMODE) == os.O_WRONLY or (
            text and "r" not in text and "+" not in text)
        truncates = "w" in text or bool(flags & os.O_TRUNC)
        may_create = "x" in text or bool(flags & os.O_CREAT)
        absolute = os.path.abspath(name)  # against the working directory of this moment
        if truncates or (may_create and not os.path.exists(name)):
            self._written.add(absolute)  # read back later, it is still the case's own
        if only_writes or absolute in self._written:
            return  # the case's output, not its input
        self._paths.add(absolute)
        if absolute not in self._stamped and not self._busy:
            self._busy = True
            try:
                self._stamped[absolute] = self._stamp(absolute)
            finally:
                self._busy = False

    def _stamp(self, absolute: str) -> list[tuple[str, FileStamp]]:
        """`absolute` as it is now, with each link on the way to it and, for a module's
        ``.pyc``, its source: (real path, stamp) pairs; none for a file left out."""
        out: list[tuple[str, FileStamp]] = []
        path = os.path.realpath(absolute)
        if path.startswith(self._skip) or path.startswith(_SYSTEM) or path in _LOADER:
            return out
        s = stamp(path)
        if s is not None:
            out.append((path, s))
        for link in _links_on(absolute):  # the path as the model named it
            ls = link_stamp(link)
            if ls is not None:
                out.append((link, ls))
        if path.endswith(".pyc"):  # imported from __pycache__: its source is what is edited
            try:
                source = importlib.util.source_from_cache(path)
            except ValueError:
                source = None
            s = stamp(source) if source else None
            if source and s is not None:
                out.append((source, s))
        return out

    def _new_modules(self) -> dict[str, str]:
        """Each module imported since `start` that came from a file: name → the file."""
        out = {}
        for name in set(sys.modules) - self._modules:
            spec = getattr(sys.modules.get(name), "__spec__", None)
            origin = getattr(spec, "origin", None) if spec is not None else None
            if isinstance(origin, str) and origin not in ("built-in", "frozen"):
                out[name] = origin
        return out

    def _module_files(self) -> set[str]:
        return set(self._new_modules().values())

    def _absent(self, since: frozenset[str]) -> dict[str, FileStamp]:
        """Where each new module not left out would have been found first, stamped absent
        (none of a module seen before `since`)."""
        out: dict[str, FileStamp] = {}
        for name, origin in self._new_modules().items():
            real = os.path.realpath(origin)
            if origin in since or real.startswith(self._skip) or name not in \
                    self._searches.searched:
                continue
            for path in _shadows(name, real, self._searches.searched[name]):
                if not os.path.lexists(path):
                    out.setdefault(path, FileStamp(path, 0, 0, "", absent=True))
        return out

    def seen(self) -> frozenset[str]:
        """What was recorded so far (for `stamps` of what comes after)."""
        return frozenset(self._paths | self._module_files())

    def stamps(self, root: Path | str, since: frozenset[str] = frozenset()
               ) -> tuple[FileStamp, ...]:
        """Every recorded regular file (but those `seen` before `since`), stamped as it was
        first read (a module seen only in ``sys.modules``: now), in path order; a file under
        `root` (the case's repository) by its path relative to it, so another checkout of
        the repository finds its own copy."""
        if not self._skip:
            self._skip = _left_out(self._extra)
        found: dict[str, FileStamp] = {}
        for raw in (self._paths | self._module_files()) - since:
            absolute = os.path.abspath(raw)
            taken = self._stamped.get(absolute)
            if taken is None:
                taken = self._stamp(absolute)
            for path, s in taken:
                if path not in found:
                    found[path] = replace(s, path=_relative(path, root))
        for path, s in self._absent(since).items():
            found.setdefault(path, replace(s, path=_relative(path, root)))
        return tuple(found[p] for p in sorted(found))


def _links_on(path: str) -> list[str]:
    """The symbolic links among `path` and the folders on the way to it (each resolved
    from its own parent, as the kernel walks a path)."""
    links: list[str] = []
    parts = Path(path).parts
    current = Path(parts[0])
    for part in parts[1:]:
        current = current / part
        if current.is_symlink():
            links.append(str(current))
            current = Path(os.path.realpath(current))
    return links


def _relative(path: str, root: Path | str) -> str:
    real_root = os.path.realpath(root)
    return os.path.relpath(path, real_root) if path.startswith(real_root + os.sep) else path
