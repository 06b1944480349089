"""``cl-validate merge A.xml B.xml ... -o OUT.xml``: one report from the shards' reports."""

from __future__ import annotations

import argparse
import sys

from cl_validate.errors import ExitCode, UsageError
from cl_validate.paths import ReportKind, report_file, same_file
from cl_validate.report.merge import merge, summary, write
from cl_validate.report.outputs import unwritten

HELP = "merge JUnit reports (e.g. of --shard runs) into one, one suite per target"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT",
                        help="JUnit XML files to merge")
    parser.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="write the merged report to FILE (replaced atomically; an "
                        "existing FILE must be a JUnit report)")


def main(args: argparse.Namespace) -> ExitCode:
    if any(same_file(args.output, p) for p in args.reports):
        raise UsageError(f"-o {args.output} is also one of the reports to merge",
                         hint="write the merged report to a new file")
    out = report_file(args.output, "-o", ReportKind.JUNIT)
    root = merge(args.reports)
    try:
        write(root, out)
    except OSError as exc:
        print(f"cl-validate: error: {unwritten('merged report', out, exc)}", file=sys.stderr)
        return ExitCode.REPORT_NOT_WRITTEN
    print(summary(root, args.output), end="")
    print(f"\nmerged {len(args.reports)} report(s) into {args.output}")
    return ExitCode.OK
