"""The output logs of the zygote and of each case, and the tail an error shows.

A case's stdout and stderr (C-level output too) go to a log file that never has a name
(``O_TMPFILE`` in the temporary folder; where the file system lacks it, a file unlinked as
soon as it is made): the case process gets the descriptor, never a path, and this process
reads the log through the same descriptor. Nothing is left in the temporary folder however the
run ends, SIGKILL included. A model that swaps the file's
name for a FIFO or a link to ``/dev/zero`` changes nothing the run reads, nor hides an output
flood (`cl_validate.suite.limits.MAX_OUTPUT_BYTES`). An error shows the log's last few
thousand characters, a native crash backtrace (dozens of C frames of the interpreter) cut to
its first frames so that what the model printed before it crashed stays in view. Costs one
file descriptor per running case and a 256 kB read per error.
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile

#: How much of a case's output an error shows.
TAIL_BYTES = 4000
#: How much of a case's output `log_tail` reads before collapsing native backtraces.
_READ_BYTES = 256 * 1024
_NATIVE_FRAME = re.compile(r'^\s*File "(?![^"]*\.py")[^"]*", line \d+, in ')
_KEEP_FRAMES = 3


class LogFiles:
    """Where the logs of one pool are made: files without a name, each gone with its last
    descriptor, so that no run leaves anything behind in the temporary folder."""

    def new_log(self, prefix: str) -> int:
        """A new log file, open for appending and reading: the process that writes it gets
        this descriptor, never a path, and this process reads it through the same
        descriptor — a model can find no name to swap for a FIFO or a link to /dev/zero (nor
        hide an output flood)."""
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
        try:
            return os.open(tempfile.gettempdir(), flags | os.O_TMPFILE, 0o600)
        except (AttributeError, OSError):  # no O_TMPFILE here (file system, kernel)
            pass
        fd, path = tempfile.mkstemp(prefix=f"cl_validate-{prefix}", suffix=".log")
        os.unlink(path)  # nothing to find by name; gone with its last descriptor
        os.set_inheritable(fd, False)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        return fd


def log_size(fd: int) -> int:
    try:
        return os.fstat(fd).st_size
    except OSError:
        return 0


def log_tail(fd: int) -> str:
    """The last output in log `fd`, a native crash backtrace collapsed to its first frames."""
    try:
        data = os.pread(fd, _READ_BYTES, max(0, log_size(fd) - _READ_BYTES))
    except OSError:
        return ""
    return readable_tail(data.decode("utf-8", "replace"), TAIL_BYTES)


def readable_tail(text: str, limit: int) -> str:
    """The last `limit` characters of a case's output, with each run of native stack frames
    (the backtrace TVM prints on a segfault: dozens of C frames of the interpreter) cut to its
    first few: what the model printed before it crashed stays in view."""
    out: list[str] = []
    run = 0
    for line in text.splitlines():
        if _NATIVE_FRAME.match(line):
            run += 1
            if run <= _KEEP_FRAMES:
                out.append(line)
            continue
        if run > _KEEP_FRAMES:
            out.append(f"  … {run - _KEEP_FRAMES} more native frames …")
        run = 0
        out.append(line)
    if run > _KEEP_FRAMES:
        out.append(f"  … {run - _KEEP_FRAMES} more native frames …")
    joined = "\n".join(out) + ("\n" if text.endswith("\n") else "")
    return joined[-limit:]
