"""``cl-validate trend REPORT...``: a case's runtime transforms and their bytes over a series
of JUnit reports (oldest first), as Mermaid charts GitHub renders in Markdown; ``--json FILE``
writes the last report's figures for trend tools (github-action-benchmark's
``customSmallerIsBetter``, as ``run --trend-json`` does)."""

from __future__ import annotations

import argparse
import sys

from cl_validate.checks.registry import tracked_figures
from cl_validate.errors import ExitCode
from cl_validate.paths import ReportKind, report_file
from cl_validate.report.figures import read_runs, write_benchmark_json
from cl_validate.report.markdown import write_marked
from cl_validate.report.outputs import unwritten
from cl_validate.report.trend import charted, report_labels, trend_markdown

HELP = "chart cases' transforms and bytes over a series of JUnit reports"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT",
                        help="JUnit reports, oldest first")
    parser.add_argument("--case", dest="cases", action="append", metavar="NAME",
                        help="only this case (a name, or name[variant]); repeatable")
    parser.add_argument("--target", dest="targets", action="append", metavar="TARGET",
                        help="only this target; repeatable")
    parser.add_argument("--figure", dest="figures", action="append", metavar="NAME",
                        choices=[f.name for f in tracked_figures()],
                        help=f"figures to chart (default: {', '.join(charted())})")
    parser.add_argument("--markdown", metavar="FILE", help="write the charts to FILE too")
    parser.add_argument("--json", metavar="FILE", help="write the last report's figures as "
                        "github-action-benchmark JSON (customSmallerIsBetter)")


def main(args: argparse.Namespace) -> ExitCode:
    md = report_file(args.markdown, "--markdown", ReportKind.MARKDOWN) if args.markdown \
        else None
    js = report_file(args.json, "--json", ReportKind.TREND_JSON) if args.json else None
    runs = [read_runs(p) for p in args.reports]
    text = trend_markdown(list(zip(report_labels(args.reports), runs, strict=True)),
                          cases=args.cases or (), targets=args.targets or (),
                          figures=args.figures or charted())
    print(text, end="")
    code = ExitCode.OK
    for what, path, write in (("Markdown", md, lambda p: write_marked(p, text)),
                              ("trend figures", js,
                               lambda p: write_benchmark_json(runs[-1].values(), p))):
        if path is None:
            continue
        try:
            write(path)
        except OSError as exc:
            print(f"cl-validate: error: {unwritten(what, path, exc)}", file=sys.stderr)
            code = ExitCode.REPORT_NOT_WRITTEN
    return code
