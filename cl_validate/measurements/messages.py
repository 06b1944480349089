"""What the processes of a run say to each other, as typed messages (framed by
`cl_validate.measurements.wire`).

Four kinds of process take part: the run's *parent* (judges and reports; never imports torch
or TVM), a *zygote* (imports torch and TVM once, never runs a model's code, forks a fresh
*case process* for every case), the case processes (they run the model's code: build it, run
PyTorch, export it), and a case's *target processes*, which a case process forks for each
target when the parent grants it a slot (they share its export).

- parent → zygote: `StartCase` (with the case's result pipe and control socket passed alongside
  as file descriptors), `Stop`;
- zygote → parent: `Ready` (imports done; which devices exist), `Forked` (a case's process),
  `Exited` (how it ended);
- parent → case process, on its control socket: `Grant` (measure this target now, with the
  result pipe passed alongside); the socket's end is the parent's end: the case ends;
- case process → parent, on its result pipe: `TargetMeasured` for a target it answers without
  measuring it (the cache, an error that stops the case), `Prepared` (the targets left, ready
  to be granted), `ChildExited` (how a target process ended), then `CaseDone` (with the files
  the case read, for the cache), or `CaseFailed`;
- target process → parent, on its granted pipe: one `TargetMeasured`.

A message is a frame holding ``[name, body]``; `decode` reads the body as the type its name
says, and refuses any other name or shape (`WireError`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from cl_validate.measurements import wire
from cl_validate.measurements.measurement import Measurement
from cl_validate.spec import CaseSpec
from cl_validate.spec.options import RunOptions

#: The environment variable the parent gives the zygote its import path in (a model module the
#: parent can import, the case processes can import too).
SYS_PATH_ENV = "CL_VALIDATE_SYS_PATH"


@dataclass(frozen=True)
class StartCase:
    """Fork a case process for `case` (job `job` of this run). Passed with it: the case's
    result pipe, its control socket and its log (stdout and stderr), as descriptors."""

    job: int
    case: CaseSpec
    options: RunOptions
    threads: int


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Ready:
    #: device type (``cpu``, ``cuda``, ``opencl``...) → whether this machine has one
    #: (answers --require-device)
    devices: dict[str, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class Forked:
    job: int
    pid: int


@dataclass(frozen=True)
class Exited:
    job: int
    pid: int
    status: int  # the wait status, as os.waitpid gives it


@dataclass(frozen=True)
class Grant:
    """Measure `target` now, in a process of its own; report on the pipe passed with this."""

    target: str


@dataclass(frozen=True)
class Prepared:
    """The case's model, references and export are ready: `targets` wait for their grants."""

    targets: tuple[str, ...]


@dataclass(frozen=True)
class ChildExited:
    """How the target process of `target` ended (a wait status)."""

    target: str
    status: int


@dataclass(frozen=True)
class FileStamp:
    """A file a case read while it was measured, as it was then: the cache's key for an
    unchanged case is checked against these without running the case again."""

    path: str
    size: int
    mtime_ns: int
    sha256: str
    #: a symbolic link on the way to a file the case read (the path as the model named it):
    #: where it pointed; the other fields are then unused
    link: str | None = None
    #: a path where a module would have been found before the one imported (a file put
    #: there later shadows it): it did not exist; the other fields are then unused
    absent: bool = False


@dataclass(frozen=True)
class TargetMeasured:
    measurement: Measurement
    key: str | None = None  # its cache key (None: not cacheable, or no cache)
    cached: bool = False  # read from the cache, not measured
    #: Wall time this case × target cost the run, by the parent's clock (set by the parent:
    #: the time since the case's previous result, or since it was handed out).
    wall_seconds: float | None = None
    #: files its target process read that the case process had not (a compile stage's)
    inputs: tuple[FileStamp, ...] = ()


@dataclass(frozen=True)
class CaseDone:
    #: the files the case read (its model's sources, data files): what the cache's direct
    #: key is checked against on the next run
    inputs: tuple[FileStamp, ...] = ()
    #: why what the case read is not known whole (a process of it its open watcher could
    #: not read): then it is not kept in the cache; "" when it is known
    unseen: str = ""


@dataclass(frozen=True)
class CaseFailed:
    message: str
    kind: str  # "ModelExited", "InternalError"
    detail: str = ""  # a traceback


FromCase = TargetMeasured | Prepared | ChildExited | CaseDone | CaseFailed
_TYPES: dict[str, type[Any]] = {t.__name__: t for t in (
    StartCase, Stop, Ready, Forked, Exited, Grant, TargetMeasured, Prepared, ChildExited,
    CaseDone, CaseFailed)}


#: The packet that hands a case to the zygote: its `StartCase` is in a file passed beside it
#: (`wire.message_file`), after the case's result pipe, control socket and log.
CASE_PACKET = b"case"


def frame(msg: Any) -> bytes:
    """One message as a frame."""
    return wire.frame((type(msg).__name__, msg))


def decode(payload: bytes | memoryview, allowed: tuple[type[Any], ...]) -> Any:
    """The message in a frame's payload, one of `allowed`, or `wire.WireError`."""
    name, body = wire.decode(payload, tuple[str, msgspec.Raw])
    kind = _TYPES.get(name)
    if kind is None or kind not in allowed:
        raise wire.WireError(f"unexpected message {name[:40]!r}")
    return wire.decode(body, kind)
