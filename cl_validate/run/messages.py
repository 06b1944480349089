"""What the parent and a worker process say to each other over the pipe, as typed messages.

Parent → worker: `RunCase` (measure this case), `Stop` (exit now).
Worker → parent: `Ready` (imports done, waiting for work), `TargetMeasured` (one target of the
current case, as soon as it is done), `CaseDone` (every target sent), `CaseCrashed` (an
exception escaped the measurement: a bug, with its traceback).
"""

from __future__ import annotations

from dataclasses import dataclass

from cl_validate.checks.measurement import Measurement
from cl_validate.run.options import RunOptions
from cl_validate.spec import CaseSpec


@dataclass(frozen=True)
class RunCase:
    case: CaseSpec
    options: RunOptions


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Ready:
    pass


@dataclass(frozen=True)
class TargetMeasured:
    measurement: Measurement


@dataclass(frozen=True)
class CaseDone:
    pass


@dataclass(frozen=True)
class CaseCrashed:
    traceback: str


ToWorker = RunCase | Stop
FromWorker = Ready | TargetMeasured | CaseDone | CaseCrashed
