"""Reading what a case sends: its case process's result pipe and each target process's.

Every pipe is read without ever blocking, a tick at a time, into typed messages
(`cl_validate.measurements.wire`, `cl_validate.measurements.messages`) bounded in size: the
model's code runs in the process that writes there, so stray bytes, a forged pickle, a
result for a target it does not owe or a message after its last are that case's error
(`corrupt_result`), never the run's. What a case sends counts toward its memory cap
(`cl_validate.suite.limits`). A message moves the case along its lifecycle
(`cl_validate.suite.lifecycle.CaseState`); a target's result goes to the run loop that owns
the case as it arrives. Costs a read per pipe with data per tick, and at most
`MAX_RESULT_BYTES` held per case.
"""

from __future__ import annotations

import os
import time

from cl_validate.checks.compile import CaseKind
from cl_validate.measurements import wire
from cl_validate.measurements.messages import (
    CaseDone,
    CaseFailed,
    ChildExited,
    Prepared,
    TargetMeasured,
    decode,
)
from cl_validate.suite.lifecycle import CaseOwner, Job, Stream
from cl_validate.suite.limits import MAX_RESULT_BYTES


def read_results(job: Job, owner: CaseOwner, cap_mb: int) -> None:
    """Whatever the case and its target processes sent since the last tick, without
    blocking: the targets' pipes first (a result written before the case said it was
    done is read before the case's end). `cap_mb`: its memory cap."""
    if job.failed:
        return
    for target, stream in list(job.targets.items()):
        _drain(job, stream, target, owner, cap_mb)
        if job.failed:
            return
    _drain(job, job.main, None, owner, cap_mb)


def _drain(job: Job, stream: Stream, target: str | None, owner: CaseOwner,
           cap_mb: int) -> None:
    while not stream.eof and not job.failed:
        try:
            data = os.read(stream.fd, 1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            stream.eof = True
            if target is None and job.over_at is None:
                job.over_at = time.perf_counter()
            return
        job.received += len(data)
        if job.received > cap_mb << 20:  # what it sends counts toward its cap
            owner.fail(job, f"the case process sent {job.received >> 20} MB of results, over "
                       f"its {cap_mb} MB memory cap (max_memory_mb: the results it sends "
                       "count toward it)", CaseKind.OUT_OF_MEMORY)
            return
        try:
            if job.received > MAX_RESULT_BYTES:
                raise wire.WireError(f"more than {MAX_RESULT_BYTES >> 20} MB of results")
            for payload in stream.reader.feed(data):
                if job.failed:  # what a failed case still sends changes nothing
                    return
                if stream.done:
                    raise wire.WireError("more after its last message")
                if target is None:
                    _case_news(job, payload, owner)
                else:
                    _target_news(job, target, stream, payload, owner)
        except wire.WireError as exc:
            owner.fail(job, f"the case process sent what is not a result on its result pipe "
                       f"({exc}): the model's code writes there", CaseKind.CORRUPT_RESULT)
            return


def _target_news(job: Job, target: str, stream: Stream, payload: bytes | memoryview,
                 owner: CaseOwner) -> None:
    msg = decode(payload, (TargetMeasured,))
    if msg.measurement.target != target or target not in job.pending:
        raise wire.WireError(f"a result for target {msg.measurement.target!r} on the "
                             f"pipe of {target!r}")
    stream.done = True
    job.note(msg)
    owner.deliver(job, msg, stream.since)


def _case_news(job: Job, payload: bytes | memoryview, owner: CaseOwner) -> None:
    msg = decode(payload, (TargetMeasured, Prepared, ChildExited, CaseDone, CaseFailed))
    if isinstance(msg, TargetMeasured):  # answered without measuring: cache, an error
        target = msg.measurement.target
        if target not in job.pending or target in job.targets:
            raise wire.WireError(f"a result for target {target!r} it does not owe")
        job.note(msg)
        owner.deliver(job, msg, job.main.since)
        job.main.since = time.perf_counter()
    elif isinstance(msg, Prepared):
        job.prepared(msg.targets)
    elif isinstance(msg, ChildExited):
        if msg.target not in job.targets:
            raise wire.WireError(f"an exit of target {msg.target!r} it was not granted")
        job.exited[msg.target] = msg.status
    elif isinstance(msg, CaseDone):
        job.reported(msg.inputs, msg.unseen)
    elif isinstance(msg, CaseFailed):
        owner.fail(job, msg.message, msg.kind, msg.detail)
