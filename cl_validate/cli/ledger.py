"""``cl-validate ledger [PATH ...]``: what a suite's runtime layout transforms are there for.

Compiles the cases (static checks only: no numerics, cuda needs no GPU; answered from the
measurement cache when it is warm) and sums every runtime transform by its reason — the op
without a layout rule, the model's own permute, a graph boundary, a pinned layout, a weight
that did not fold — with how many transforms and bytes, in which cases and modules: the
suite-level view of what to fix first. ``cl-validate run`` ends with its top rows.
"""

from __future__ import annotations

import argparse
import sys

from cl_validate.checks.verdict import CaseResult
from cl_validate.cli.common import (
    DEFAULT_PATH,
    add_paths,
    add_patterns,
    add_target,
    expand,
    measure_static,
    select,
)
from cl_validate.errors import ExitCode
from cl_validate.paths import ReportKind, display_path, report_file
from cl_validate.report.ledger import ledgers, render_ledger
from cl_validate.report.markdown import ledger_section, write_marked
from cl_validate.report.outputs import unwritten
from cl_validate.spec import load_cases
from cl_validate.spec.options import add_to_argparse, positive_int

HELP = "what the runtime transforms of a suite are there for, most transforms first"


def configure(parser: argparse.ArgumentParser) -> None:
    add_paths(parser)
    add_target(parser, "targets to measure (repeatable; default: each case's own)", multi=True)
    add_patterns(parser)
    add_to_argparse(parser, only=("jobs", "no_isolation", "cache_dir", "no_cache"))
    parser.add_argument("--limit", type=positive_int, metavar="N",
                        help="show the first N reasons per target (default: all)")
    parser.add_argument("--markdown", metavar="FILE", help="also write the ledger as "
                        "Markdown tables to FILE")


def _say(r: CaseResult) -> str:
    assert r.kernels is not None
    n = len(r.kernels.runtime_transforms)
    return f"{n} runtime transform" + ("" if n == 1 else "s")


def main(args: argparse.Namespace) -> ExitCode:
    if args.markdown:
        report_file(args.markdown, "--markdown", ReportKind.MARKDOWN)
    cases = select(expand(load_cases(args.paths or [DEFAULT_PATH])), args.patterns)
    print(f"measuring {len(cases)} case run(s) (static checks only)", flush=True)
    results = measure_static(cases, args, _say, cached=True)
    print()
    for led in ledgers(results):
        print(render_ledger(led, args.limit, names=None) + "\n")
    broken = [f"{r.case.label} [{r.target}]" for r in results if r.kernels is None]
    if broken:
        print(f"not in the ledger (did not compile; see cl-validate run): {', '.join(broken)}")
    if args.markdown:
        try:
            path = write_marked(args.markdown, ledger_section(results, names=None))
        except OSError as exc:
            print(f"cl-validate: error: {unwritten('Markdown ledger', args.markdown, exc)}",
                  file=sys.stderr)
            return ExitCode.CHECK_FAILED if broken else ExitCode.REPORT_NOT_WRITTEN
        print(f"Markdown ledger: {display_path(path)}")
    return ExitCode.CHECK_FAILED if broken else ExitCode.OK
