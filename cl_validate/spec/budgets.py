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
- a ``[[variants]]`` entry gets a ``budget`` of its own only where its counts differ from
  what it inherits (one value for every target, else per target in its
  ``targets_override``); the ones it declares are updated in place;
- a budget the case does not declare (``kernels`` is optional) is not added;
- a budget is never raised unless ``allow_increase``, and then with its ``reason`` recorded.

A comment that explains a number is wrong once tighten changes the number: `flag_comments`
marks each comment next to a changed line (its own trailing comment, else the comment lines
right above it) with ``[tighten DATE: was `kernels = 58`: check this comment]``, for the
reviewer of the change to rewrite or drop (with the marker): the value the comment was
written for stays readable in it, and a later tighten leaves a marked comment alone.
"""

from __future__ import annotations

import datetime
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit

from cl_validate.spec.budget_keys import budget_keys
from cl_validate.spec.casefile import load_text_as_case, set_section, tidy
from cl_validate.spec.model import CaseSpec, Variant

#: Where a value is written: (variant index or None for the case, target or None for all).
Where = tuple[int | None, str | None]
#: measured counts: variant name (None: the case's own shapes) → target → key → count
MeasuredCounts = dict[str | None, dict[str, dict[str, int]]]


@dataclass
class BudgetPlan:
    """What tighten changes in one case file: table → key → value, and what it refused."""

    case: CaseSpec
    writes: dict[Where, dict[str, Any]] = field(default_factory=dict)
    effective: list[str] = field(default_factory=list)  # "llvm  kernels 58 -> 57 (...)"
    refused: list[str] = field(default_factory=list)
    #: the budget every run × target must have after the rewrite: (variant, target) → values
    expected: dict[tuple[str | None, str], dict[str, int | None]] = field(default_factory=dict)

    def set(self, where: Where, key: str, value: Any) -> None:
        self.writes.setdefault(where, {})[key] = value


def _int(value: int | float | None) -> int | None:
    """An exact budget as declared (counts and bytes are integers)."""
    return None if value is None else int(value)


def _has_override(case: CaseSpec, target: str, key: str) -> bool:
    return key in (case.overrides.get(target, {}).get("budget") or {})


def _above(new: int | None, old: int | None) -> bool:
    return new is not None and (old is None or new > old)


def _desired(p: BudgetPlan, run: CaseSpec, measured: dict[str, dict[str, int]], key: str, *,
             allow_increase: bool, reason: str) -> dict[str, int | None]:
    """Target → the budget `run` should have: the measured count, unless that would raise
    it without ``allow_increase`` (refused: it stays), or nothing was measured."""
    new: dict[str, int | None] = {}
    who = f"[{run.variant.name}] " if run.variant else ""
    for t in run.targets:
        if t in measured and key not in measured[t]:
            continue  # the key does not apply there (fallback_kernels on llvm): left alone
        cur = _int(run.budget_for(t).get(key))
        m = measured.get(t, {}).get(key)
        new[t] = cur
        if cur is None or m is None or m == cur:
            continue
        if m > cur and not allow_increase:
            p.refused.append(f"{who}{t}: {key} {m} > budget {cur} — not raised (pass "
                             "--allow-increase --reason TEXT to raise it)")
            continue
        new[t] = m
        how = f"raised: {reason}" if m > cur else "lowered"
        p.effective.append(f"{who}{t:<5} {key} {cur} -> {m} ({how})")
    return new


def plan(case: CaseSpec, runs: MeasuredCounts, *, allow_increase: bool, reason: str) -> BudgetPlan:
    """Budgets after tightening `case` to the counts measured in `runs` (variant → target →
    key → count; None: the case's own shapes); see the module docstring for where each value
    goes."""
    p = BudgetPlan(case)
    base_new: dict[str, dict[str, int | None]] = {}
    keys = [k.name for k in budget_keys() if k.exact]  # a ceiling (a time) is never written
    for key in keys:
        base_new[key] = _plan_case(p, case, runs.get(None, {}), key,
                                   allow_increase=allow_increase, reason=reason)
    for run in case.expand()[1:]:
        assert run.variant is not None
        for key in keys:
            _plan_variant(p, run, run.variant, runs.get(run.variant.name, {}), key,
                          base_new[key], allow_increase=allow_increase, reason=reason)
    return p


def _plan_case(p: BudgetPlan, case: CaseSpec, measured: dict[str, dict[str, int]], key: str, *,
               allow_increase: bool, reason: str) -> dict[str, int | None]:
    """[budget] and [targets_override.<t>] for the case's own shapes; its new budgets (for
    the targets the key applies on: the primary is the first of those)."""
    case_old = _int(case.budget.get(key))
    new = _desired(p, case, measured, key, allow_increase=allow_increase, reason=reason)
    primary = next((t for t in case.targets if t in new), case.targets[0])
    new_case = new[primary] if primary in measured and primary in new and not _has_override(
        case, primary, key) else case_old
    if new_case != case_old:
        p.set((None, None), key, new_case)
        if _above(new_case, case_old):
            p.set((None, None), "reason", reason)
    for t in new:
        cur = _int(case.budget_for(t).get(key))
        if not _has_override(case, t, key) and new[t] == new_case:
            continue  # inherits the case-level value, which is right for it
        if new[t] is None or (new[t] == cur and _has_override(case, t, key)):
            continue
        p.set((None, t), key, new[t])
        if _above(new[t], cur):
            p.set((None, t), "reason", reason)
        if new[t] == cur:
            why = "not measured" if t not in measured else "measured"
            p.effective.append(f"{t:<5} {key} stays {cur} ({why}; differs from "
                               f"{primary}: pinned in [targets_override.{t}])")
    for t in new:
        p.expected.setdefault((None, t), {})[key] = new[t]
    return new


def _plan_variant(p: BudgetPlan, run: CaseSpec, v: Variant, measured: dict[str, dict[str, int]],
                  key: str, inherited: dict[str, int | None], *, allow_increase: bool,
                  reason: str) -> None:
    """A variant's own budget: kept where it declares one, added only where its counts
    differ from what it inherits from the case (after the case's own rewrite)."""
    new = _desired(p, run, measured, key, allow_increase=allow_increase, reason=reason)
    per_target = {t for t in new if key in (v.overrides.get(t, {}).get("budget") or {})}
    rest = [t for t in new if t not in per_target]
    if key in v.budget and rest:  # its own budget for every target: keep it in step
        value = new[rest[0]]
        if value != v.budget[key]:
            p.set((v.index, None), key, value)
            if _above(value, v.budget[key]):
                p.set((v.index, None), "reason", reason)
        gets: dict[str, int | None] = dict.fromkeys(rest, value)
    else:  # inherits: a budget of its own only where it differs
        differ = [t for t in rest if new[t] != inherited[t] and new[t] is not None]
        if differ and len(differ) == len(rest) and len({new[t] for t in differ}) == 1:
            p.set((v.index, None), key, new[differ[0]])
            if _above(new[differ[0]], _int(run.budget_for(differ[0]).get(key))):
                p.set((v.index, None), "reason", reason)
            gets = dict.fromkeys(rest, new[differ[0]])
        else:
            for t in differ:
                per_target.add(t)
            gets = {t: inherited[t] for t in rest if t not in differ}
    for t in per_target:
        if new[t] != (v.overrides.get(t, {}).get("budget") or {}).get(key):
            p.set((v.index, t), key, new[t])
            if _above(new[t], _int(run.budget_for(t).get(key))):
                p.set((v.index, t), "reason", reason)
        gets[t] = new[t]
    for t in new:
        p.expected.setdefault((v.name, t), {})[key] = gets[t]


def rewrite(text: str, p: BudgetPlan) -> str:
    """The case file's text with `p` applied; comments and formatting elsewhere untouched.
    A budget the table declares under an old name (`BudgetKey.aliases`) is updated there."""
    doc = tomlkit.parse(text)
    for (variant, target), values in p.writes.items():
        literals = {k: f"{v:_}" if k.endswith("_bytes") and isinstance(v, int) else
                    tomlkit.item(v).as_string() for k, v in values.items()}
        declared = _budget_table(doc, variant, target)
        literals = {_spelling(k, declared): v for k, v in literals.items()}
        set_section(doc, "budget", target, literals, variant=variant)
    return tidy(text, tomlkit.dumps(doc))


def _budget_table(doc: Any, variant: int | None, target: str | None) -> Any:
    """The budget table a write goes to, if it exists (None: it does not yet)."""
    try:
        node: Any = doc if variant is None else doc["variants"][variant]
        if target is not None:
            node = node["targets_override"][target]
        return node.get("budget")
    except (KeyError, IndexError, TypeError):
        return None


def _spelling(key: str, declared: Any) -> str:
    """`key` as the table spells it: an old name it declares the budget under, else the
    key itself."""
    if declared is None or key in declared:
        return key
    aliases = {k.name: k.aliases for k in budget_keys()}.get(key, ())
    return next((a for a in aliases if a in declared), key)


def verify(path: Path, data: str | bytes, p: BudgetPlan) -> None:
    """A rewrite that would declare other budgets than planned is a bug: the file is left
    alone (internal error, exit 3). `data`: the file's new text, or its bytes as written."""
    runs = {run.variant.name if run.variant else None: run
            for run in load_text_as_case(path, data).expand()}
    for (variant, t), want in p.expected.items():
        got = runs[variant].budget_for(t)
        for key, value in want.items():
            if got.get(key) != value:
                where = f"[{variant}] " if variant else ""
                raise AssertionError(f"rewriting {path} would give {where}{t} {key} "
                                     f"{got.get(key)}, not {value}")


#: The marker `flag_comments` leaves (until a person removes it with the comment checked).
_MARK = re.compile(r"\s*\[tighten \d{4}-\d{2}-\d{2}: was `[^`]*`: check this comment\]")


def _code_and_comment(line: str) -> tuple[str, str | None]:
    """`line` split at its trailing comment (a ``#`` outside a string), stripped."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return line[:i].rstrip(), line[i:]
    return line.rstrip(), None


def _key(line: str) -> str | None:
    """The key a ``key = value`` line sets, None for any other line."""
    code, _ = _code_and_comment(line)
    key, eq, _ = code.partition("=")
    return key.strip() or None if eq and not code.lstrip().startswith("[") else None


def flag_comments(old: str, new: str, day: datetime.date | None = None) -> str:
    """`new` (tighten's rewrite of `old`) with the comment next to each changed line marked:
    its trailing comment, else the block of comment lines right above it. Lines tighten
    added (a new override) have no comment of the user's to flag."""
    stamp = (day or datetime.date.today()).isoformat()
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    out = list(b)
    inserts: list[tuple[int, str]] = []
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in ops:
        if tag != "replace":
            continue
        # a changed line is paired with the old line of the same key (`kernels = ...`,
        # `budget = {...}`): a `reason = ...` added beside it is new, not a change
        olds = {_key(a[i]): a[i] for i in range(i1, i2) if _key(a[i])}
        for j in range(j1, j2):
            if _key(b[j]) not in olds:
                continue
            was, _ = _code_and_comment(olds[_key(b[j])])
            _, comment = _code_and_comment(b[j].rstrip("\n"))
            mark = f"[tighten {stamp}: was `{was.strip()}`: check this comment]"
            if comment is not None:
                if not _MARK.search(comment):  # else flagged already, with the older value
                    out[j] = f"{b[j].rstrip()} {mark}\n"
                continue
            k = j
            while k > 0 and b[k - 1].lstrip().startswith("#"):
                k -= 1
            if k < j:  # a comment block right above the line
                indent = b[j][: len(b[j]) - len(b[j].lstrip())]
                inserts.append((j, f"{indent}# ^ {mark}\n"))
    for j, line in sorted(inserts, reverse=True):
        if not _MARK.search(out[j - 1]):  # else flagged already, with the older value
            out.insert(j, line)
    return "".join(out)
