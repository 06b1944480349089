"""What the parent and a worker process say to each other over the pipe, as typed messages.

Parent → worker: `RunCase` (validate, then measure or reuse this case), `Stop` (exit now).
Worker → parent: `Ready` (imports done; which devices exist), `TargetMeasured` (one target of
the current case, as soon as it is known), `CaseDone` (every target sent), `CaseFailed` (the
case could not finish: the model's code called ``sys.exit``, or a bug in cl_validate).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cl_validate.measurements.measurement import Measurement
from cl_validate.spec import CaseSpec
from cl_validate.spec.options import RunOptions


@dataclass(frozen=True)
class RunCase:
    case: CaseSpec
    options: RunOptions


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Ready:
    #: device type (``cpu``, ``cuda``, ``opencl``...) → whether this machine has one
    #: (answers --require-device)
    devices: dict[str, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class TargetMeasured:
    measurement: Measurement
    key: str | None = None  # its cache key (None: not cacheable, or no cache)
    cached: bool = False  # read from the cache, not measured
    #: Wall time this case × target cost the run, by the parent's clock (set by the parent:
    #: the time since the worker's previous result, its start-up for its first case).
    wall_seconds: float | None = None


@dataclass(frozen=True)
class CaseDone:
    pass


@dataclass(frozen=True)
class CaseFailed:
    message: str
    kind: str  # "ModelExited", "InternalError"
    detail: str = ""  # a traceback


ToWorker = RunCase | Stop
FromWorker = Ready | TargetMeasured | CaseDone | CaseFailed
