"""``cl-validate`` — the dispatcher: one module per subcommand, exit codes in `ExitCode`.

Each subcommand module exposes ``HELP``, ``configure(parser)`` and ``main(args) -> ExitCode``,
and imports nothing heavy at the top: ``cl-validate list`` or a bad case file answers without
loading torch or TVM.
"""

from __future__ import annotations

import argparse
import platform
import sys
import traceback
import warnings
from collections.abc import Sequence
from types import ModuleType

from cl_validate import __version__
from cl_validate.cli import (
    budget,
    calibrate,
    diff,
    init,
    ledger,
    merge,
    pins,
    run,
    show,
    trend,
)
from cl_validate.cli import list as list_
from cl_validate.cli.streams import guarded_streams
from cl_validate.errors import CompileStageError, ExitCode, UsageError
from cl_validate.report.console import one_line

SUBCOMMANDS: dict[str, ModuleType] = {
    "run": run, "show": show, "list": list_, "budget": budget, "calibrate": calibrate,
    "merge": merge, "ledger": ledger, "diff": diff, "trend": trend, "init": init,
    "pins": pins,
}


def version_line() -> str:
    """``cl-validate X (apache-tvm Y, torch Z, Python W)``: from the installed distributions'
    metadata, without importing TVM or torch (seconds each)."""
    deps = ", ".join(f"{d} {pins.installed(d) or 'absent'}" for d in ("apache-tvm", "torch"))
    return f"cl-validate {__version__} ({deps}, Python {platform.python_version()})"


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so every error prints alike."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message, hint=f"see '{self.prog} --help'")


class _Version(argparse.Action):
    """``--version``: `version_line`, unwrapped (argparse's own action wraps it to the
    terminal's width), read only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(version_line())
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="cl-validate", description="Gate channels-last TVM compiles of PyTorch "
                "models: layout, runtime layout transforms, kernels and numerics.")
    p.add_argument("--version", action=_Version, nargs=0,
                   help="print cl_validate's, TVM's and torch's versions and exit")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, mod in SUBCOMMANDS.items():
        mod.configure(sub.add_parser(name, help=mod.HELP, description=mod.__doc__))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``cl-validate`` and ``python -m cl_validate``.

    Everything printed goes through `guarded_streams`: control characters escaped, and a
    closed or full stdout never costs the reports or the exit code."""
    with guarded_streams():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")
    try:
        args = _parser().parse_args(argv)
        return int(SUBCOMMANDS[args.command].main(args))
    except UsageError as exc:
        print(f"cl-validate: error: {one_line(str(exc))}", file=sys.stderr)
        return int(ExitCode.USAGE_ERROR)
    except CompileStageError as exc:
        print(f"cl-validate: {one_line(str(exc))}", file=sys.stderr)
        return int(ExitCode.CHECK_FAILED)
    except KeyboardInterrupt:
        print("cl-validate: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except Exception:
        traceback.print_exc()
        print("cl-validate: internal error (a bug: please report it with the traceback above)",
              file=sys.stderr)
        return int(ExitCode.INTERNAL_ERROR)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
