"""Find case files under the PATHs a user names, and load them all (names must be unique)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from cl_validate.errors import CaseFileError, UsageError
from cl_validate.paths import display_path
from cl_validate.spec.config import load_config
from cl_validate.spec.model import CaseSpec
from cl_validate.spec.validate import load_case


def discover(paths: Iterable[str | Path]) -> list[Path]:
    """Case files named by PATHs (files, or folders searched recursively for ``*.toml``)."""
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found.extend(sorted(q for q in p.rglob("*.toml") if not _hidden(q.relative_to(p))))
        elif p.is_file():
            found.append(p)
        else:
            raise UsageError(f"no such case file or folder: {raw}",
                             hint="pass a .toml case file or a folder of them")
    unique: list[Path] = []
    seen: set[Path] = set()
    for p in found:
        r = p.resolve()
        if r not in seen:
            seen.add(r)
            unique.append(p)
    return unique


def _hidden(rel: Path) -> bool:
    return any(part.startswith(".") for part in rel.parts)


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
