"""``cl-validate pins``: the exact versions this release was tested with.

Every budget in a case file was measured under one TVM and one torch: another version may
fuse differently and move the counts. The pins ship inside the package
(``cl_validate/pins.txt``), so a repository that installs cl_validate from a tag gets the
versions that tag was tested with, as a pip constraints file::

    cl-validate pins > pins.txt
    pip install -c pins.txt ...

``--check`` compares them with what is installed here and exits 1 on a difference (a CI step
before the gate, so that a moved budget is not blamed on the model). The ``pinned`` extra
(``pip install "cl_validate[pinned] @ ..."``) installs exactly these versions.
"""

from __future__ import annotations

import argparse

from cl_validate.errors import ExitCode
from cl_validate.measurements.sources import installed, pin_matches, pin_text, pins

HELP = "print the TVM/torch/... versions this release was tested with (a pip constraints file)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--check", action="store_true",
                        help="compare with the installed versions; exit 1 on a difference")


def main(args: argparse.Namespace) -> ExitCode:
    if not args.check:
        print(pin_text(), end="")
        return ExitCode.OK
    bad = 0
    for name, pinned in pins().items():
        have = installed(name)
        ok = have is not None and pin_matches(have, pinned)
        bad += not ok
        print(f"{'ok' if ok else 'DIFFERS':<8}{name}=={pinned}  (installed: {have or 'absent'})")
    if bad:
        print(f"cl-validate pins: {bad} version(s) differ from the tested pins: budgets may "
              "not hold (hint: pip install -c <(cl-validate pins) ...)")
        return ExitCode.CHECK_FAILED
    return ExitCode.OK
