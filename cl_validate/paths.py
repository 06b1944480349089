"""File names derived from what users write, and the one rule for where reports may go.

Case names, target names and stage names end up in file names (baselines, per-case reports,
cache entries). A case file is user input, and on CI it may come from a pull request, so
every writer that derives a file name from such a value calls `safe_filename`, and every
writer that joins such a name onto a report folder calls `inside` — nothing is ever written
outside the folder the user chose. `report_file` checks a path the user named on the command
line (``--junit FILE``) before any compile, so a typo costs seconds, not the whole run.

This module never imports torch or TVM.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path

from cl_validate.errors import UsageError

#: Longest name `safe_filename` returns: well under the 255-byte limit of common file
#: systems, leaving room for a suffix such as ``.junit.xml`` or ``.json.tmp``.
MAX_NAME = 120
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
# Names Windows refuses whatever the extension (reports are read on Windows runners too).
_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)),
             *(f"LPT{i}" for i in range(10))}


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def safe_filename(name: str) -> str:
    """A single path component made from `name`: no separators, never hidden, never ``.``
    or ``..``, at most `MAX_NAME` characters.

    A name that is already safe comes back unchanged (``resnet50`` stays ``resnet50``), so file
    names stay readable. A name that had to change gets a short hash of the original appended,
    so two different names (``a/b`` and ``a_b``) never share a file.
    """
    safe = _UNSAFE.sub("_", name)
    if safe.startswith("."):
        safe = "_" + safe[1:]
    if safe.split(".", 1)[0].upper() in _RESERVED:
        safe = "_" + safe
    if safe == name and safe and len(safe) <= MAX_NAME:
        return safe
    tag = "-" + _digest(name)
    return safe[: MAX_NAME - len(tag)] + tag


def inside(base: str | Path, path: str | Path) -> Path:
    """`path` (relative paths are taken relative to `base`) resolved, if it lies within `base`.

    Raises `UsageError` when it does not: through ``..``, an absolute path, or a symbolic link
    that points elsewhere. Call it on every path a writer builds from user-derived names.
    """
    root = Path(base).resolve()
    target = (root / path).resolve()
    if target != root and root not in target.parents:
        raise UsageError(f"refusing to write {target}: it is outside {root}",
                         hint="file names derived from case names must stay in the report "
                         "folder")
    return target


def display_path(path: str | Path) -> str:
    """A path as shown to users in messages: relative to the working directory when it is
    inside it, else as given."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(p)


def repo_root(start: Path, env: Mapping[str, str] | None = None) -> Path:
    """The repository a file belongs to, as CI publishers resolve annotation paths:
    ``$GITHUB_WORKSPACE`` when the file is inside it, else the nearest folder above it that
    holds ``.git`` (a folder, or a file in a worktree or submodule), else the working
    directory."""
    env = os.environ if env is None else env
    here = start.resolve()
    workspace = env.get("GITHUB_WORKSPACE")
    if workspace:
        ws = Path(workspace).resolve()
        if here == ws or ws in here.parents:
            return ws
    return _git_top(here if here.is_dir() else here.parent) or Path.cwd().resolve()


@functools.lru_cache(maxsize=256)
def _git_top(folder: Path) -> Path | None:
    for d in (folder, *folder.parents):
        if (d / ".git").exists():
            return d
    return None


def repo_path(path: str | Path, env: Mapping[str, str] | None = None) -> str:
    """`path` as reports name it: relative to `repo_root`, with forward slashes, never
    absolute (a file outside the root is named through ``..``), the same from any working
    directory: what GitHub's annotations and the JUnit publishers resolve."""
    p = Path(path).resolve()
    root = repo_root(p, env)
    return Path(os.path.relpath(p, root)).as_posix()


def report_file(path: str | Path, option: str) -> Path:
    """Check a report path named on the command line before anything runs.

    Refuses a path that is a folder, or whose parent is a file, in one line naming `option`;
    missing parent folders are fine (the writer creates them).
    """
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{option} {path}: is a folder, not a file",
                         hint=f"name the report file, e.g. {option} {p / 'report.xml'}")
    for parent in p.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"{option} {path}: {parent} is a file, not a folder",
                                 hint="choose a report path in a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise UsageError(f"{option} {path}: cannot write into {parent}",
                                 hint="choose a folder you can write to")
            break
    return p
