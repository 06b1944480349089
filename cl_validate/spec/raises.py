"""Budgets and tolerances a pull request loosened: the case files as they are against the
same files on the base branch (``git show REF:path``, or a folder holding the base's files).

Loosened means, on some target of some run of the case (a variant's too): a ``[budget]``
number larger, a budget that applied no longer applying (its check newly disabled), a
tolerance larger (``rtol``, ``atol``, or float64's ``multiplier`` and ``floor``), or the
reference changed. Every one is named with the head file's line, so that a reviewer sees the
raise even when the diff that made it also changed the model (`cl-validate diff` lists them
first). A new case file has nothing to loosen; a tightened budget is not listed.

Parsing both files uses the case loader itself, so a budget inherited through
``[targets_override]`` or a variant compares as the run sees it. Never runs model code.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cl_validate.errors import CaseFileError, UsageError
from cl_validate.paths import display_path, repo_path
from cl_validate.spec.budget_keys import budget_keys
from cl_validate.spec.config import load_config
from cl_validate.spec.model import CaseSpec
from cl_validate.spec.validate import load_case


@dataclass(frozen=True)
class Loosened:
    """One budget or tolerance the head loosened, on the targets listed."""

    file: str  # the case file, relative to the repository
    line: int | None  # the head file's line that declares it (or its table)
    case: str  # the run's label
    targets: tuple[str, ...]
    what: str  # ``budget layout_transforms``, ``tolerance atol (output 0)``
    before: str
    after: str
    reason: str | None = None  # the budget's ``reason`` in the head file, when it has one

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    def describe(self) -> str:
        why = f" (reason: {self.reason})" if self.reason else ""
        return (f"{self.where}: {self.case} [{', '.join(self.targets)}] {self.what} "
                f"{self.before} → {self.after}{why}")


@dataclass(frozen=True)
class BaseCases:
    """Where the base branch's case files are: a git revision (`ref`) or a folder."""

    ref: str | None = None
    folder: Path | None = None

    @staticmethod
    def parse(text: str) -> BaseCases:
        """``--base-cases``: an existing folder, else a git revision (checked now: a typo
        must not read as "no case file changed")."""
        if Path(text).is_dir():
            return BaseCases(folder=Path(text))
        try:
            done = subprocess.run(["git", "rev-parse", "--verify", "--quiet",
                                   f"{text}^{{commit}}"], capture_output=True, text=True,
                                  check=False)
        except OSError as exc:
            raise UsageError(f"--base-cases {text}: cannot run git: {exc.strerror or exc}",
                             hint="pass a folder holding the base branch's case files") \
                from None
        if done.returncode != 0:
            raise UsageError(f"--base-cases {text}: neither a folder nor a git revision",
                             hint="fetch the base branch first (actions/checkout "
                             "fetch-depth: 0), e.g. --base-cases origin/main")
        return BaseCases(ref=text)

    def text(self, path: Path) -> str | None:
        """The base's version of the case file at `path` (None: the base has none)."""
        if self.folder is not None:
            for candidate in (self.folder / repo_path(path), self.folder / path.name):
                if candidate.is_file():
                    return candidate.read_text(encoding="utf-8", errors="replace")
            return None
        # ``REF:./name`` is relative to the folder git runs in: right in any worktree.
        done = subprocess.run(["git", "show", f"{self.ref}:./{path.name}"],
                              cwd=path.resolve().parent, capture_output=True, text=True,
                              check=False)
        return done.stdout if done.returncode == 0 else None


def loosened_in(paths: Iterable[Path], base: BaseCases) -> tuple[list[Loosened], list[str]]:
    """Everything loosened in the case files at `paths` against `base`, and a line per file
    that could not be compared (its base version does not load)."""
    out: list[Loosened] = []
    notes: list[str] = []
    for path in paths:
        text = base.text(path)
        if text is None:
            continue  # a new case file: nothing it could loosen
        try:
            head = load_case(path)
            before = _load_text(text, path)
        except CaseFileError as exc:
            notes.append(f"{display_path(path)}: not compared with the base: {exc}")
            continue
        out.extend(loosened(before, head))
    return out, notes


def _load_text(text: str, path: Path) -> CaseSpec:
    """The base's case file, loaded as if it stood where the head's does (same name)."""
    project = load_config(path.resolve().parent).targets
    with tempfile.TemporaryDirectory(prefix="cl_validate-base-") as tmp:
        copy = Path(tmp) / path.name
        copy.write_text(text, encoding="utf-8")
        case = load_case(copy, project)
    return case


def loosened(base: CaseSpec, head: CaseSpec) -> list[Loosened]:
    """What `head` loosened against `base`, per run (case and variants) and target; one
    entry for a change that applies alike on several targets."""
    found: dict[tuple[str, int | None, str, str, str], tuple[Loosened, list[str]]] = {}
    base_runs = {r.label: r for r in base.expand()}
    file = repo_path(head.path)
    for run in head.expand():
        was = base_runs.get(run.label)
        if was is None:
            continue
        for target in run.targets:
            if target not in was.targets:
                continue
            for item in _budgets(was, run, target, file) + _tolerances(was, run, target, file):
                key = (item.case, item.line, item.what, item.before, item.after)
                entry = found.setdefault(key, (item, []))
                entry[1].append(target)
    return [Loosened(**{**vars(item), "targets": tuple(targets)})
            for item, targets in found.values()]


def _budgets(base: CaseSpec, head: CaseSpec, target: str, file: str) -> list[Loosened]:
    b, h = base.budget_for(target), head.budget_for(target)
    out = []
    for key in budget_keys():
        was, now = b.get(key.name), h.get(key.name)
        if was is None or (now is not None and now <= was):
            continue
        line = h.line(key.name) or head.line_of("budget")
        out.append(Loosened(file, line, head.label, (target,), f"budget {key.name}",
                            f"{was:g}", "not judged" if now is None else f"{now:g}",
                            h.reason if h.reason != b.reason else None))
    return out


_KEYS = {False: ("rtol", "atol"), True: ("multiplier", "floor")}


def _tolerances(base: CaseSpec, head: CaseSpec, target: str, file: str) -> list[Loosened]:
    out = []
    for i in range(max(1, len(head.outputs))):
        (was, _), (now, line) = base.tolerance_for(target, i), head.tolerance_for(target, i)
        what = f"tolerance {{}}{f' (output {i})' if len(head.outputs) > 1 else ''}"
        if was.reference != now.reference:
            out.append(Loosened(file, line, head.label, (target,), what.format("reference"),
                                was.reference, now.reference))
            continue
        for key in _KEYS[now.float64]:
            a, b = getattr(was, key), getattr(now, key)
            if b > a:
                out.append(Loosened(file, _key_line(head, line, key), head.label, (target,),
                                    what.format(key), f"{a:g}", f"{b:g}"))
    return out


def _key_line(case: CaseSpec, table: int | None, key: str) -> int | None:
    """The line of `key` in the tolerance table at line `table` (its first declaration at or
    after the table's line), else the table's."""
    if table is None:
        return None
    lines = sorted(n for path, n in case.lines.items() if path and path[-1] == key
                   and n >= table)
    return lines[0] if lines else table

