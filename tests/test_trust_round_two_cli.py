"""Case files and the commands around runs tell the truth, round two (issue #36, items 6, 7, 9).

Each test reproduces one probe of the issue as a careless or hostile pull request would write
it, through the real CLI as a user runs it, and states what must hold instead: a budget
loosened in a case file that was moved or renamed is still listed by ``diff``; an integer out
of range anywhere in a case file is one line ``file:line: ... (hint: ...)`` and exit 2, like
any other mistake in a case file; ``budget tighten`` on a case file it may not write names
the file in one line, exits 2 and leaves the file as it was. The numbers in the test names
are the issue's items.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from cl_validate.errors import ExitCode
from tests.conftest import DATA, git, run_cli, tiny_case

HUGE = "99999999999999999999999"


def _one_error_line(err: str, where: str) -> str:
    """The single line an error must be: ``cl-validate: error: WHERE... (hint: ...)``."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    (line,) = lines
    assert line.startswith(f"cl-validate: error: {where}"), line
    assert "(hint: " in line and "Traceback" not in err, line
    return line


# --------------------------------------------------------------------------------------------
# 6. A budget loosened in a case file that was moved or renamed
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def moved(tmp_path_factory: pytest.TempPathFactory):
    """A repository whose base commit has ``cases/tiny.toml`` and ``cases/first.toml`` (each
    at budget 2), and the pull request in the working tree: ``tiny.toml`` moved to
    ``cases/moved/`` at budget 3, ``first.toml`` renamed to ``second.toml`` (keeping its case
    name with ``name = "first"``) at budget 4; the base's report and the head's."""
    repo = tmp_path_factory.mktemp("moved")
    shutil.copy(DATA / "tiny_models.py", repo)
    cases = repo / "cases"
    cases.mkdir()
    (cases / "tiny.toml").write_text(tiny_case(2))
    (cases / "first.toml").write_text(tiny_case(2))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(repo)
        mp.syspath_prepend(str(repo))
        base = run_cli(["run", "cases", "--no-isolation", "--junit", "base.xml"])
        assert base.code == ExitCode.OK, base.out + base.err
        (cases / "moved").mkdir()
        git(repo, "mv", "cases/tiny.toml", "cases/moved/tiny.toml")
        (cases / "moved" / "tiny.toml").write_text(tiny_case(3))
        git(repo, "mv", "cases/first.toml", "cases/second.toml")
        (cases / "second.toml").write_text(tiny_case(4, extra='name = "first"'))
        head = run_cli(["run", "cases", "--no-isolation", "--junit", "head.xml"])
        assert head.code == ExitCode.CHECK_FAILED, head.out + head.err  # budgets now stale
        yield repo


@pytest.mark.compile
@pytest.mark.parametrize("base_cases", ["git", "folder"])
def test_6_a_budget_loosened_through_a_move_or_a_rename_is_listed_and_fails(moved, base_cases):
    """``diff --base-cases REF --fail-on-budget-increase`` (or a folder of the base's case
    files): a case file moved to another folder, and one renamed that keeps its case name,
    each with its budget raised, are matched with the base's file of the same case name and
    listed with the head file's line and where the base had it; the flag fails. Before: the
    base's case files were looked up at the head file's path only, found nothing there, took
    both for new case files — nothing was listed and the flag passed (exit 0)."""
    ref = "HEAD"
    if base_cases == "folder":  # the base branch's checkout, as a folder
        folder = moved / "base_checkout"
        if not folder.exists():
            (folder / "cases").mkdir(parents=True)
            (folder / "cases" / "tiny.toml").write_text(tiny_case(2))
            (folder / "cases" / "first.toml").write_text(tiny_case(2))
        ref = str(folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(moved)
        r = run_cli(["diff", "base.xml", "head.xml", "--base-cases", ref,
                     "--fail-on-budget-increase"])
    assert r.code == ExitCode.CHECK_FAILED, r.out + r.err
    assert ("- `cases/moved/tiny.toml:12` `tiny` [llvm]: budget layout_transforms 2 → **3** "
            "(in the base: `cases/tiny.toml`)") in r.out
    assert ("- `cases/second.toml:13` `first` [llvm]: budget layout_transforms 2 → **4** "
            "(in the base: `cases/first.toml`)") in r.out
    assert ("cl-validate: error: cases/moved/tiny.toml:12: tiny [llvm] budget "
            "layout_transforms 2 → 3 (in the base: cases/tiny.toml)") in r.err
    assert "cl-validate: error: 2 budget(s) or tolerance(s) loosened" in r.err
    # the reports' rows match by case name too: the same case, not one new and one gone
    assert "not in this report any more" not in r.out and "new case × target" not in r.out


def test_6_a_case_renamed_in_place_is_compared_by_its_path(tmp_path, monkeypatch):
    """The fallback: a case file at the same path whose case was renamed (``name = ...``
    added) and whose budget was raised is compared with the base's file at that path, the
    case itself and its variants by their own names. Before: the runs were matched by their
    labels, which all changed with the name: nothing was listed."""
    from cl_validate.spec.raises import BaseCases, loosened_in

    variant = '\n[[variants]]\nname = "b2"\nshapes = { x = [2, 3, 16, 16] }\n'
    base = tmp_path / "base" / "cases"
    base.mkdir(parents=True)
    (base / "tiny.toml").write_text(tiny_case(2) + variant + "budget = { kernels = 4 }\n")
    head = tmp_path / "cases" / "tiny.toml"
    head.parent.mkdir()
    head.write_text(tiny_case(3, extra='name = "renamed"') + variant
                    + "budget = { kernels = 5 }\n")
    (tmp_path / ".git").mkdir()  # the repository's root, for the paths reports use
    monkeypatch.chdir(tmp_path)
    found, notes = loosened_in([head], BaseCases.parse(str(tmp_path / "base")))
    assert notes == []
    assert sorted(r.describe() for r in found) == [
        "cases/tiny.toml:13: renamed [llvm] budget layout_transforms 2 → 3",
        "cases/tiny.toml:13: renamed[b2] [llvm] budget layout_transforms 2 → 3",  # inherited
        "cases/tiny.toml:22: renamed[b2] [llvm] budget kernels 4 → 5"]


# --------------------------------------------------------------------------------------------
# 7. Integers out of range in a case file
# --------------------------------------------------------------------------------------------
_SHAPE = "shape = [1, 3, 16, 16]"
OUT_OF_RANGE = {
    "seed": tiny_case(extra=f"seed = {HUGE}"),
    "seed_5000_digits": tiny_case(extra="seed = " + "9" * 5000),
    "seeds": tiny_case(extra=f"seeds = {HUGE}"),
    "timeout": tiny_case(extra=f"timeout = {HUGE}"),
    "max_memory_mb": tiny_case(extra=f"max_memory_mb = {HUGE}"),
    "kernels": tiny_case(kernels=int(HUGE)),
    "layout_transforms": tiny_case(int(HUGE)),
    "transform_bytes": tiny_case(f"2\nlayout_transform_bytes = {HUGE}"),
    "shape": tiny_case().replace(_SHAPE, f"shape = [{HUGE}, 3, 16, 16]"),
    "dynamic": tiny_case(extra=f"[dynamic]\nbatch = {{ min = 1, max = {HUGE} }}").replace(
        _SHAPE, 'shape = ["batch", 3, 16, 16]'),
    "override_budget": tiny_case() + ("\n[targets_override.llvm]\n"
                                      f"budget = {{ kernels = {HUGE} }}\n"),
    "variant_budget": tiny_case() + ('\n[[variants]]\nname = "b2"\nshapes = { x = [2, 3, 16, 16] }'
                                     f"\nbudget = {{ layout_transforms = {HUGE} }}\n"),
    "target_attribute": tiny_case(targets=None, extra='[targets.arm]\ntarget = { kind = "llvm", '
                                  f'num-cores = {HUGE} }}'),
    "tolerance": tiny_case().replace("rtol = 0.0001", "rtol = 1" + "0" * 400),
}


def _huge_line(text: str) -> int:
    """The line of the number out of range (the only run of 20 or more digits)."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if "0" * 20 in line
                or "9" * 20 in line)


@pytest.mark.parametrize("field", OUT_OF_RANGE)
def test_7_an_integer_out_of_range_is_one_line_at_its_line_and_exit_2(field, tmp_path,
                                                                      monkeypatch):
    """Any integer of a case file (a seed, a budget, a size, a target attribute, a
    tolerance written as an integer...) too large for what takes it is a case-file error: one
    line naming the file and the number's line with a hint, exit 2, found when the file is
    read. Before: the seed and budgets passed validation and the run died serializing them
    (OverflowError, exit 3), a 5000-digit one died in the TOML parser (ValueError, exit 3),
    a tolerance as a 400-digit integer in the validator (OverflowError, exit 3)."""
    text = OUT_OF_RANGE[field]
    (tmp_path / "case.toml").write_text(text)
    monkeypatch.chdir(tmp_path)
    r = run_cli(["list", "case.toml"])
    assert r.code == ExitCode.USAGE_ERROR, r.out + r.err
    _one_error_line(r.err, f"case.toml:{_huge_line(text)}: ")
    assert r.out == ""


def test_7_a_run_with_such_a_case_file_stops_as_for_any_bad_case_file(tmp_path, monkeypatch):
    """In a run of several case files, the one with an out-of-range seed stops the run before
    anything is compiled, exactly as a case file with an unknown key does: exit 2, one line,
    no report (none of an earlier run left standing). Before: the run started, the seed broke
    the parent (exit 3) and every case after it was skipped."""
    monkeypatch.chdir(tmp_path)
    outcomes = []
    for bad, line in ((f"seed = {HUGE}", "seed must be"), ("sede = 1", "unknown key 'sede'")):
        folder = tmp_path / ("seed" if "seed" in bad else "key")
        folder.mkdir()
        shutil.copy(DATA / "tiny_models.py", folder)
        (folder / "a_good.toml").write_text(tiny_case())
        (folder / "b_bad.toml").write_text(tiny_case(extra=bad))
        (folder / "c_good.toml").write_text(tiny_case())
        junit = tmp_path / f"{folder.name}.xml"
        junit.write_text("<testsuites/>")  # an earlier run's report
        r = run_cli(["run", folder.name, "--junit", junit.name])
        msg = _one_error_line(r.err, f"{folder.name}/b_bad.toml:3: ")
        assert line in msg and r.out == ""
        outcomes.append((r.code, junit.exists()))
    assert outcomes == [(ExitCode.USAGE_ERROR, False)] * 2


# --------------------------------------------------------------------------------------------
# 9. budget tighten on a case file it may not write
# --------------------------------------------------------------------------------------------
def _two_loose_cases(root: Path) -> tuple[Path, Path]:
    shutil.copy(DATA / "tiny_models.py", root)
    a, b = root / "a_locked.toml", root / "b_open.toml"
    a.write_text(tiny_case(3, comments=True))
    b.write_text(tiny_case(3))
    return a, b


def _immutable(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``chattr +i`` where this machine allows it, else what the kernel then answers to the
    rename over the file: EPERM."""
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False) \
        if shutil.which("chattr") else None
    if done is not None and done.returncode == 0:
        return
    real_replace = os.replace

    def replace(src: str | Path, dst: str | Path) -> None:
        if Path(dst).resolve() == path.resolve():
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)


def _folder_refuses(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder that takes no new file, as for a user without write permission on it (root
    has it everywhere): the temporary file beside `path` is refused with EACCES."""
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args: Any, **kw: Any) -> tuple[int, str]:
        if str(kw.get("prefix", "")).startswith(f".{path.name}."):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path.parent))
        return real_mkstemp(*args, **kw)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


LOCKED_SAYS = {"read_only": "the case file is read-only",
               "immutable": "Operation not permitted",
               "folder": "cannot replace the case file: Permission denied"}


@pytest.mark.compile
@pytest.mark.parametrize("lock", LOCKED_SAYS)
def test_9_tighten_names_a_file_it_may_not_write_and_leaves_it_as_it_was(lock, tmp_path,
                                                                         monkeypatch):
    """``budget tighten`` over two case files, one read-only (mode 0444), immutable
    (``chattr +i``) or in a folder that refuses the new file: the other file is tightened
    (tighten treats each file on its own — a case that did not compile or an increase
    refused does not stop the others — and a user who fixes one file's permissions does not
    want to measure everything again for the rest); the locked one is named in one line
    with the line of its first change and a hint, its bytes and mode unchanged, no temporary
    file left; exit 2. Before: the immutable file (and the refusing folder) raised
    PermissionError out of the atomic write — a traceback, exit 3, and the files after it not
    written; the read-only one was silently replaced, its owner's 0444 overridden."""
    a, b = _two_loose_cases(tmp_path)
    a.chmod(0o444)
    before = a.read_bytes()
    if lock != "read_only":
        a.chmod(0o644)
        (_immutable if lock == "immutable" else _folder_refuses)(a, monkeypatch)
    mode = stat.S_IMODE(a.stat().st_mode)
    monkeypatch.chdir(tmp_path)
    try:
        r = run_cli(["budget", "tighten", ".", "--no-isolation"])
    finally:
        if shutil.which("chattr"):
            subprocess.run(["chattr", "-i", str(a)], capture_output=True, check=False)
    assert r.code == ExitCode.USAGE_ERROR, r.out + r.err
    line = _one_error_line(r.err, "a_locked.toml:14: ")
    assert LOCKED_SAYS[lock] in line
    assert a.read_bytes() == before and stat.S_IMODE(a.stat().st_mode) == mode
    assert "layout_transforms = 2\n" in b.read_text()  # the other file is tightened
    assert "budget tighten: 1 file(s) updated, 0 exact, 0 increase(s) refused, 0 not " \
        "measured, 1 not written" in r.out
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".toml" or
                  p.name.endswith(".tmp")) == ["a_locked.toml", "b_open.toml"]
