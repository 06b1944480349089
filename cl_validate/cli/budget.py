"""``cl-validate budget tighten|record``: budgets that only go down, and kernel-list baselines.

``tighten`` compiles the cases (static checks only: counts need no numerics, and cuda compiles
without a GPU) and rewrites each declared budget to the measured value, keeping the case
file's comments and formatting (planned and written by `cl_validate.spec.budgets`). Where
values go:

- the case-level ``[budget]`` holds the value measured on the case's first target (its
  *primary* target, ``targets[0]``, default llvm);
- ``[targets_override.<t>] budget`` entries that exist are updated in place; a new one is
  added only where a target's value differs from the case-level one — including a target not
  measured in this run (``--target``) whose budget would otherwise change with the case-level
  value: it is pinned at its old value;
- a budget the case does not declare (``kernels`` is optional) is not added.

It never raises a budget unless ``--allow-increase`` is given, and then only with
``--reason TEXT``, recorded as ``reason = "..."`` in the budget table it raised. A file whose
budgets are already exact is not touched. A case file it may not write (read-only, immutable,
on a read-only file system) is left exactly as it was and named in one line with the line of
its first change and what to do (exit 2); every other file is still tightened, as a case that
did not compile or an increase refused does not stop the others. ``record`` writes
``baselines/<case>.<target>.txt`` (see `cl_validate.checks.kernel_list`).
"""

from __future__ import annotations

import argparse
import difflib
import errno
import os
import sys
from collections.abc import Sequence

from cl_validate.atomic import through_links, write_atomic
from cl_validate.checks import kernel_list as baseline
from cl_validate.checks.ratchet import BudgetCheck
from cl_validate.checks.registry import checks
from cl_validate.checks.verdict import CaseResult
from cl_validate.cli.common import DEFAULT_PATH, add_paths, add_target, expand, measure_static
from cl_validate.errors import ExitCode, UsageError
from cl_validate.measurements.kernel_list import KernelList
from cl_validate.paths import display_path
from cl_validate.report.console import one_line
from cl_validate.spec import CaseSpec, load_cases
from cl_validate.spec.budgets import MeasuredCounts, flag_comments, plan, rewrite, verify
from cl_validate.spec.casefile import CaseText, diff_lines, written_to
from cl_validate.spec.options import add_to_argparse

HELP = "tighten budgets to the measured counts, or record kernel-list baselines"


TIGHTEN_HELP = """\
Compile the cases (static checks only) and rewrite each declared budget to the measured
count, keeping the case file's comments and formatting.

  [budget]                        the value measured on the case's first target
  [targets_override.<t>] budget   updated in place where it exists; added only where a
                                  target differs (a target not measured keeps its value)
  undeclared budgets              not added (kernels and the cost budgets are optional)
  layout_transform_bytes          the exact measured bytes, written with digit groups
  fallback_kernels                only where dlight schedules the target (GPU targets)
  transform_time_share            never: a measured time is a ceiling, not a record

A budget is never raised unless --allow-increase is given with --reason TEXT, which is
recorded as reason = "TEXT" in the table it raised. Files already exact are not touched.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = ("Budgets that only go down.\n\n  tighten  lower budgets to the "
                          "measured counts\n  record   write the kernel-list baselines that "
                          "the kernel_list check compares against")
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    tighten = sub.add_parser("tighten", help="lower budgets to the measured counts",
                             description=TIGHTEN_HELP,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    record = sub.add_parser("record", help="write each case's fused kernel list per target to "
                            "baselines/<case>.<target>.txt next to the case file",
                            description="Write baselines/<case>.<target>.txt next to each "
                            "case file: its fused kernel list, one kernel per line. A run "
                            "then fails kernel_list when kernels are added, removed, split or "
                            "merged.")
    for p in (tighten, record):
        add_paths(p)
        add_target(p, "targets to measure (repeatable; default: each case's own)", multi=True)
        add_to_argparse(p, only=("jobs", "no_isolation"))
    tighten.add_argument("--allow-increase", action="store_true",
                         help="also raise budgets the case now exceeds (needs --reason)")
    tighten.add_argument("--reason", metavar="TEXT",
                         help="why a budget goes up; recorded as reason = \"TEXT\" beside it")
    tighten.add_argument("--dry-run", action="store_true",
                         help="show what would change, write nothing")


def main(args: argparse.Namespace) -> ExitCode:
    if args.action == "tighten":
        if args.allow_increase and not (args.reason or "").strip():
            raise UsageError("--allow-increase needs --reason TEXT",
                             hint="say why the budget goes up; it is recorded in the case file")
        if args.reason and not args.allow_increase:
            raise UsageError("--reason only goes with --allow-increase",
                             hint="budgets are lowered without a reason")
    cases = load_cases(args.paths or [DEFAULT_PATH])
    results = measure(cases, args)
    if args.action == "record":
        return _record(results)
    return _tighten(cases, results, allow_increase=args.allow_increase,
                    reason=(args.reason or "").strip(), dry_run=args.dry_run)


def measure(cases: Sequence[CaseSpec], args: argparse.Namespace) -> list[CaseResult]:
    """Compile every case on its selected targets (static checks only) and return results."""
    def say(r: CaseResult) -> str:
        assert r.kernels is not None
        return (f"{len(r.kernels.runtime_transforms)} layout transforms, {len(r.kernels)} "
                "kernels")

    runs = expand(cases)
    print(f"measuring {len(cases)} case(s), {len(runs)} run(s) with their variants (static "
          "checks only)", flush=True)
    return measure_static(runs, args, say)


# --------------------------------------------------------------------------------------------
# record
# --------------------------------------------------------------------------------------------
def _record(results: Sequence[CaseResult]) -> ExitCode:
    failed = 0
    for r in results:
        if r.kernels is None:
            failed += 1
            continue
        path = baseline.baseline_path(r.case, r.target)
        text = baseline.render(r.case, r.target, r.kernels)
        shown = display_path(path)
        old = path.read_text(encoding="utf-8") if path.is_file() else None
        if old == text:
            print(f"unchanged {shown}")
            continue
        what = "wrote"
        if old is not None:
            changes = baseline.compare(baseline.parse(old, shown), baseline.snapshot(r.kernels))
            what = f"updated ({baseline.summarize(changes) or 'comments only'})"
        write_atomic(path, text)
        print(f"{what} {shown} ({len(r.kernels)} kernels)")
    if failed:
        print(f"cl-validate: {failed} case x target run(s) did not compile; no baseline written "
              "for them")
        return ExitCode.CHECK_FAILED
    return ExitCode.OK


def figures(kernels: KernelList) -> dict[str, int]:
    """What tighten may write, where it applies: each budget check's exact figure (the
    transform bytes where every shape is known, the kernels left to dlight's Fallback where
    dlight scheduled the target, ...)."""
    return {c.name: n for c in checks() if isinstance(c, BudgetCheck)
            and (n := c.figure(kernels)) is not None}


def _tighten(cases: Sequence[CaseSpec], results: Sequence[CaseResult], *,
             allow_increase: bool, reason: str, dry_run: bool) -> ExitCode:
    measured: dict[str, MeasuredCounts] = {}  # case → variant → target → counts
    broken = []
    for r in results:
        if r.kernels is None:
            broken.append(f"{r.case.label} [{r.target}]")
            continue
        variant = r.case.variant.name if r.case.variant else None
        measured.setdefault(r.case.name, {}).setdefault(variant, {})[r.target] = figures(
            r.kernels)
    changed = exact = refused = 0
    unwritten: list[UsageError] = []
    print()
    for case in cases:
        if case.name not in measured:
            continue
        p = plan(case, measured[case.name], allow_increase=allow_increase, reason=reason)
        shown = display_path(case.path)
        for line in p.refused:
            print(f"REFUSED {shown}: {line}")
        refused += len(p.refused)
        if not p.writes:
            exact += 1
            continue
        source = CaseText.read(case.path)
        new = flag_comments(source.text, rewrite(source.text, p))
        verify(case.path, source.encode(new), p)  # the bytes that will be written
        error = None if dry_run else _write(source, new, shown)
        if error is None:
            changed += 1
        else:
            unwritten.append(error)
        note = (" (dry run: not written)" if dry_run else
                " (NOT WRITTEN: see the error below)" if error else "")
        print(f"{written_to(case.path)}:{note}")
        for line in p.effective:
            print(f"  {line}")
        for line in diff_lines(shown, source.text, new):
            print(f"  {line}")
        if source.kept():
            print(f"  ({source.kept()})")
    verb = "would update" if dry_run else "updated"
    print(f"\nbudget tighten: {changed} file(s) {verb}, {exact} exact, {refused} increase(s) "
          f"refused, {len(broken)} not measured"
          + (f", {len(unwritten)} not written" if unwritten else ""))
    for b in broken:
        print(f"NOT MEASURED {b}: did not compile (see cl-validate run)")
    for e in unwritten:
        print(f"cl-validate: error: {one_line(str(e))}", file=sys.stderr)
    if unwritten:  # the file to fix is the user's, as for a case file that does not load
        return ExitCode.USAGE_ERROR
    return ExitCode.CHECK_FAILED if refused or broken else ExitCode.OK


_AGAIN = "then run cl-validate budget tighten again, or make the change shown above by hand"


def _write(source: CaseText, new: str, shown: str) -> UsageError | None:
    """Write the tightened case file; None when it was written, else the one-line error
    naming it at its first changed line. The file is then exactly as it was: the write is
    atomic, and a file its mode makes read-only is not replaced, even where the folder would
    let a new file be renamed over it (or root could)."""
    line = _first_change(source.text, new)

    def fail(message: str, hint: str) -> UsageError:
        return UsageError(f"{message}: its budgets were not tightened", file=shown, line=line,
                          hint=f"{hint}, {_AGAIN}")

    try:
        real = through_links(source.path)
        if not real.stat().st_mode & 0o222:
            return fail("the case file is read-only", f"make it writable (chmod u+w {shown})")
        # The OS's own answer for this file (immutable, not the user's, a read-only file
        # system): opened for writing, nothing written, closed.
        os.close(os.open(real, os.O_WRONLY | os.O_CLOEXEC))
    except OSError as exc:
        return fail(f"cannot write the case file: {exc.strerror or exc}", _why(exc, shown))
    try:
        source.write(new)
    except OSError as exc:  # the folder: the new file is written beside it, renamed over it
        return fail(f"cannot replace the case file: {exc.strerror or exc}",
                    _why(exc, shown, folder=True))
    return None


def _why(exc: OSError, shown: str, *, folder: bool = False) -> str:
    """What to do about an OS error writing the case file `shown` (or, with `folder`, the
    new file beside it and the rename over it)."""
    if exc.errno == errno.EPERM:
        if folder:
            return "it or its folder is immutable (lsattr -d shows 'i'): chattr -i the one that is"
        return f"it is immutable (lsattr shows 'i'): chattr -i {shown}"
    if exc.errno == errno.EACCES:
        return ("make its folder writable: the new text is written beside it and renamed "
                "over it" if folder else f"make it writable (chmod u+w {shown}) or ask its owner")
    if exc.errno == errno.EROFS:
        return "the file system is mounted read-only: tighten a writable checkout"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "free some space"
    return "fix what the error says"


def _first_change(old: str, new: str) -> int | None:
    """The 1-based line of `old` where `new` first differs."""
    a, b = old.splitlines(), new.splitlines()
    for tag, i1, _, _, _ in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag != "equal":
            return min(i1 + 1, max(len(a), 1))
    return None
