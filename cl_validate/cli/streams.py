"""The CLI's standard output and error: escaped, and unable to take a run down.

``cl-validate run … | head -1`` closes the pipe after one line, and a log on a full disk fails
every write: either used to end the run with a ``BrokenPipeError`` or ``OSError`` traceback,
exit 3, and no report. The console is a courtesy; the reports and the exit code are the
contract. So while a subcommand runs, `guarded_streams` puts a `GuardedStream` in place of
``sys.stdout`` and ``sys.stderr``:

- every text written is `printable` (control characters escaped: a model's ``\\x1b[2J`` or
  ``\\r`` cannot rewrite the terminal or a CI log);
- the first write or flush that fails marks the stream lost: what follows is dropped, the
  process carries on, and at the end one line on stderr says so (not for a closed pipe: a
  reader that stops reading, like ``head``, is no error).

When the stream is a real file descriptor, a lost one is pointed at ``/dev/null``: the text
Python still holds in its buffer would otherwise fail again when the interpreter flushes it on
exit, and turn the exit code into 120.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from cl_validate.report.console import printable


class GuardedStream:
    """A text stream that escapes what it writes and survives its own failure."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self.stream = stream
        self.name = name
        self.lost: OSError | None = None

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                self.stream.write(printable(text))
            except OSError as exc:
                self._lose(exc)
        return len(text)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self.stream.flush()
            except OSError as exc:
                self._lose(exc)

    def _lose(self, exc: OSError) -> None:
        self.lost = exc
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            fd = self.stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, fd)
            finally:
                os.close(devnull)

    def __getattr__(self, attr: str) -> Any:  # encoding, isatty, fileno ... of the stream
        return getattr(self.stream, attr)


@contextlib.contextmanager
def guarded_streams() -> Iterator[tuple[GuardedStream, GuardedStream]]:
    """``sys.stdout`` and ``sys.stderr`` guarded (see the module docstring) for the
    duration; on the way out, one line on stderr if stdout was lost to anything but a closed
    pipe."""
    out = GuardedStream(sys.stdout, "standard output")
    err = GuardedStream(sys.stderr, "standard error")
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err  # type: ignore[assignment]
    try:
        yield out, err
    finally:
        out.flush()
        sys.stdout, sys.stderr = saved
        if out.lost is not None and out.lost.errno != errno.EPIPE:
            err.write(f"cl-validate: warning: {out.name} failed "
                      f"({out.lost.strerror or out.lost}): console output from then on was "
                      "dropped; the reports and the exit code are complete\n")
            err.flush()
