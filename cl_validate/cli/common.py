"""What several subcommands share: the default case folder, finding a case, selecting cases."""

from __future__ import annotations

import argparse
import fnmatch
from collections.abc import Sequence
from pathlib import Path

from cl_validate.errors import UsageError
from cl_validate.spec import KNOWN_TARGETS, CaseSpec, load_case, load_cases

DEFAULT_PATH = "model_cases"


def add_paths(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help=f"case files or folders of them (default: {DEFAULT_PATH})")


def add_target(p: argparse.ArgumentParser, help: str, *, multi: bool) -> None:
    p.add_argument("--target", dest="targets" if multi else "target", choices=KNOWN_TARGETS,
                   action="append" if multi else "store", help=help)


def select(cases: list[CaseSpec], patterns: Sequence[str] | None) -> list[CaseSpec]:
    """The cases whose name contains a pattern (or matches it, with glob wildcards)."""
    if not patterns:
        return cases

    def hit(name: str, pat: str) -> bool:
        return fnmatch.fnmatchcase(name, pat) if any(ch in pat for ch in "*?[") else pat in name

    chosen = [c for c in cases if any(hit(c.name, p) for p in patterns)]
    if not chosen:
        raise UsageError(f"-k {' '.join(patterns)} matches no case",
                         hint="cl-validate list shows the case names")
    return chosen


def find_case(ref: str) -> CaseSpec:
    """A case by file path, or by name under ``model_cases/``."""
    p = Path(ref)
    if p.suffix == ".toml" or p.exists():
        return load_case(p)
    for case in load_cases([DEFAULT_PATH]) if Path(DEFAULT_PATH).is_dir() else []:
        if case.name == ref:
            return case
    raise UsageError(f"no case named '{ref}'", hint=f"pass a .toml path or a case name under "
                     f"{DEFAULT_PATH}/ (cl-validate list)")
