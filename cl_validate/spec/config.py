"""Project settings from ``[tool.cl_validate]`` in the nearest pyproject.toml.

Only policy lives here (how strict the gate is); what a case expects lives in its case file.
"""

from __future__ import annotations

import difflib
import enum
from dataclasses import dataclass
from pathlib import Path

from cl_validate.errors import UsageError
from cl_validate.paths import display_path
from cl_validate.spec.lines import locate_lines, tomllib

_KEYS = ("stale_budget",)


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


def find_pyproject(start: Path | None = None) -> Path | None:
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        p = d / "pyproject.toml"
        if p.is_file():
            return p
    return None


def load_config(start: Path | None = None) -> Config:
    path = find_pyproject(start)
    if path is None:
        return Config()
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
    return Config(stale_budget=StalePolicy(stale), path=path)
