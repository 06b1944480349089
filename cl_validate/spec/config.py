"""Project settings from ``[tool.cl_validate]`` in the nearest pyproject.toml.

Policy lives here (how strict the gate is) and the targets every case may name
(``[tool.cl_validate.targets.<name>]``: the boards a team deploys to are the same for all its
models); what a case expects lives in its case file.
"""

from __future__ import annotations

import difflib
import enum
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cl_validate.errors import UsageError
from cl_validate.paths import display_path
from cl_validate.spec.lines import locate_lines, tomllib
from cl_validate.spec.model import nearest_line
from cl_validate.spec.targets import TargetDef, parse_decl

_KEYS = ("stale_budget", "targets")
_SECTION = ("tool", "cl_validate")


class StalePolicy(enum.Enum):
    """What a budget above the measured count (a stale budget) does to the run."""

    FAIL = "fail"
    """The check fails (``BudgetStale``): the pull request that improved it must lower it."""
    WARN = "warn"
    """The check passes, marked stale, with a warning line and annotation."""


STALE_POLICIES = tuple(p.value for p in StalePolicy)


@dataclass(frozen=True)
class Config:
    stale_budget: StalePolicy = StalePolicy.FAIL
    path: Path | None = None
    #: ``[tool.cl_validate.targets.<name>]``: targets any case may list by name
    targets: dict[str, TargetDef] = field(default_factory=dict)


def find_pyproject(start: Path | None = None) -> Path | None:
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        p = d / "pyproject.toml"
        if p.is_file():
            return p
    return None


def load_config(start: Path | None = None) -> Config:
    """``[tool.cl_validate]`` of the nearest pyproject.toml (read once per version of the
    file: every command asks for it several times)."""
    path = find_pyproject(start)
    if path is None:
        return Config()
    st = path.stat()
    return _parse_config(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _parse_config(path: Path, mtime_ns: int, size: int) -> Config:
    text = path.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"cannot parse: {exc}", file=display_path(path)) from None
    section = data.get("tool", {}).get("cl_validate", {})
    lines = locate_lines(text)
    where = {"file": display_path(path)}
    for key in section:
        if key not in _KEYS:
            close = difflib.get_close_matches(key, _KEYS, n=1)
            raise UsageError(f"unknown key '{key}' in [tool.cl_validate]",
                             line=lines.get(("tool", "cl_validate", key)),
                             hint=f"did you mean '{close[0]}'?" if close else
                             "allowed: " + ", ".join(_KEYS), **where)
    stale = section.get("stale_budget", "fail")
    if stale not in STALE_POLICIES:
        raise UsageError(f"stale_budget must be one of {', '.join(STALE_POLICIES)}, got "
                         f"{stale!r}", line=lines.get(("tool", "cl_validate", "stale_budget")),
                         **where)
    targets = _targets(section.get("targets", {}), lines, display_path(path))
    return Config(stale_budget=StalePolicy(stale), path=path, targets=targets)


def _targets(raw: Any, lines: dict[tuple[str, ...], int], file: str) -> dict[str, TargetDef]:
    """``[tool.cl_validate.targets.<name>]`` tables, each a target declaration."""
    def fail(path: tuple[str, ...], message: str, hint: str | None = None) -> UsageError:
        return UsageError(message, file=file, line=nearest_line(lines, (*_SECTION, *path)),
                          hint=hint)

    if not isinstance(raw, dict):
        raise fail(("targets",), "[tool.cl_validate.targets] must be a table of targets",
                   "[tool.cl_validate.targets.arm64] with target = { kind = \"llvm\", ... }")
    return {name: parse_decl(name, decl, ("targets", name), fail, file=file,
                             line=nearest_line(lines, (*_SECTION, "targets", name, "target")),
                             where="tool.cl_validate.targets")
            for name, decl in raw.items()}
