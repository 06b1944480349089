"""The report files of one ``cl-validate run``: whatever ends the run, what lies at ``--junit``,
``--markdown`` and ``--trend-json`` is this run's report, never an earlier run's.

A CI job publishes the file at ``--junit`` whatever the step's outcome; a report left from an
earlier run (a restored workspace, a self-hosted runner) would be published as this one's. So
`RunReports`:

- checks the paths before anything runs (`cl_validate.paths.report_file`: an existing file is
  replaced only when it is a report of that kind; two reports are never one file);
- `discard`: a run that ends before it starts (a case-file error, exit 2) removes the earlier
  run's reports rather than leave them looking current;
- `start`: writes both reports at once with every case × check marked "not finished";
- `progress`: rewrites them as results arrive (a run killed with SIGKILL, which nothing can
  catch, leaves a report of what it finished, the rest still marked) — as each arrives, unless
  the last write was more recent than ten times what it took: writing never costs more than
  about a tenth of the run (a report of 100 case × target runs takes a third of a second);
- `final`: the last write, on every exit path (the caller calls it from its ``finally``).

Every write is atomic (`cl_validate.atomic`). A write that fails (a full disk) is never a
traceback: `final` returns the one-line reason per file (`unwritten`), and the caller decides
the exit code (`ExitCode.REPORT_NOT_WRITTEN` when the checks passed). A report that could not
be written is removed, so that no earlier run's stays in its place.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cl_validate.atomic import through_links
from cl_validate.checks.verdict import CaseResult
from cl_validate.paths import ReportKind, display_path, distinct_files, report_file
from cl_validate.report.figures import write_trend_json
from cl_validate.report.junit import write_junit
from cl_validate.report.markdown import write_markdown

#: The results to write: those finished, and placeholders for the rest.
Complete = Callable[[Sequence[CaseResult]], list[CaseResult]]


def unwritten(what: str, path: str | Path, exc: OSError, *, hint: bool = True) -> str:
    """The one line that says a report could not be written, and why (the OS's words)."""
    line = f"{display_path(path)}: cannot write the {what}: {exc.strerror or exc}"
    return line + (" (hint: free some space or choose another path; the verdict stands)"
                   if hint else "")


class RunReports:
    """``--junit`` and ``--markdown`` of a run (either may be None). See the module
    docstring for when each method is called."""

    def __init__(self, junit: str | None, markdown: str | None,
                 trend_json: str | None = None) -> None:
        named = [(o, p) for o, p in (("--junit", junit), ("--markdown", markdown),
                                     ("--trend-json", trend_json)) if p]
        distinct_files(named)
        self._files: list[tuple[str, Path, Callable[[Sequence[CaseResult], Path], Path]]] = []
        if junit:
            self._files.append(("JUnit report", report_file(junit, "--junit",
                                                            ReportKind.JUNIT), write_junit))
        if markdown:
            self._files.append(("Markdown report", report_file(markdown, "--markdown",
                                                               ReportKind.MARKDOWN),
                                write_markdown))
        if trend_json:
            self._files.append(("trend figures", report_file(
                trend_json, "--trend-json", ReportKind.TREND_JSON), write_trend_json))
        self._written: set[Path] = set()  # written by this run at least once
        self._failed: dict[Path, str] = {}  # path → why its last write failed
        self._next = 0.0  # time.monotonic() from which a progress write is due

    def discard(self) -> None:
        """Remove the reports at the paths (`report_file` made sure they are reports): a run
        that ends before it started (exit 2) leaves no report, and none of an earlier run."""
        for _, path, _ in self._files:
            _remove(path)
        self._written.clear()

    def start(self, complete: Complete) -> None:
        """Every case × check of the run, none finished yet."""
        self._write(complete([]), quiet=False)

    def progress(self, done: Sequence[CaseResult], complete: Complete) -> None:
        """The results so far, the rest still marked not finished (unless the last write is
        too recent: see the module docstring)."""
        if time.monotonic() >= self._next:
            self._write(complete(done), quiet=True)

    def final(self, results: Sequence[CaseResult]) -> list[str]:
        """The run's report; the one-line reason for each file that could not be written
        (each removed, so that no earlier report stands in for it)."""
        failed = self._write(results, quiet=True)
        for _, path, _ in self._files:
            if path in failed:
                _remove(path)
        return list(failed.values())

    def written(self) -> list[tuple[str, Path]]:
        """The reports on disk now, each as its writer returned it (through a link, the
        file it leads to)."""
        return [(what, through_links(path)) for what, path, _ in self._files
                if path in self._written and path not in self._failed]

    def _write(self, results: Sequence[CaseResult], *, quiet: bool) -> dict[Path, str]:
        started = time.monotonic()
        failed: dict[Path, str] = {}
        for what, path, write in self._files:
            try:
                write(results, path)
            except OSError as exc:
                failed[path] = unwritten(what, path, exc)
                if path not in self._written:  # an earlier run's must not stand for this one
                    _remove(path)
                if path not in self._failed and not quiet:
                    print(f"cl-validate: warning: {unwritten(what, path, exc, hint=False)}; "
                          "trying again at the end", file=sys.stderr)
                self._failed[path] = failed[path]
            else:
                self._written.add(path)
                self._failed.pop(path, None)
        now = time.monotonic()
        self._next = now + 10 * (now - started)
        return failed


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(through_links(path))
