"""Where tightened budgets go in a case file, and the rewrite that puts them there.

``cl-validate budget tighten`` measures each case and calls `plan` with the counts; the plan
says which table gets which value (policy below), `rewrite` applies it with comments and
formatting kept, and `verify` re-reads the rewritten text to prove it declares exactly the
planned budgets before anything is written:

- the case-level ``[budget]`` holds the value measured on the case's first target (its
  *primary* target, ``targets[0]``, default llvm);
- ``[targets_override.<t>] budget`` entries that exist are updated in place; a new one is
  added only where a target's value differs from the case-level one — including a target not
  measured in this run (``--target``) whose budget would otherwise change with the case-level
  value: it is pinned at its old value;
- a budget the case does not declare (``kernels`` is optional) is not added;
- a budget is never raised unless ``allow_increase``, and then with its ``reason`` recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit

from cl_validate.spec.casefile import load_text_as_case, set_section, tidy
from cl_validate.spec.model import CaseSpec

KEYS = ("layout_transforms", "kernels")


@dataclass
class Plan:
    """What tighten changes in one case file: table → key → value, and what it refused."""

    case: CaseSpec
    writes: dict[str | None, dict[str, Any]] = field(default_factory=dict)  # None: [budget]
    effective: list[str] = field(default_factory=list)  # "llvm  kernels 58 -> 57 (...)"
    refused: list[str] = field(default_factory=list)
    expected: dict[str, dict[str, int | None]] = field(default_factory=dict)  # target → budget

    def set(self, table: str | None, key: str, value: Any) -> None:
        self.writes.setdefault(table, {})[key] = value


def _has_override(case: CaseSpec, target: str, key: str) -> bool:
    return key in (case.overrides.get(target, {}).get("budget") or {})


def _above(new: int | None, old: int | None) -> bool:
    return new is not None and (old is None or new > old)


def plan(case: CaseSpec, measured: dict[str, dict[str, int]], *, allow_increase: bool,
         reason: str) -> Plan:
    """Budgets after tightening `case` to `measured` (target → key → count); see the module
    docstring for where each value goes."""
    p = Plan(case)
    primary = case.targets[0]
    for key in KEYS:
        case_old: int | None = getattr(case.budget, key)
        new: dict[str, int | None] = {}
        for t in case.targets:
            cur: int | None = getattr(case.budget_for(t), key)
            m = measured.get(t, {}).get(key)
            new[t] = cur
            if cur is None or m is None or m == cur:
                continue
            if m > cur and not allow_increase:
                p.refused.append(f"{t}: {key} {m} > budget {cur} — not raised (pass "
                                 "--allow-increase --reason TEXT to raise it)")
                continue
            new[t] = m
            how = f"raised: {reason}" if m > cur else "lowered"
            p.effective.append(f"{t:<5} {key} {cur} -> {m} ({how})")
        new_case = new[primary] if primary in measured and not _has_override(
            case, primary, key) else case_old
        if new_case != case_old:
            p.set(None, key, new_case)
            if _above(new_case, case_old):
                p.set(None, "reason", reason)
        for t in case.targets:
            cur = getattr(case.budget_for(t), key)
            if not _has_override(case, t, key) and new[t] == new_case:
                continue  # inherits the case-level value, which is right for it
            if new[t] is None or (new[t] == cur and _has_override(case, t, key)):
                continue
            p.set(t, key, new[t])
            if _above(new[t], cur):
                p.set(t, "reason", reason)
            if new[t] == cur:
                why = "not measured" if t not in measured else "measured"
                p.effective.append(f"{t:<5} {key} stays {cur} ({why}; differs from "
                                   f"{primary}: pinned in [targets_override.{t}])")
        for t in case.targets:
            p.expected.setdefault(t, {})[key] = new[t]
    return p


def rewrite(text: str, p: Plan) -> str:
    """The case file's text with `p` applied; comments and formatting elsewhere untouched."""
    doc = tomlkit.parse(text)
    for table, values in p.writes.items():
        literals = {k: tomlkit.item(v).as_string() for k, v in values.items()}
        set_section(doc, "budget", table, literals)
    return tidy(text, tomlkit.dumps(doc))


def verify(path: Path, text: str, p: Plan) -> None:
    """A rewrite that would declare other budgets than planned is a bug: the file is left
    alone (internal error, exit 3)."""
    case = load_text_as_case(path, text)
    for t, want in p.expected.items():
        got = case.budget_for(t)
        for key, value in want.items():
            if getattr(got, key) != value:
                raise AssertionError(f"rewriting {path} would give {t} {key} "
                                     f"{getattr(got, key)}, not {value}")
