"""The one way cl_validate writes a file: atomically, with the mode a plain write would give.

Reports (JUnit, Markdown, merged JUnit), rewritten case files, kernel-list baselines and cache
entries are all written here: to a temporary file in the same folder, then renamed over the
target, so a reader (a publisher, another CI job sharing the cache, a run that is interrupted)
sees the old file or the new one, never a part.

The temporary file comes from ``mkstemp``, which creates it ``0600``; left like that, every
report would be readable by its owner only. So the file gets the mode a plain ``open(path,
"w")`` would have given it: an existing file keeps its own permission bits, a new one gets
``0666`` less the process umask.
"""

from __future__ import annotations

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


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Replace `path` with `data` (text is written as UTF-8 with ``\\n`` line ends).

    Missing parent folders are created. The permission bits are those of the file being
    replaced, or `NEW_FILE_MODE` for a new file.
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
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
