"""The one way cl_validate writes a file: atomically, with the mode a plain write would give.

Reports (JUnit, Markdown, merged JUnit), rewritten case files, kernel-list baselines and cache
entries are all written here: to a temporary file in the same folder, then renamed over the
target, so a reader (a publisher, another CI job sharing the cache, a run that is interrupted)
sees the old file or the new one, never a part.

The temporary file comes from ``mkstemp``, which creates it ``0600``; left like that, every
report would be readable by its owner only. So the file gets the mode a plain ``open(path,
"w")`` would have given it: an existing file keeps its own permission bits, a new one gets
``0666`` less the process umask.

A symbolic link is written through, as ``open(path, "w")`` would: the temporary file goes
next to the link's target and replaces the target, which keeps its mode, and the link stays a
link. Renaming over the link itself would turn it into a regular file and leave the real one
stale (a case file shared between two folders through a link, rewritten by ``budget
tighten``).
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: Read once, at import, before any thread exists (``os.umask`` is process-wide; reading it
#: means setting it for a moment).
NEW_FILE_MODE = 0o666 & ~_read_umask()


def through_links(path: str | Path) -> Path:
    """The file `path` names once every symbolic link is followed (`path` itself when it is
    not a link): where a write to `path` lands. A link loop raises ``OSError(ELOOP)``."""
    p = Path(path)
    if not p.is_symlink():
        return p
    real = Path(os.path.realpath(p))
    if real.is_symlink():  # realpath stops inside a loop and hands back a link
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
    return real


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Replace `path` with `data` (text is written as UTF-8 with ``\\n`` line ends), through
    symbolic links; returns the file written (the link's target for a link).

    Missing parent folders are created (of `path`, not of a link's target). The permission
    bits are those of the file being replaced, or `NEW_FILE_MODE` for a new file.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    path = through_links(path)
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = NEW_FILE_MODE
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:60]}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
