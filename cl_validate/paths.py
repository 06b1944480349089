"""File names derived from what users write, and the one rule for where reports may go.

Case names, target names and stage names end up in file names (baselines, per-case reports,
cache entries). A case file is user input, and on CI it may come from a pull request, so
every writer that derives a file name from such a value calls `safe_filename`, and every
writer that joins such a name onto a report folder calls `inside` — nothing is ever written
outside the folder the user chose. `report_file` checks a path the user named on the command
line (``--junit FILE``) before any compile, so a typo costs seconds, not the whole run: it
refuses to replace a file that is not a report of its kind (a case file named by mistake), and
`distinct_files` refuses two outputs (or an output and an input) that are the same file.

Files a user names are read with `read_regular`: a FIFO, a device or a socket that happens to
be called ``*.toml`` or ``*.xml`` is refused without being opened (opening a FIFO blocks until
someone writes to it; reading a device may never end).

This module never imports torch or TVM.
"""

from __future__ import annotations

import enum
import errno
import functools
import hashlib
import io
import json
import os
import re
import stat
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from pathlib import Path

from cl_validate.errors import UsageError

#: Longest name `safe_filename` returns: well under the 255-byte limit of common file
#: systems, leaving room for a suffix such as ``.junit.xml`` or ``.json.tmp``.
MAX_NAME = 120
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
# Names Windows refuses whatever the extension (reports are read on Windows runners too).
_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)),
             *(f"LPT{i}" for i in range(10))}


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def safe_filename(name: str) -> str:
    """A single path component made from `name`: no separators, never hidden, never ``.``
    or ``..``, at most `MAX_NAME` characters.

    A name that is already safe comes back unchanged (``resnet50`` stays ``resnet50``), so file
    names stay readable. A name that had to change gets a short hash of the original appended,
    so two different names (``a/b`` and ``a_b``) never share a file.
    """
    safe = _UNSAFE.sub("_", name)
    if safe.startswith("."):
        safe = "_" + safe[1:]
    if safe.split(".", 1)[0].upper() in _RESERVED:
        safe = "_" + safe
    if safe == name and safe and len(safe) <= MAX_NAME:
        return safe
    tag = "-" + _digest(name)
    return safe[: MAX_NAME - len(tag)] + tag


def inside(base: str | Path, path: str | Path) -> Path:
    """`path` (relative paths are taken relative to `base`) resolved, if it lies within `base`.

    Raises `UsageError` when it does not: through ``..``, an absolute path, or a symbolic link
    that points elsewhere. Call it on every path a writer builds from user-derived names.
    """
    root = Path(base).resolve()
    target = (root / path).resolve()
    if target != root and root not in target.parents:
        raise UsageError(f"refusing to write {target}: it is outside {root}",
                         hint="file names derived from case names must stay in the report "
                         "folder")
    return target


def display_path(path: str | Path) -> str:
    """A path as shown to users in messages: relative to the working directory when it is
    inside it, else as given. A symbolic link is shown by its own name, not its target's: the
    name the user wrote (`cl_validate.atomic.through_links` says where it leads)."""
    p = Path(path)
    absolute = Path(os.path.abspath(p))
    cwd = Path.cwd()
    for candidate in (absolute, _real_folder(absolute)):
        try:
            return str(candidate.relative_to(cwd))
        except ValueError:
            continue
    return str(p)


def _real_folder(path: Path) -> Path:
    """`path` with its folder resolved and its own name kept (a link stays a link)."""
    try:
        return Path(os.path.realpath(path.parent)) / path.name
    except OSError:  # pragma: no cover - realpath does not raise without strict=True
        return path


def repo_root(start: Path, env: Mapping[str, str] | None = None) -> Path:
    """The repository a file belongs to, as CI publishers resolve annotation paths:
    ``$GITHUB_WORKSPACE`` when the file is inside it, else the nearest folder above it that
    holds ``.git`` (a folder, or a file in a worktree or submodule), else the working
    directory."""
    env = os.environ if env is None else env
    here = start.resolve()
    workspace = env.get("GITHUB_WORKSPACE")
    if workspace:
        ws = Path(workspace).resolve()
        if here == ws or ws in here.parents:
            return ws
    return _git_top(here if here.is_dir() else here.parent) or Path.cwd().resolve()


@functools.lru_cache(maxsize=256)
def _git_top(folder: Path) -> Path | None:
    for d in (folder, *folder.parents):
        if (d / ".git").exists():
            return d
    return None


def repo_path(path: str | Path, env: Mapping[str, str] | None = None) -> str:
    """`path` as reports name it: relative to `repo_root`, with forward slashes, never
    absolute (a file outside the root is named through ``..``), the same from any working
    directory: what GitHub's annotations and the JUnit publishers resolve."""
    p = Path(path).resolve()
    root = repo_root(p, env)
    return Path(os.path.relpath(p, root)).as_posix()


# --------------------------------------------------------------------------------------------
# Reading files users name
# --------------------------------------------------------------------------------------------
FOLDER = "a folder"
BROKEN_LINK = "a broken symbolic link"


class NotRegularFile(OSError):
    """`path` is something else than a regular file (through links); `kind` says what, as
    a phrase: ``a FIFO (named pipe)``, ``a folder``, ``a symbolic link loop`` ..."""

    def __init__(self, path: str | Path, kind: str) -> None:
        if kind == FOLDER:  # the OS's own words, as reading it would have said
            super().__init__(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        else:
            super().__init__(f"{kind}, not a regular file")
            self.strerror = str(self)  # what messages quote of an OSError
            self.filename = str(path)
        self.kind = kind


_KINDS = ((stat.S_ISDIR, FOLDER), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a plain file")


def not_regular(path: str | Path) -> str | None:
    """What `path` is when it is not a regular file (followed through links) — a phrase for a
    message, see `NotRegularFile` — or None for a regular file, nothing at all, or what
    cannot be looked at (opening it then says why, in the OS's words)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return BROKEN_LINK if os.path.islink(path) else None
    except OSError as exc:
        return "a symbolic link loop" if exc.errno == errno.ELOOP else None
    return _kind(mode)


def read_regular(path: str | Path, limit: int | None = None) -> bytes:
    """The bytes of the regular file `path` (through links). Anything else raises
    `NotRegularFile` without being opened; a missing file raises `FileNotFoundError`; one
    larger than `limit` bytes raises `OSError` (EFBIG) unread."""
    kind = not_regular(path)
    if kind is not None:
        raise NotRegularFile(path, kind)
    # O_NONBLOCK: should a FIFO take the file's place after the check, opening it still
    # returns at once, and the fstat below refuses it.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        kind = _kind(st.st_mode)
        if kind is not None:
            raise NotRegularFile(path, kind)
        if limit is None:
            return f.read()
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"over {limit} bytes", str(path))
        data = f.read(limit + 1)  # it may have grown since
        if len(data) > limit:
            raise OSError(errno.EFBIG, f"over {limit} bytes", str(path))
        return data


# --------------------------------------------------------------------------------------------
# Report paths
# --------------------------------------------------------------------------------------------
class ReportKind(enum.Enum):
    """What a report file an option writes is, so an existing file can be recognized as one
    (and anything else left alone)."""

    JUNIT = "JUnit report"
    MARKDOWN = "Markdown report"
    TREND_JSON = "trend figures file"  # ``run --trend-json``: a JSON list of named values


#: The first line of every Markdown file cl_validate writes (``run --markdown``, ``ledger
#: --markdown``): an HTML comment, which GitHub does not render. `report_file` replaces a
#: Markdown file only when it starts with it (or with the heading a report written before the
#: marker existed starts with).
MARKDOWN_MARKER = "<!-- cl_validate report: written by cl-validate, replaced on its next run -->"
_OLD_MARKDOWN_HEADINGS = ("## cl_validate: ", "## What the runtime transforms are there for")


def is_report(data: bytes, kind: ReportKind) -> bool:
    """Whether `data` (an existing file's bytes) is a report of `kind` that a new one may
    replace: a JUnit report's XML root is ``<testsuites>`` or ``<testsuite>``; a Markdown
    report starts with `MARKDOWN_MARKER` (or, written before the marker, with the report's or
    the ledger's heading). An empty file is anybody's."""
    if not data.strip():
        return True
    if kind is ReportKind.MARKDOWN:
        first = data.removeprefix(b"\xef\xbb\xbf").split(b"\n", 1)[0].decode("utf-8", "replace")
        return first.strip() == MARKDOWN_MARKER or first.startswith(_OLD_MARKDOWN_HEADINGS)
    if kind is ReportKind.TREND_JSON:  # a list of {name, unit, value, ...}: benchmark figures
        try:
            entries = json.loads(data)
        except ValueError:
            return False
        return isinstance(entries, list) and all(
            isinstance(e, dict) and {"name", "unit", "value"} <= e.keys() for e in entries)
    try:  # the root's start is enough: the rest of the file is not parsed
        for _, elem in ET.iterparse(io.BytesIO(data), events=("start",)):
            return elem.tag in ("testsuites", "testsuite")
    except ET.ParseError:
        return False
    return False  # pragma: no cover - a document has a root


def report_file(path: str | Path, option: str, kind: ReportKind | None = None) -> Path:
    """Check a report path named on the command line before anything runs.

    Refuses a path that is a folder, or whose parent is a file, in one line naming `option`;
    missing parent folders are fine (the writer creates them). With `kind`, an existing file
    is replaced only when it is empty or a report of that `kind` (see `is_report`): ``--junit
    model_cases/resnet50.toml`` is refused, not obeyed. Anything but a regular file (a FIFO,
    a device, a link loop) is refused too: the report is written through a link to a regular
    file.
    """
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{option} {path}: is a folder, not a file",
                         hint=f"name the report file, e.g. {option} {p / 'report.xml'}")
    for parent in p.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"{option} {path}: {parent} is a file, not a folder",
                                 hint="choose a report path in a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise UsageError(f"{option} {path}: cannot write into {parent}",
                                 hint="choose a folder you can write to")
            break
    if kind is not None:
        _replaceable(p, option, kind)
    return p


def _replaceable(p: Path, option: str, kind: ReportKind) -> None:
    what = not_regular(p)
    if what == BROKEN_LINK:
        return  # written through, as a plain write would: the link's target is created
    if what is not None:
        raise UsageError(f"{option} {p}: is {what}, not a report file",
                         hint="name a regular file for the report")
    try:
        data = read_regular(p)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"{option} {p}: cannot read the existing file: "
                         f"{exc.strerror or exc}", hint="choose another report path") from None
    if not is_report(data, kind):
        raise UsageError(f"{option} {p}: refusing to replace a file that is not a "
                         f"{kind.value}", hint="choose another report path, or delete that "
                         "file first if it is yours to lose")


def _identity(path: str | Path) -> tuple[int, int] | str:
    """What two spellings of one file share: device and inode when it exists (hard and
    symbolic links included), else its absolute path with every link resolved."""
    try:
        st = os.stat(path)
        return (st.st_dev, st.st_ino)
    except OSError:
        return os.path.realpath(path)


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether `a` and `b` name one file, however spelled (``r.xml`` and ``./x/../r.xml``, a
    symbolic or hard link to it), existing or not yet."""
    return _identity(a) == _identity(b)


def distinct_files(named: Iterable[tuple[str, str | Path]]) -> None:
    """Refuse, in one line naming both options, two reports of one command — (option, path)
    pairs — that are the same file: ``--junit r.xml --markdown ./r.xml``, or a link to it.
    One report would overwrite the other."""
    pairs = list(named)
    for i, (option, path) in enumerate(pairs):
        for first, first_path in pairs[:i]:
            if same_file(path, first_path):
                raise UsageError(f"{option} {path} is the same file as {first} {first_path}",
                                 hint="give each report a file of its own")
