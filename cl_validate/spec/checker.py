"""The checks every part of a case file shares: types, ranges, unknown keys with a
did-you-mean, tolerance and budget tables — each complaint a `CaseFileError` with the file and
the line of the key (found with `cl_validate.spec.lines`)."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cl_validate.errors import CaseFileError
from cl_validate.spec.budget_keys import budget_keys
from cl_validate.spec.lines import locate_lines
from cl_validate.spec.model import IO_LAYOUTS, REFERENCES, nearest_line
from cl_validate.spec.targets import BUILTIN_TARGETS, NAME_RE

__all__ = ["IDENT_RE", "MAX_INTEGER", "MAX_SEED", "NAME_RE", "Checker"]

IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOL_KEYS = ("rtol", "atol", "reference", "multiplier", "floor", "steps")
_OVERRIDE_KEYS = ("budget", "tolerance")
#: The largest integer a case-file key takes unless it says otherwise (a size, megabytes):
#: a C ``int``, far past any value a case means and within what every consumer of a case
#: takes. A larger one is a typo (past 64 bits it could not even reach a case process).
MAX_INTEGER = 2**31 - 1
#: The largest seed: what numpy's and torch's seeding both take.
MAX_SEED = 2**32 - 1


class Checker:
    """Walks one parsed case file; every complaint carries the file and line."""

    def __init__(self, path: Path, text: str, display: str) -> None:
        self.path = path
        self.display = display
        self.lines = locate_lines(text)
        #: the targets a ``targets_override`` may name: built in until the case's own
        #: targets and the project's are known (`cl_validate.spec.targets.override_names`)
        self.targets: tuple[str, ...] = BUILTIN_TARGETS

    def line(self, *path: str) -> int | None:
        return nearest_line(self.lines, path)

    def fail(self, path: Iterable[str], message: str, hint: str | None = None) -> CaseFileError:
        return CaseFileError(message, file=self.display, line=self.line(*path), hint=hint)

    def table(self, value: Any, path: tuple[str, ...], what: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"{what} must be a table, got {_kind(value)}")
        return value

    def keys(self, table: Mapping[str, Any], allowed: Iterable[str], path: tuple[str, ...],
             where: str) -> None:
        allowed = tuple(allowed)
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
                hint = f"did you mean '{close[0]}'?" if close else "allowed: " + ", ".join(allowed)
                raise self.fail((*path, key), f"unknown key '{key}' in {where}", hint)

    def string(self, value: Any, path: tuple[str, ...], what: str) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"{what} must be a string, got {_kind(value)}")
        return value

    def integer(self, value: Any, path: tuple[str, ...], what: str, minimum: int,
                maximum: int = MAX_INTEGER, hint: str | None = None) -> int:
        """An integer in [`minimum`, `maximum`]; `hint` says what bounds it above."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"{what} must be an integer, got {_kind(value)} {value!r}")
        if value < minimum:
            raise self.fail(path, f"{what} must be >= {minimum}, got {_show(value)}")
        if value > maximum:
            raise self.fail(path, f"{what} must be <= {maximum:,}, got {_show(value)}",
                            hint or "no case needs a larger one: check the number for a typo")
        return value

    def number(self, value: Any, path: tuple[str, ...], what: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(path, f"{what} must be a number, got {_kind(value)} {value!r}")
        try:
            number = float(value)  # an integer literal past a float's range does not convert
        except OverflowError:
            raise self.fail(path, f"{what} is out of range, got {_show(int(value))}",
                            "a number here is a float: at most about 1.8e308") from None
        if not math.isfinite(number):
            raise self.fail(path, f"{what} must be finite, got {value}")
        return number

    def tolerance(self, value: Any, path: tuple[str, ...]) -> dict[str, float | str]:
        tab = self.table(value, path, "tolerance")
        self.keys(tab, _TOL_KEYS, path, "[" + ".".join(p for p in path if not p.isdigit()) + "]")
        out: dict[str, float | str] = {}
        for key in _TOL_KEYS:
            if key not in tab:
                continue
            if key == "reference":
                out[key] = self.choice(tab[key], (*path, key), key, REFERENCES)
                continue
            v = self.number(tab[key], (*path, key), key)
            if v < 0:
                raise self.fail((*path, key), f"{key} must be >= 0, got {v:g}")
            if key == "multiplier" and v < 1:
                raise self.fail((*path, key), f"multiplier must be >= 1, got {v:g}",
                                "TVM may be as far from float64 as eager float32 (1) or "
                                "some times farther; the default is 3")
            out[key] = v
        return out

    def choice(self, value: Any, path: tuple[str, ...], what: str,
               allowed: tuple[str, ...]) -> str:
        s = self.string(value, path, what)
        if s not in allowed:
            close = difflib.get_close_matches(s, allowed, n=1)
            hint = f"did you mean '{close[0]}'?" if close else "use " + " or ".join(allowed)
            raise self.fail(path, f"unknown {what} '{s}'", hint)
        return s

    def budget(self, value: Any, path: tuple[str, ...]) -> dict[str, Any]:
        """A budget table: every key a check declared (`cl_validate.spec.budget_keys`),
        and the ``reason`` that ``budget tighten --allow-increase`` records."""
        tab = self.table(value, path, "budget")
        keys = budget_keys()
        self.keys(tab, [*(k.name for k in keys), *(a for k in keys for a in k.aliases),
                        "reason"], path, "[" + ".".join(path) + "]")
        out: dict[str, Any] = {}
        if "reason" in tab:  # written by `budget tighten --allow-increase --reason TEXT`
            out["reason"] = self.string(tab["reason"], (*path, "reason"), "reason")
        for key in keys:
            spelled = [n for n in (key.name, *key.aliases) if n in tab]
            if len(spelled) > 1:
                raise self.fail((*path, spelled[1]), f"'{spelled[1]}' and '{spelled[0]}' "
                                "are one budget under two names",
                                f"keep '{key.name}' (the other is its old name)")
            if spelled:  # each kind of value reads its own (`ValueKind.parse`)
                name = spelled[0]
                out[key.name] = key.kind.parse(tab[name], self, (*path, name), key)
                where, canonical = (*path, name), (*path, key.name)
                if name != key.name and where in self.lines:
                    self.lines[canonical] = self.lines[where]
        return out

    def io_layout(self, value: Any, path: tuple[str, ...]) -> str:
        s = self.string(value, path, "layout")
        if s not in IO_LAYOUTS:
            close = difflib.get_close_matches(s.upper(), IO_LAYOUTS, n=1)
            hint = f"did you mean '{close[0]}'?" if close else "use one of " + ", ".join(IO_LAYOUTS)
            raise self.fail(path, f"unsupported layout '{s}'", hint)
        return s


    def file_name(self, value: Any, path: tuple[str, ...], what: str) -> str:
        """A name that becomes part of file names in reports (a case's, a variant's)."""
        name = self.string(value, path, f"{what} name")
        if not NAME_RE.match(name):
            raise self.fail(path, f"{what} name '{name}' may only use letters, digits, '_', "
                            "'.', '-'", "names become file names in reports")
        if name.startswith("."):  # ".", "..", ".bashrc": a parent reference or a hidden file
            raise self.fail(path, f"{what} name '{name}' must not start with '.'",
                            "names become file names in reports; set name = \"...\"")
        return name

    def target_overrides(self, raw: Any, path: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        """A ``targets_override`` table: target → its ``budget`` and ``tolerance``."""
        where = "[" + ".".join(p for p in path if not p.isdigit()) + "]"
        overrides: dict[str, dict[str, Any]] = {}
        for tgt, over in self.table(raw, path, where).items():
            p = (*path, tgt)
            if tgt not in self.targets:
                close = difflib.get_close_matches(tgt, self.targets, n=1)
                raise self.fail(p, f"unknown target '{tgt}' in {where}",
                                f"did you mean '{close[0]}'?" if close else "targets: " +
                                ", ".join(self.targets))
            over = self.table(over, p, f"{where[:-1]}.{tgt}]")
            self.keys(over, _OVERRIDE_KEYS, p, f"{where[:-1]}.{tgt}]")
            entry: dict[str, Any] = {}
            if "budget" in over:
                entry["budget"] = self.budget(over["budget"], (*p, "budget"))
            if "tolerance" in over:
                entry["tolerance"] = self.tolerance(over["tolerance"], (*p, "tolerance"))
            overrides[tgt] = entry
        return overrides




def _show(value: int) -> str:
    """An integer as a message shows it: its digits, or about how many it has (Python will
    not write out an integer of more than 4300 digits)."""
    if value.bit_length() <= 128:  # 39 digits at most
        return str(value)
    return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"


def _kind(value: Any) -> str:
    return {
        str: "a string", int: "an integer", float: "a number", bool: "a boolean",
        list: "an array", dict: "a table",
    }.get(type(value), type(value).__name__)
