"""``cl-validate merge A.xml B.xml ... -o OUT.xml``: one report from the shards' reports."""

from __future__ import annotations

import argparse
from pathlib import Path

from cl_validate.errors import ExitCode, UsageError
from cl_validate.paths import report_file
from cl_validate.report.merge import merge, read, summary, write

HELP = "merge JUnit reports (e.g. of --shard runs) into one, one suite per target"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT",
                        help="JUnit XML files to merge")
    parser.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="write the merged report to FILE (replaced atomically)")


def main(args: argparse.Namespace) -> ExitCode:
    out = report_file(args.output, "-o")
    if out.exists():
        if any(out.resolve() == Path(p).resolve() for p in args.reports):
            raise UsageError(f"-o {args.output} is also one of the reports to merge",
                             hint="write the merged report to a new file")
        try:
            read(str(out))
        except UsageError:
            raise UsageError(f"-o {args.output}: refusing to replace a file that is not a "
                             "JUnit report", hint="choose another output path") from None
    root = merge(args.reports)
    write(root, out)
    print(summary(root, args.output), end="")
    print(f"\nmerged {len(args.reports)} report(s) into {args.output}")
    return ExitCode.OK
