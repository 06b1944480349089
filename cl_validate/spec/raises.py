"""Budgets and tolerances a pull request loosened: the case files as they are against the
same files on the base branch (``git show REF:path``, or a folder holding the base's files).

Loosened means, on some target of some run of the case (a variant's too): a ``[budget]``
number larger, a budget that applied no longer applying (its check newly disabled), a
tolerance larger (``rtol``, ``atol``, or float64's ``multiplier`` and ``floor``), or the
reference changed. Every one is named with the head file's line, so that a reviewer sees the
raise even when the diff that made it also changed the model (`cl-validate diff` lists them
first). A new case file has nothing to loosen; a tightened budget is not listed.

A head case file is compared with the base's file of the same case name, wherever the base
had it: a case file moved to another folder, or renamed keeping its case name (``name =
"..."``), is the same case, and a budget it loosened on the way is listed with where the base
had it. Only when the base has no case of that name is the file at the same path its base (a
case renamed in place: its runs are matched by variant, not by their labels).

Parsing both files uses the case loader itself, so a budget inherited through
``[targets_override]`` or a variant compares as the run sees it. Never runs model code.
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from cl_validate.errors import CaseFileError, UsageError
from cl_validate.paths import display_path, repo_path
from cl_validate.spec.budget_keys import budget_keys
from cl_validate.spec.config import load_config
from cl_validate.spec.lines import toml_text, tomllib
from cl_validate.spec.model import CaseSpec, Tolerance
from cl_validate.spec.validate import load_case

#: A base file larger than this is not read to learn its case's name (no case file is).
_MAX_BASE_FILE = 16 << 20


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
    was: str | None = None  # the base's file, when the case was elsewhere (moved, renamed)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    def describe(self) -> str:
        why = f" (reason: {self.reason})" if self.reason else ""
        moved = f" (in the base: {self.was})" if self.was else ""
        return (f"{self.where}: {self.case} [{', '.join(self.targets)}] {self.what} "
                f"{self.before} → {self.after}{why}{moved}")


@dataclass(frozen=True)
class BaseFile:
    """A case file of the base: where it was (relative to the repository, or to the folder
    of base files) and its text."""

    where: str
    text: str

    def case_name(self) -> str | None:
        """The name of the case it declares, as the loader gives it (``name``, else the
        file's stem); None when it is no case file (not TOML, no ``model``)."""
        try:
            data = tomllib.loads(toml_text(self.text.encode("utf-8"), self.where))
        except (CaseFileError, ValueError, RecursionError):
            return None
        if "model" not in data:
            return None
        name = data.get("name", PurePosixPath(self.where).stem)
        return name if isinstance(name, str) else None


@dataclass(frozen=True)
class BaseCases:
    """Where the base branch's case files are: a git revision (`ref`) or a folder."""

    ref: str | None = None
    folder: Path | None = None
    #: case name → the base's case files of that name, per repository (built when needed)
    _named: dict[Path, dict[str, list[BaseFile]]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

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
        found = self.at(path)
        return None if found is None else found.text

    def at(self, path: Path) -> BaseFile | None:
        """The base's file at the path of the head's case file `path` (None: none there)."""
        if self.folder is not None:
            for candidate in (self.folder / repo_path(path), self.folder / path.name):
                if candidate.is_file():
                    return BaseFile(repo_path(path),
                                    candidate.read_text(encoding="utf-8", errors="replace"))
            return None
        # ``REF:./name`` is relative to the folder git runs in: right in any worktree.
        done = subprocess.run(["git", "show", f"{self.ref}:./{path.name}"],
                              cwd=path.resolve().parent, capture_output=True, text=True,
                              check=False)
        return BaseFile(repo_path(path), done.stdout) if done.returncode == 0 else None

    def find(self, path: Path, name: str) -> BaseFile | None:
        """The base's version of the head's case `name`, declared in `path`: the base's
        case file of that name wherever it was (moved or renamed, it is the same case),
        the nearest to `path` if the base had several; else the file at the same path."""
        same = self.at(path)
        if same is not None and same.case_name() == name:
            return same
        named = self._by_name(path).get(name)
        if not named:
            return same
        head = PurePosixPath(repo_path(path)).parts
        return max(named, key=lambda f: _common(PurePosixPath(f.where).parts, head))

    def _by_name(self, path: Path) -> dict[str, list[BaseFile]]:
        """Every case file of the base by its case name (of the repository holding
        `path`, for a git revision)."""
        root = self.folder if self.folder is not None else _git_top(path)
        if root is None:
            return {}
        if root not in self._named:
            named: dict[str, list[BaseFile]] = {}
            files = _folder_files(root) if self.folder is not None else \
                _git_files(root, str(self.ref))
            for base_file in files:
                name = base_file.case_name()
                if name is not None:
                    named.setdefault(name, []).append(base_file)
            self._named[root] = named
        return self._named[root]


def _common(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    """How many leading parts two paths share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _folder_files(folder: Path) -> Iterator[BaseFile]:
    """The ``*.toml`` files under a folder of base files, in a stable order."""
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if not name.endswith(".toml") or name.startswith(".") or not p.is_file():
                continue
            try:
                if p.stat().st_size > _MAX_BASE_FILE:
                    continue
                text = p.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            yield BaseFile(p.relative_to(folder).as_posix(), text)


def _git_top(path: Path) -> Path | None:
    """The top of the git work tree holding the file `path` (None: not in one)."""
    return _git_top_of(path.resolve().parent)


@functools.lru_cache(maxsize=64)
def _git_top_of(folder: Path) -> Path | None:
    done = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=folder,
                          capture_output=True, text=True, check=False)
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None


def _git_files(top: Path, ref: str) -> list[BaseFile]:
    """The ``*.toml`` files of the tree at `ref` (paths relative to the top), read with one
    ``git cat-file --batch``."""
    done = subprocess.run(["git", "ls-tree", "-r", "-l", "-z", "--full-tree", ref],
                          cwd=top, capture_output=True, check=False)
    if done.returncode != 0:
        return []
    wanted: list[tuple[str, str]] = []  # (object, path)
    for entry in done.stdout.split(b"\0"):
        meta, _, raw_path = entry.partition(b"\t")
        fields = meta.split()
        if len(fields) != 4 or fields[1] != b"blob" or not raw_path.endswith(b".toml"):
            continue
        if not fields[3].isdigit() or int(fields[3]) > _MAX_BASE_FILE:
            continue
        wanted.append((fields[2].decode(), raw_path.decode("utf-8", errors="replace")))
    if not wanted:
        return []
    done = subprocess.run(["git", "cat-file", "--batch"], cwd=top, capture_output=True,
                          check=False, input="".join(f"{obj}\n" for obj, _ in wanted).encode())
    out: list[BaseFile] = []
    data, pos = done.stdout, 0
    for _, where in wanted:  # ``<object> blob <size>\n<content>\n`` each, in order
        header_end = data.find(b"\n", pos)
        if header_end < 0:
            break
        header = data[pos:header_end].split()
        if len(header) != 3 or not header[2].isdigit():
            break
        size = int(header[2])
        body = data[header_end + 1:header_end + 1 + size]
        pos = header_end + 1 + size + 1
        out.append(BaseFile(where, body.decode("utf-8", errors="replace")))
    return out


def loosened_in(paths: Iterable[Path], base: BaseCases) -> tuple[list[Loosened], list[str]]:
    """Everything loosened in the case files at `paths` against `base` (each compared with
    the base's case of the same name, else the base's file at the same path), and a line per
    file that could not be compared (it, or its base version, does not load)."""
    out: list[Loosened] = []
    notes: list[str] = []
    for path in paths:
        try:
            head = load_case(path)
        except CaseFileError as exc:
            if base.at(path) is not None:
                notes.append(f"{display_path(path)}: not compared with the base: {exc}")
            continue
        found = base.find(path, head.name)
        if found is None:
            continue  # a new case: nothing it could loosen
        was = found.where if found.where != repo_path(path) else None
        try:
            before = _load_text(found.text, path)
        except CaseFileError as exc:
            notes.append(f"{display_path(path)}: not compared with the base"
                         f"{f' ({was})' if was else ''}: {exc}")
            continue
        out.extend(replace(item, was=was) for item in loosened(before, head))
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
    # by variant, not by label: a case renamed is still the same case
    base_runs = {_variant(r): r for r in base.expand()}
    file = repo_path(head.path)
    for run in head.expand():
        was = base_runs.get(_variant(run))
        if was is None:
            continue
        for target in run.targets:
            if target not in was.targets:
                continue
            for item in (_budgets(was, run, target, file) + _tolerances(was, run, target, file)
                         + _case_keys(was, run, target, file)):
                key = (item.case, item.line, item.what, item.before, item.after)
                entry = found.setdefault(key, (item, []))
                entry[1].append(target)
    return [Loosened(**{**vars(item), "targets": tuple(targets)})
            for item, targets in found.values()]


def _variant(run: CaseSpec) -> str | None:
    return run.variant.name if run.variant is not None else None


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


def _in_use(tol: Tolerance) -> tuple[str, ...]:
    """The figures of `tol` its rule reads: ``steps`` alone for a quantized output; else the
    float64 rule's ``multiplier`` and ``floor``, or the float32 rule's ``rtol`` and ``atol``
    (every other numeric field of `Tolerance` is unused, and so cannot loosen anything)."""
    if tol.steps is not None:
        return ("steps",)
    return ("multiplier", "floor") if tol.float64 else ("rtol", "atol")


def _rule(tol: Tolerance) -> str:
    return "steps" if tol.steps is not None else f"{tol.reference} reference"


def _tolerances(base: CaseSpec, head: CaseSpec, target: str, file: str) -> list[Loosened]:
    """Every tolerance figure that grew, a changed rule (reference, or steps on or off), and
    an output compared as a set (``selection``) or with more items allowed to differ."""
    out = []
    for i in range(max(1, len(head.outputs))):
        (was, _), (now, line) = base.tolerance_for(target, i), head.tolerance_for(target, i)
        what = f"tolerance {{}}{f' (output {i})' if len(head.outputs) > 1 else ''}"
        if _rule(was) != _rule(now):
            key = "reference" if was.reference != now.reference else "steps"
            out.append(Loosened(file, _key_line(head, line, key), head.label, (target,),
                                what.format(key), _rule(was), _rule(now)))
            continue
        for key in _in_use(now):
            a, b = getattr(was, key), getattr(now, key)
            if b > a:
                out.append(Loosened(file, _key_line(head, line, key), head.label, (target,),
                                    what.format(key), f"{a:g}", f"{b:g}"))
        sel_was, sel_now = _selection(base, i), _selection(head, i)
        if sel_now is not None and (sel_was is None or sel_now[1] > sel_was[1]):
            spec = head.declared_output(i)
            out.append(Loosened(
                file, spec.line if spec is not None else line, head.label, (target,),
                what.format("selection"),
                "element by element" if sel_was is None else f"differing {sel_was[1]}",
                f"as a set, differing {sel_now[1]}"))
    return out


def _selection(case: CaseSpec, output: int) -> tuple[int, int] | None:
    spec = case.declared_output(output)
    return spec.selection if spec is not None else None


def _case_keys(base: CaseSpec, head: CaseSpec, target: str, file: str) -> list[Loosened]:
    """Case-level keys that decide whether numerics can fail at all: ``input_sensitivity``
    moved off ``fail`` (numerics that cannot tell a wrong kernel then pass), and any change
    of ``weights`` (other weights can make a failing case's error vanish; no direction)."""
    changed = [key for key, looser in (
        ("input_sensitivity", base.input_sensitivity == "fail" != head.input_sensitivity),
        ("weights", base.weights != head.weights)) if looser]
    return [Loosened(file, head.line_of(key) or 1, head.label, (target,), key,
                     str(getattr(base, key)), str(getattr(head, key))) for key in changed]


def _key_line(case: CaseSpec, table: int | None, key: str) -> int | None:
    """The line of `key` in the tolerance table at line `table` (its first declaration at or
    after the table's line), else the table's."""
    if table is None:
        return None
    lines = sorted(n for path, n in case.lines.items() if path and path[-1] == key
                   and n >= table)
    return lines[0] if lines else table

