"""``cl-validate diff BASE HEAD``: what a pull request changed, from two JUnit reports.

BASE is the base branch's report (its last run's artifact), HEAD the pull request's. Prints
the Markdown (`cl_validate.report.delta`): first every budget or tolerance the pull request
loosened in a case file of HEAD — with ``--base-cases REF`` (a git revision, e.g.
``origin/main``) or a folder of the base's case files, each case compared with the base's
case of the same name wherever the base had its file (a file moved or renamed is the same
case), else with the base's file at the same path — then a row per case × target whose
figures changed, marked better or worse, with the runtime transforms it added by module.
``--markdown FILE`` writes it for a pull-request comment (65,536 characters at most);
under GitHub Actions it is appended to the job summary too (1 MiB). Nothing is measured:
the figures are the reports'.

Exit 0, or 1 with ``--fail-on-budget-increase`` when something was loosened and
``--allow-budget-increase`` (e.g. set by the workflow when the pull request has a label) does
not acknowledge it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from cl_validate.errors import ExitCode, UsageError
from cl_validate.paths import ReportKind, repo_root, report_file
from cl_validate.report.annotations import escape_data, escape_property
from cl_validate.report.delta import COMMENT_LIMIT, SUMMARY_LIMIT, compare, render
from cl_validate.report.figures import Run, read_runs
from cl_validate.report.markdown import write_marked
from cl_validate.report.outputs import unwritten
from cl_validate.spec.raises import BaseCases, Loosened, loosened_in

HELP = "what a pull request changed: two JUnit reports compared, loosened budgets first"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", metavar="BASE", help="the base branch's JUnit report")
    parser.add_argument("head", metavar="HEAD", help="the pull request's JUnit report")
    parser.add_argument("--markdown", metavar="FILE", help="write the Markdown to FILE, cut to "
                        f"a pull-request comment's {COMMENT_LIMIT} characters (an existing "
                        "FILE must be a report cl_validate wrote, or empty)")
    parser.add_argument("--base-cases", metavar="REF|DIR", help="list the budgets and "
                        "tolerances HEAD's case files loosen against the same cases (by name, "
                        "wherever their files were; else by path) at git revision REF (e.g. "
                        "origin/main) or in folder DIR")
    parser.add_argument("--fail-on-budget-increase", action="store_true",
                        help="exit 1 when a budget or tolerance was loosened (needs "
                        "--base-cases), unless --allow-budget-increase")
    parser.add_argument("--allow-budget-increase", action="store_true",
                        help="the loosening is acknowledged (e.g. the pull request has a "
                        "label): listed, not failed")


def main(args: argparse.Namespace) -> ExitCode:
    if args.fail_on_budget_increase and not args.base_cases:
        raise UsageError("--fail-on-budget-increase needs --base-cases REF|DIR",
                         hint="the base branch's case files are what a raise is against")
    out = report_file(args.markdown, "--markdown", ReportKind.MARKDOWN) if args.markdown \
        else None
    base_cases = BaseCases.parse(args.base_cases) if args.base_cases else None
    base, head = read_runs(args.base), read_runs(args.head)
    raises: list[Loosened] = []
    notes: list[str] = []
    if base_cases is not None:
        raises, notes = loosened_in(_case_files(head.values()), base_cases)
    deltas = compare(base, head)

    def markdown(limit: int | None = None, size: Callable[[str], int] = len) -> str:
        return render(deltas, raises, runs=len(head), base=f"{args.base} (base)",
                      notes=notes, acknowledged=args.allow_budget_increase, limit=limit,
                      size=size)

    print(markdown(), end="")
    code = ExitCode.OK
    if out is not None:
        try:
            write_marked(out, markdown(COMMENT_LIMIT - 200))  # the marker line, and a margin
        except OSError as exc:
            print(f"cl-validate: error: {unwritten('Markdown', out, exc)}", file=sys.stderr)
            code = ExitCode.REPORT_NOT_WRITTEN
    _annotate(raises)
    _append_summary(lambda limit: markdown(limit, lambda t: len(t.encode())))
    if raises and args.fail_on_budget_increase and not args.allow_budget_increase:
        for r in raises:
            print(f"cl-validate: error: {r.describe()}", file=sys.stderr)
        print(f"cl-validate: error: {len(raises)} budget(s) or tolerance(s) loosened "
              "(hint: acknowledge with --allow-budget-increase, e.g. from a pull-request "
              "label, or restore them)", file=sys.stderr)
        return ExitCode.CHECK_FAILED
    return code


def _case_files(runs: Iterable[Run]) -> list[Path]:
    """The case files HEAD's runs name (relative to the repository) that exist here."""
    root = repo_root(Path.cwd())
    files = dict.fromkeys(r.file for r in runs if r.file)
    return [p for f in files if (p := root / f).is_file()]


def _annotate(raises: Sequence[Loosened]) -> None:
    """Under GitHub Actions, a warning on each loosened line of the pull request's diff."""
    if os.environ.get("GITHUB_ACTIONS") != "true":
        return
    for r in raises:
        props = f"file={escape_property(r.file)}" + (f",line={r.line}" if r.line else "")
        print(f"::warning {props},title={escape_property('cl_validate: budget loosened')}"
              f"::{escape_data(r.describe())}")


def _append_summary(markdown: Callable[[int], str]) -> None:
    """Append to ``$GITHUB_STEP_SUMMARY`` when set, within what GitHub takes of a step."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return
    path = Path(target)
    try:
        used = path.stat().st_size if path.exists() else 0
        text = markdown(max(SUMMARY_LIMIT - used, 20_000))
        with path.open("a", encoding="utf-8", newline="\n") as f:
            f.write(("\n" if used else "") + text)
    except OSError as exc:  # a courtesy: the comparison stands without it
        print(f"cl-validate: warning: cannot append to $GITHUB_STEP_SUMMARY: {exc}",
              file=sys.stderr)
