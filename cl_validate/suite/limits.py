"""What one case may take: its time, its memory, its output and the results it sends.

Checked by the run's parent on every tick of the run loop (`cl_validate.suite.run_loop`),
never by the case process itself: the model's code runs there and could switch a check off.
A case over a limit fails with its own error kind (`timeout`, `out_of_memory`,
`output_flood`), its whole process tree ended. Memory is the case process's tree's resident
set (`cl_validate.procs.rss_mb`, read from ``/proc`` each tick: a few reads per process) plus
the results it sent that this process holds: what a case sends counts toward its cap, so a
flood of results cannot take the parent's memory either.
"""

from __future__ import annotations

import time

from cl_validate import procs
from cl_validate.checks.compile import CaseKind
from cl_validate.measurements import wire
from cl_validate.spec.options import RunOptions
from cl_validate.suite.lifecycle import CaseOwner, Job

#: Output one case may write (stdout and stderr together) before it is stopped: a model that
#: prints in a loop must not fill the runner's disk.
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
#: What one case may send on its result pipe, all messages together.
MAX_RESULT_BYTES = 2 * wire.MAX_FRAME


def memory_cap(options: RunOptions, job: Job) -> int:
    """The case's memory cap in MB (the run's ``--max-memory-mb`` or the case's)."""
    return int(options.max_memory_mb or job.case.max_memory_mb)


def enforce_limits(options: RunOptions, job: Job, owner: CaseOwner) -> None:
    """Fail `job` (through `owner`) if it is over its timeout, its memory cap or the output
    it may write."""
    limit_s = options.timeout or job.case.timeout
    if time.perf_counter() - job.handed > limit_s:
        owner.fail(job, f"timed out after {limit_s:g} s (timeout)", CaseKind.TIMEOUT)
        return
    if job.pid is not None:
        cap = memory_cap(options, job)
        tree = [job.pid, *procs.tree(job.pid)]
        rss = procs.rss_mb(tree)
        held = job.buffered() / (1 << 20)  # results it sent that this process holds
        if rss is not None and rss + held > cap:
            what = "case process" if len(tree) == 1 else \
                f"case process and {len(tree) - 1} process(es) it started"
            also = f" and {held:.0f} MB of results sent" if held >= 1 else ""
            owner.fail(job, f"{what} used {rss:.0f} MB{also}, over the {cap} MB memory cap "
                       "(max_memory_mb)", CaseKind.OUT_OF_MEMORY)
            return
    if job.output_size() > MAX_OUTPUT_BYTES:
        owner.fail(job, f"the case wrote more than {MAX_OUTPUT_BYTES >> 20} MB to "
                   "stdout/stderr; stopped", CaseKind.OUTPUT_FLOOD)
