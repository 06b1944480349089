"""Find case files under the PATHs a user names, and load them all (names must be unique).

Folders are walked without ever hanging or failing on what a folder can hold: a symbolic link
to a folder is followed once (a link back up the tree is not a loop to walk forever), and an
entry named ``*.toml`` that is not a regular file — a FIFO, a device, a socket, a link loop, a
broken link — is a one-line error naming it, found without opening it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from cl_validate.errors import CaseFileError, UsageError
from cl_validate.paths import FOLDER, display_path, not_regular
from cl_validate.spec.config import load_config
from cl_validate.spec.model import CaseSpec
from cl_validate.spec.validate import load_case


def discover(paths: Iterable[str | Path]) -> list[Path]:
    """Case files named by PATHs (files, or folders searched recursively for ``*.toml``)."""
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        kind = not_regular(p)
        if kind == FOLDER:
            found.extend(sorted(_walk(p)))
        elif kind is None and not p.exists():
            raise UsageError(f"no such case file or folder: {raw}",
                             hint="pass a .toml case file or a folder of them")
        else:  # a file; if not a regular one, loading it says what it is (never opened)
            found.append(p)
    unique: list[Path] = []
    seen: set[str] = set()
    for p in found:
        r = os.path.realpath(p)
        if r not in seen:
            seen.add(r)
            unique.append(p)
    return unique


def _walk(root: Path) -> Iterator[Path]:
    """The ``*.toml`` entries under `root` (hidden ones left out), following links to
    folders, each folder once. Whatever an entry is, it is not opened here: loading one that
    is not a regular file (a folder named ``*.toml``, a FIFO...) says what it is."""
    visited: set[tuple[int, int]] = set()
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            st = os.stat(folder)
            if (st.st_dev, st.st_ino) in visited:
                continue
            visited.add((st.st_dev, st.st_ino))
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            raise UsageError(f"cannot read folder: {exc.strerror or exc}",
                             file=display_path(folder)) from None
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            if entry.name.endswith(".toml"):
                yield path
            if not_regular(path) == FOLDER:
                stack.append(path)


def load_cases(paths: Iterable[str | Path]) -> list[CaseSpec]:
    """Discover and validate every case; duplicate case names are an error."""
    paths = list(paths)
    files = discover(paths)
    if not files:
        raise UsageError("no case files found in " + ", ".join(str(p) for p in paths),
                         hint="case files are *.toml under model_cases/")
    project = load_config().targets  # once for every case
    cases = [load_case(f, project) for f in files]
    by_name: dict[str, CaseSpec] = {}
    for c in cases:
        if c.name in by_name:
            first = by_name[c.name]
            raise CaseFileError(
                f"duplicate case name '{c.name}' (also in {display_path(first.path)})",
                file=display_path(c.path), line=c.line_of("name"),
                hint="case names must be unique: set name = \"...\"",
            )
        by_name[c.name] = c
    return cases
