"""What a pull request changed, per case × target: the figures of the base branch's report
against the pull request's (`cl_validate.report.figures`; the figures each check tracks), only
what changed, each change marked better or worse, the runtime transforms it added or removed
named by their module — and, first, every budget or tolerance the pull request loosened
(`cl_validate.spec.raises`).

`render` writes it as Markdown for GitHub within a size limit: a job summary holds 1 MiB, a
pull-request comment 65,536 characters; rows that do not fit are counted in a closing note.
Every name in it comes from a report a pull request can write anything into, so every one is
escaped (`cl_validate.report.escape`): a ``|`` in a testcase name cannot split a row, and
``<img>`` or ``@name`` do not render.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cl_validate.checks.layout_transforms import COUNT_PROP as TRANSFORMS
from cl_validate.checks.registry import Figure, tracked_figures
from cl_validate.report.escape import md_code, md_text
from cl_validate.report.figures import Run
from cl_validate.spec.raises import Loosened

#: GitHub's limits: a pull-request comment's body (characters) and a step summary (bytes).
COMMENT_LIMIT = 65_536
SUMMARY_LIMIT = 1_000_000
WORSE, BETTER = "🔴", "🟢"
_BAD = ("failed", "error")


@dataclass(frozen=True)
class Change:
    """One figure of one case × target, before and after."""

    figure: Figure
    before: float | None
    after: float | None

    @property
    def mark(self) -> str:
        """🔴 worse, 🟢 better (every figure is better smaller), "" when one side has none."""
        if self.before is None or self.after is None:
            return ""
        return WORSE if self.after > self.before else BETTER

    def text(self) -> str:
        f = self.figure
        return f"{self.mark} {f.label} {f.text(self.before)} → {f.text(self.after)}".strip()


@dataclass
class Delta:
    """What changed in one case × target between the base and the head report."""

    case: str
    target: str
    file: str
    changes: list[Change] = field(default_factory=list)
    added: Counter[str] = field(default_factory=Counter)  # new transforms' attributions
    removed: Counter[str] = field(default_factory=Counter)
    verdicts: list[tuple[str, str, str]] = field(default_factory=list)  # check, before, after
    new: bool = False  # not in the base report
    gone: bool = False  # not in the head report

    @property
    def worse(self) -> bool:
        return (any(c.mark == WORSE for c in self.changes) or bool(self.added)
                or any(after in _BAD for _, _, after in self.verdicts))

    def __bool__(self) -> bool:
        return bool(self.changes or self.added or self.removed or self.verdicts or self.new
                    or self.gone)


def compare(base: Mapping[tuple[str, str], Run],
            head: Mapping[tuple[str, str], Run]) -> list[Delta]:
    """A `Delta` per case × target that changed: the head's in its order, then the runs the
    head no longer has."""
    out: list[Delta] = []
    for key, now in head.items():
        was = base.get(key)
        d = Delta(now.case, now.target, now.file, new=was is None)
        if was is not None:
            # a figure one report lacks (an older version's) is no change
            for f in tracked_figures():
                a, b = was.value(f.prop), now.value(f.prop)
                if a is not None and b is not None and f.changed(a, b):
                    d.changes.append(Change(f, a, b))
            if _attributed(was) and _attributed(now):
                before, after = Counter(was.transforms()), Counter(now.transforms())
                d.added, d.removed = after - before, before - after
            d.verdicts = [(check, was.status.get(check, "–"), status)
                          for check, status in now.status.items()
                          if status != was.status.get(check, status)
                          and (status in _BAD or was.status.get(check) in _BAD)]
        if d:
            out.append(d)
    out.extend(Delta(was.case, was.target, was.file, gone=True)
               for key, was in base.items() if key not in head)
    return out


def _attributed(run: Run) -> bool:
    """Whether `run`'s report names every runtime transform's attribution (a report of a
    version before they were written has the count only)."""
    return len(run.transforms()) == (run.value(TRANSFORMS) or 0)


def _row(d: Delta) -> str:
    if d.new:
        what = "new case × target (not in the base report)"
    elif d.gone:
        what = "not in this report any more"
    else:
        what = "<br>".join([*(md_text(c.text()) for c in d.changes),
                            *(f"{md_text(check)}: {md_text(before)} → **{md_text(after)}**"
                              for check, before, after in d.verdicts)])
    transforms = "<br>".join([*(f"{WORSE} +{n} {md_text(a)}" for a, n in d.added.most_common()),
                              *(f"{BETTER} −{n} {md_text(a)}" for a, n in
                                d.removed.most_common())]) or "–"
    return f"| {md_code(d.case)} | {md_text(d.target)} | {what} | {transforms} |"


def _raise_lines(raises: Sequence[Loosened], acknowledged: bool) -> list[str]:
    if not raises:
        return []
    state = ("acknowledged (`--allow-budget-increase`)" if acknowledged else
             "a reviewer should confirm each one")
    out = [f"### ⚠️ Budgets and tolerances this pull request loosened ({len(raises)}): "
           f"{state}", ""]
    for r in raises:
        why = f" — reason: {md_text(r.reason)}" if r.reason else ""
        moved = f" (in the base: {md_code(r.was, table=False)})" if r.was else ""
        out.append(f"- {md_code(r.where, table=False)} {md_code(r.case, table=False)} "
                   f"[{md_text(', '.join(r.targets))}]: {md_text(r.what)} {md_text(r.before)} "
                   f"→ **{md_text(r.after)}**{why}{moved}")
    return [*out, ""]


def render(deltas: Sequence[Delta], raises: Sequence[Loosened], *, runs: int,
           base: str = "the base branch", acknowledged: bool = False,
           notes: Sequence[str] = (), limit: int | None = None,
           size: Callable[[str], int] = len) -> str:
    """The Markdown: loosened budgets first, then a row per changed case × target, those
    changed for the worse first. With `limit` (as `size` measures: characters for a comment,
    UTF-8 bytes for a summary), rows that do not fit are left out and counted."""
    deltas = sorted(deltas, key=lambda d: not d.worse)
    worse = sum(1 for d in deltas if d.worse)
    head = (f"## cl_validate: what this pull request changed ({len(deltas)} of {runs} "
            f"case × target runs changed, {worse} for the worse)")
    out = [head, "", *_raise_lines(raises, acknowledged)]
    out += [f"> {md_text(n)}" for n in notes]
    if not deltas:
        out.append(f"No figure changed against {md_text(base)}.")
        return "\n".join(out) + "\n"
    out += [f"Compared with {md_text(base)}; {WORSE} worse · {BETTER} better (every figure is "
            "better smaller; compile time and memory only past their noise).", "",
            "| case | target | what changed (before → after) | runtime transforms added / "
            "removed (why, from which module) |", "| --- | --- | --- | --- |"]
    text = "\n".join(out) + "\n"
    note = ("\n_{n} more changed case × target runs left out to stay under GitHub's size "
            "limit: `cl-validate diff BASE HEAD` prints them all._\n")
    for i, d in enumerate(deltas):
        row = _row(d) + "\n"
        if limit is not None and size(text + row + note.format(n=len(deltas))) > limit:
            return text + note.format(n=len(deltas) - i)
        text += row
    return text
