"""How the run's `jobs` slots are shared between cases being prepared and targets being
measured, and which waiting target gets a slot first.

A case holds one slot while its case process prepares it (model, PyTorch, export), then each
of its targets holds one while a target process measures it. The policy (`share_slots`)
prepares cases ahead of their turn while few targets are in reserve, so that a run ends with
targets on every slot rather than with one last preparation the other slots wait for; then
it grants waiting targets; a slot still free prepares another case. Targets whose numerics
run here go first (`next_targets`): they take the longest, and a run ends sooner when the
long ones start early. Pure functions of the loop's state, run once per tick
(`benchmarks/slots.py` replays them without running anything; `tests/test_slots.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from cl_validate.spec.options import RunOptions
from cl_validate.spec.placement import placement
from cl_validate.suite.lifecycle import Job


def share_slots(free: int, jobs: int, reserve: int, waiting: int,
                upcoming: Sequence[int]) -> tuple[int, int]:
    """How `free` slots are shared: (cases to start preparing, waiting targets to grant).

    `reserve` is the targets that will want a slot without another case being prepared
    (waiting for a grant, or of cases being prepared), `waiting` those ready for a grant now,
    `upcoming` the target counts of the next cases (empty while no case can start). Cases
    are prepared ahead while the reserve is under `jobs`: the end of a run then has targets
    to spread over the slots, not one last preparation every other slot waits for. Then
    waiting targets; a slot still free prepares another case. Never more than `free`."""
    prepare = 0
    while prepare < min(free, len(upcoming)) and reserve < jobs:
        reserve += upcoming[prepare]
        prepare += 1
    grant = max(0, min(free - prepare, waiting))
    prepare += max(0, min(free - prepare - grant, len(upcoming) - prepare))
    return prepare, grant


def reserve(running: Iterable[Job]) -> int:
    """The targets of `running` that will want a slot without another case being prepared:
    those waiting for a grant (of a case past its export), and those of cases still being
    prepared."""
    return sum(len(j.waiting) if j.past_export else len(j.pending)
               for j in running if not j.failed)


def next_targets(running: Iterable[Job], free: int, options: RunOptions,
                 devices: dict[str, bool]) -> list[tuple[Job, str]]:
    """The prepared targets the `free` slots go to: those whose numerics run here first
    (they take the longest: a run ends sooner when the long ones start early), then in
    the order the cases were handed out. `devices`: the device types this machine has."""
    waiting = [(job, t) for job in running if job.past_export and not job.failed
               for t in job.waiting]

    def runs_here(job: Job, target: str) -> bool:
        place = placement(job.case.target_def(target), options.rpc,
                          lambda d: devices.get(d, False))
        return place.where == "local" and not options.static_only

    waiting.sort(key=lambda jt: (not runs_here(*jt), jt[0].id,
                                 jt[0].waiting.index(jt[1])))
    return waiting[:max(free, 0)]
