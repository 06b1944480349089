"""One case handed to a case process, as the run's parent sees it: its pipes, what it still
owes, and where it stands in its lifecycle, an explicit `CaseState`.

A case is handed to the zygote, forked into a case process, prepared there (model, PyTorch,
export), then each of its targets is measured in a target process of its own, granted a slot
at a time; the case process says it is done, its target processes close their pipes, and the
case is over. Or it fails at any point: a crash, a limit, a corrupt message, a signal. Every
step is a message (from the zygote or on a result pipe), so the state moves only where a
message is read or a failure decided, through `Job.advance`, which refuses a move the
lifecycle does not have: a bug in the run loop shows as that, not as a case counted twice or
a slot never given back. The slots a case holds (`Job.busy`) and the targets it will want
(`cl_validate.suite.slots`) are read off its state. Plain data: costs nothing to keep.
"""

from __future__ import annotations

import enum
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cl_validate.measurements import wire
from cl_validate.measurements.messages import FileStamp, TargetMeasured
from cl_validate.spec import CaseSpec
from cl_validate.suite.case_logs import log_size, log_tail


class CaseState(enum.Enum):
    """Where a case handed out stands. A case the zygote died before forking is handed
    out again as a new job (`cl_validate.suite.run_loop`); the old one is dropped."""

    #: sent to the zygote; it has not said it forked the case process yet
    HANDED_OUT = "handed out"
    #: forked: model, PyTorch, export run in the case process, on one slot
    PREPARING = "preparing"
    #: export done (``Prepared``): its targets wait for a slot each, or are measuring
    PREPARED = "prepared"
    #: the case process said it is done (``CaseDone``); its target processes may still be
    #: closing their pipes
    REPORTED = "reported"
    #: over: every target reported, its processes ended, its pipes and log closed
    DONE = "done"
    #: ended by an error: every target not reported yet got it, its processes killed
    FAILED = "failed"


#: The moves the lifecycle has. ``Forked`` may be read after what the case process sent on
#: its pipe (two channels, read in turn), and a case answered whole by the cache sends no
#: ``Prepared``: hence the skips. FAILED → FAILED: failing a failed case again is a no-op.
_MOVES: dict[CaseState, frozenset[CaseState]] = {
    CaseState.HANDED_OUT: frozenset({CaseState.PREPARING, CaseState.PREPARED,
                                     CaseState.REPORTED, CaseState.FAILED}),
    CaseState.PREPARING: frozenset({CaseState.PREPARED, CaseState.REPORTED, CaseState.FAILED}),
    CaseState.PREPARED: frozenset({CaseState.REPORTED, CaseState.FAILED}),
    CaseState.REPORTED: frozenset({CaseState.DONE, CaseState.FAILED}),
    CaseState.DONE: frozenset(),
    CaseState.FAILED: frozenset({CaseState.FAILED}),
}


@dataclass
class Stream:
    """A pipe a case reports on: its own, or one of its target processes'."""

    fd: int
    reader: wire.FrameReader = field(default_factory=wire.FrameReader)
    eof: bool = False
    done: bool = False  # its last message arrived (a target's result; the case's end)
    since: float = 0.0  # what its next result's wall time counts from


@dataclass
class Job:
    """One case handed to a case process, and its target processes."""

    id: int
    case: CaseSpec
    log_fd: int  # its output (`LogFiles.new_log`); -1 once closed
    main: Stream  # the case process's result pipe
    control: socket.socket | None  # grants go here; closing it ends the case
    handed: float  # when it was handed out
    pending: list[str]  # targets not reported yet
    zygote: int  # the number of the zygote it was handed to (`ZygoteClient`)
    state: CaseState = CaseState.HANDED_OUT
    pid: int | None = None  # its case process, once the zygote said it forked it
    status: int | None = None  # its wait status, once the zygote reported it
    waiting: list[str] = field(default_factory=list)  # prepared, not granted yet
    targets: dict[str, Stream] = field(default_factory=dict)  # granted
    exited: dict[str, int] = field(default_factory=dict)  # a target process's wait status
    received: int = 0  # bytes of results it sent
    keys: dict[str, str] = field(default_factory=dict)  # target → cache key
    inputs: dict[str, FileStamp] = field(default_factory=dict)
    unseen: str = ""  # why its inputs are not known whole (then not remembered)
    over_at: float | None = None  # when the case process finished (or its pipe closed)

    # -- its lifecycle -----------------------------------------------------------------------
    def advance(self, to: CaseState) -> None:
        """Move to `to`; a move the lifecycle does not have is a bug of the run loop."""
        if to not in _MOVES[self.state]:
            raise AssertionError(f"case {self.case.label}: {self.state.value} → {to.value}")
        self.state = to

    @property
    def failed(self) -> bool:
        return self.state is CaseState.FAILED

    @property
    def past_export(self) -> bool:
        """Whether it needs no slot to prepare any more: prepared, or done without (a case
        answered whole by the cache never prepares). Only a prepared one has targets
        `waiting` for a grant."""
        return self.state in (CaseState.PREPARED, CaseState.REPORTED)

    def forked(self, pid: int) -> None:
        """The zygote forked its case process (it may have reported already)."""
        self.pid = pid
        if self.state is CaseState.HANDED_OUT:
            self.advance(CaseState.PREPARING)

    def prepared(self, targets: Sequence[str]) -> None:
        """Its export is done: `targets` wait for grants."""
        if self.state is CaseState.PREPARED or not set(targets) <= set(self.pending):
            raise wire.WireError("prepared targets it does not owe")
        self.advance(CaseState.PREPARED)
        self.waiting = [t for t in self.pending if t in targets]

    def reported(self, inputs: Sequence[FileStamp], unseen: str = "") -> None:
        """The case process said it is done, having read `inputs` (and more, when `unseen`
        says why: then its measurements are not kept for the next run)."""
        self.unseen = unseen
        self.main.done = True
        self.over_at = time.perf_counter()
        self.note_inputs(inputs)
        self.advance(CaseState.REPORTED)

    def note(self, msg: TargetMeasured) -> None:
        """What a target's result says for the cache: its key and the files it read."""
        if msg.key is not None:
            self.keys[msg.measurement.target] = msg.key
        self.note_inputs(msg.inputs)

    def note_inputs(self, inputs: Sequence[FileStamp]) -> None:
        for s in inputs:
            self.inputs[s.path] = s

    # -- what it holds -----------------------------------------------------------------------
    @property
    def busy(self) -> int:
        """Slots it holds: one while it prepares, one per target process measuring."""
        if self.state is CaseState.FAILED:
            return 0
        measuring = sum(1 for s in self.targets.values() if not s.done and not s.eof)
        return measuring if self.past_export else 1 + measuring

    def streams(self) -> list[Stream]:
        return [self.main, *self.targets.values()]

    def buffered(self) -> int:
        """Bytes of results this process holds for the case, not whole messages yet."""
        return sum(s.reader.pending for s in self.streams())

    def tail(self) -> str:
        """The last output of the case (stdout and stderr, C-level output too), a native
        crash backtrace collapsed to its first frames."""
        return log_tail(self.log_fd)

    def output_size(self) -> int:
        return log_size(self.log_fd)


class CaseOwner(Protocol):
    """What the helpers that watch one case (`result_pipes`, `limits`, `reaping`) ask of the
    run loop that owns it (`cl_validate.suite.run_loop.RunLoop`)."""

    def deliver(self, job: Job, msg: TargetMeasured, since: float) -> None:
        """A target's result, its wall time counted from `since`."""

    def fail(self, job: Job, message: str, kind: str, detail: str = "",
             only: Sequence[str] | None = None) -> None:
        """Error measurements for the targets of `job` not reported yet (or `only` those);
        failing all of them ends the case."""

    def orphaned(self, job: Job) -> bool:
        """Whether the zygote `job` was handed to is gone (its case process then comes to
        this process, a subreaper, when it ends)."""
