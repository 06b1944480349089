"""One exception tree and the documented exit codes.

Errors a user can cause (a bad case file, a bad command line) are `UsageError`s: the CLI
prints them as one line, ``file:line: message (hint: ...)``, without a traceback, and exits 2.
Anything else escaping the toolkit is a bug and exits 3.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path


class ExitCode(enum.IntEnum):
    """Process exit codes of ``cl-validate`` (a contract: CI scripts branch on them)."""

    OK = 0
    """Every check of every selected case passed (skipped checks do not fail a run)."""
    CHECK_FAILED = 1
    """At least one check failed or errored, whether or not the report could be written."""
    USAGE_ERROR = 2
    """Bad command line or a case file that does not validate: nothing ran, and an earlier
    run's reports at the report paths are removed rather than left looking current. Also when
    every case proved unusable in its case process (``no case could be run``): that run had
    started, so its report is written."""
    INTERNAL_ERROR = 3
    """A bug in cl_validate (or TVM/torch) that is not a verdict about a case: the traceback
    is printed; once the run has started, the report is still written."""
    REPORT_NOT_WRITTEN = 4
    """Every check passed, but a report file could not be written (a full disk, a folder
    gone): one line names the file and the OS error. A run with a failed check exits 1
    whether or not its report was written: the verdict comes first."""
    INTERRUPTED = 130
    """Interrupted (SIGINT or SIGTERM from outside the run): the report holds every finished
    case, the rest marked not run."""


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first non-blank line of an exception's message, stripped (messages that open with
    a newline and an indented paragraph, as PyTorch's often do, read from their first
    sentence), at most `limit` characters."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


def last_line(exc: BaseException, limit: int = 300) -> str:
    """The last non-blank line of an exception's message that is not a backtrace frame: what
    a TVM error says (its C++ backtrace comes first), at most `limit` characters."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and "File " not in ln]
    return lines[-1][:limit] if lines else ""


class ClValidateError(Exception):
    """Base of every exception cl_validate raises on purpose."""


class UsageError(ClValidateError):
    """A mistake the user can fix: printed in one line, exit code 2.

    `file` and `line` point at what to fix; `hint` says how.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        line: int | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = str(file) if file is not None else None
        self.line = line
        self.hint = hint

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"{where}{self.message}{hint}"


class CaseFileError(UsageError):
    """A case file that does not validate (syntax, keys, types, values, model factory)."""


class CompileStageError(ClValidateError):
    """A pipeline stage raised: a verdict (`error`) about the case, naming the stage."""

    def __init__(self, stage: str, exc: BaseException, summary: str | None = None,
                 at: str | None = None, hint: str | None = None) -> None:
        if summary is None:
            first = (str(exc).strip().splitlines() or [""])[0]
            # TVM errors carry a long C++ backtrace; the first line says what went wrong.
            if "Traceback" in first or not first:
                lines = [ln for ln in str(exc).splitlines() if ln.strip() and "File " not in ln]
                first = lines[-1].strip() if lines else type(exc).__name__
            summary = f"{type(exc).__name__}: {first[:300]}"
        # `at`: the op it failed on and the model's source (`cl_validate.compile.culprit`)
        super().__init__(f"{stage} failed: {summary}" + (f" at {at}" if at else "")
                         + (f" (hint: {hint})" if hint else ""))
        self.stage = stage
        self.detail = str(exc)


class DeviceUnavailableError(UsageError):
    """A run asked for a device (``--require-device``) that this machine does not have."""


@dataclass(frozen=True)
class ErrorRecord:
    """An error as data: why a case × target has no measurement, as its verdict will say.

    `message` is the one line a reviewer reads; `kind` names the failure type (JUnit
    ``error@type``: ``CompileError``, ``WorkerCrashed``, ``CaseFileError`` …); `detail` is the
    longer text (a traceback's tail, a case process's last output); `line` is the case-file line to
    fix, where there is one.
    """

    message: str
    kind: str
    detail: str = ""
    line: int | None = None
