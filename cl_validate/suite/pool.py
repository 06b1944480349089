"""Case processes: every case runs in a fresh process of its own, with a timeout, a memory cap
and an output cap, and nothing it does reaches another case, the cache or this process.

A *zygote* (`cl_validate.session.zygote`) imports torch and TVM once and forks a new process
for every case (`cl_validate.session.case_process`): whatever a case's code changes in its process
(a monkey-patch, a global flag, a closed stdout) dies with it. A case reports on a pipe of its
own, in typed messages read without ever blocking and bounded in size
(`cl_validate.measurements.wire`): stray bytes, a forged pickle or a silent half-message are
that case's error. A segfault, a hang, ``sys.exit`` or ``os._exit``, a model that eats the
runner's memory or floods its output, a child process left running, a signal sent to this
process: each costs that one case, never the report. This process sees the case end, or ends
it (its whole process tree), turns that into an `error` verdict with the reason and the tail of
the case's output, and goes on. A zygote that dies (a case may kill it) is started again; the
cases it was about to start are handed to the new one.

`WorkerPool` is the front; the work is split by job, beside it: the logs (`case_logs`), the
zygote (`zygote_client`), a case's lifecycle (`lifecycle`), reading its results
(`result_pipes`), its limits (`limits`), the end of its processes (`reaping`), the slot policy
(`slots`) and the loop of one run (`run_loop`). This process never imports torch or TVM and
never runs a model's code; it costs the zygote (torch and TVM loaded once) and a few system
calls per running case per tenth of a second.
"""

from __future__ import annotations

import itertools
import queue
import signal
import time
from collections.abc import Sequence

from cl_validate import procs
from cl_validate.spec import CaseSpec
from cl_validate.spec.options import RunOptions, require_devices
from cl_validate.spec.placement import driver_loads
from cl_validate.suite.case_logs import LogFiles, readable_tail
from cl_validate.suite.limits import MAX_OUTPUT_BYTES, MAX_RESULT_BYTES
from cl_validate.suite.reaping import Reaper
from cl_validate.suite.run_loop import Hostile, OnInputs, OnTarget, RunLoop
from cl_validate.suite.slots import share_slots
from cl_validate.suite.zygote_client import ZYGOTE_MODULE, ZygoteClient

__all__ = ["MAX_OUTPUT_BYTES", "MAX_RESULT_BYTES", "ZYGOTE_MODULE", "OnInputs", "OnTarget",
           "WorkerPool", "readable_tail", "share_slots"]


class WorkerPool:
    """Runs cases in fresh case processes, `jobs` at a time; use as a context manager.

    With `reap_orphans` (the CLI), this process becomes a subreaper too: what a dead zygote
    leaves behind comes here, and is ended. Leave it off in a process that has children of
    its own (the pytest plugin: pytest-xdist's)."""

    def __init__(self, options: RunOptions, *, reap_orphans: bool = False) -> None:
        self.options = options
        self.jobs = max(1, options.jobs)
        self._logs = LogFiles()
        self._reaper = Reaper(reap_orphans and procs.become_subreaper())
        self._zygotes = ZygoteClient(self._logs, self._reaper)
        self._ids = itertools.count(1)
        #: signals this process got from the run's own processes (`suite.signals`)
        self._hostile: queue.SimpleQueue[Hostile] = queue.SimpleQueue()
        self._started = time.perf_counter()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def devices(self) -> dict[str, bool]:
        """Which device types (``cuda``, ``opencl``...) this machine has, as the zygote sees
        them (this process never loads TVM to ask)."""
        return self._zygotes.wait_for_devices()

    def require_devices(self, cases: Sequence[CaseSpec]) -> None:
        """``--require-device``, answered by the zygote (see `devices`). A device type whose
        driver's libraries do not load here has no device whatever the zygote says: that
        fails at once (a GPU job on a runner without a GPU, in a second, not after the
        zygote's 10 s of imports and warm-up)."""
        require_devices(cases, self.options, driver_loads)
        have = self.devices()
        require_devices(cases, self.options, lambda d: have.get(d, False))

    def hostile_signal(self, signo: signal.Signals, sender: int, chain: list[int]) -> None:
        """A signal one of the run's own processes sent to this one (`suite.signals`): the
        case it came from fails; called from the signal thread."""
        self._hostile.put((signo, sender, chain))

    def run(self, cases: Sequence[CaseSpec], report: OnTarget,
            on_inputs: OnInputs | None = None) -> None:
        """Measure `cases`; each target's result goes to `report` as it arrives, and the files
        a case read (with its targets' cache keys) to `on_inputs`. A case that could not
        finish arrives as an error measurement per target not reported yet, with the tail of
        the case's output.

        `jobs` slots are shared by preparing cases (model, PyTorch, export) and measuring
        targets (`share_slots`): no slot idles while there is work, and cases are prepared
        ahead of their turn so that a run ends with targets on every slot, not with one
        last preparation the other slots wait for."""
        RunLoop(cases, self.options, self.jobs, zygotes=self._zygotes, reaper=self._reaper,
                logs=self._logs, hostile=self._hostile, ids=self._ids, started=self._started,
                report=report, on_inputs=on_inputs).run()

    def shutdown(self) -> None:
        self._zygotes.stop()
