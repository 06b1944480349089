"""The ``compile`` check: the case itself. It passes when the case was built, exported and
compiled for the target, and it is where an error that stops a case is reported — once, with
the other checks marked not run — whatever stopped it: the factory, export, a pipeline stage,
the case's process dying, a limit."""

from __future__ import annotations

from dataclasses import dataclass

from cl_validate.checks.registry import Check, FailureKind, Figure, Judging, register
from cl_validate.checks.verdict import NOT_RUN_ERRORED, CheckResult, Figures, Status
from cl_validate.errors import ErrorRecord
from cl_validate.measurements.kinds import SkipKind
from cl_validate.measurements.measurement import Measurement

NAME = "compile"


class CaseKind(FailureKind):
    """Why a case × target has no measurement (JUnit ``error@type`` of ``compile``)."""

    COMPILE_ERROR = "CompileError", "export, the Relax import, a pipeline stage or the build raised"
    CASE_FILE_ERROR = ("CaseFileError", "the case file names something the model or TVM "
                       "refuses: a factory that does not import, a target TVM rejects, ...")
    MODEL_ERROR = "ModelError", "the model's own forward() raised"
    MODEL_EXITED = "ModelExited", "the model's code called sys.exit()"
    WORKER_CRASHED = ("WorkerCrashed", "the process measuring the case died (a segfault, "
                      "os._exit(), a signal)")
    TIMEOUT = "Timeout", "the case ran longer than its timeout"
    OUT_OF_MEMORY = "OutOfMemory", "the case's processes used more than max_memory_mb"
    OUTPUT_FLOOD = "OutputFlood", "the case wrote more than 64 MB to stdout and stderr"
    STRAY_PROCESS = ("StrayProcess", "the model's code left processes running (they were "
                     "killed; the measurement stands)")
    CORRUPT_RESULT = ("CorruptResult", "the case process sent what is not a well-formed "
                      "result (the model's code wrote on the result pipe)")
    SIGNALLED_RUN = ("SignalledRun", "the model's code signalled a process outside its case "
                     "(refused by the kernel, or ignored by the cl-validate process; the "
                     "case ended)")
    REACHED_OUT = ("ReachedOut", "the model's code tried to change a process outside its "
                   "case (its limits, priority, affinity or a /proc file), or one of its own "
                   "threads by thread id, which the kernel's filter cannot tell from another "
                   "process (refused by the kernel; the case ended)")
    INTERNAL_ERROR = "InternalError", "a bug in cl_validate: report it with the detail"


@dataclass(frozen=True)
class CompileFigures(Figures):
    """What the compile cost: read back by `cl-validate diff` and the trend figures."""

    compile_seconds: float | None = None  # export, import, pipeline and build
    peak_rss_mb: float | None = None  # the peak resident memory of the processes that measured


@register
class CompileCheck(Check):
    name = NAME
    order = 0
    summary = ('the case was built, exported and compiled (where an error that stops a case is '
               'reported)')
    declared_by = ("model",)
    kinds = (CaseKind,)
    #: they vary from run to run and machine to machine: only a large change is one
    tracked = (Figure("compile_seconds", "compile time", f"{NAME}.compile_seconds", "s",
                      noise_rel=0.25, noise_abs=5.0),
               Figure("peak_memory", "peak memory", f"{NAME}.peak_rss_mb", "MB",
                      noise_rel=0.2, noise_abs=100.0))

    def judge(self, j: Judging) -> CheckResult:
        m, case = j.m, j.case
        line = case.line_of("model")
        built = f" (IR only: {m.build_skipped})" if m.build_skipped else ""
        if m.stray_processes:  # the measurement stands; the leak is the model's bug to fix
            n = len(m.stray_processes)
            return CheckResult(
                NAME, Status.ERROR, f"the model's code left {n} process{'es' * (n > 1)} "
                f"running ({m.stray_processes[0]}); killed", kind=CaseKind.STRAY_PROCESS,
                line=line, body="\n".join(m.stray_processes))
        kept = "".join(f"; {k}" for k in [*m.kept_layouts, *m.attention_left, *m.capped])
        return CheckResult(NAME, Status.PASSED, f"compiled for {m.target} in "
                           f"{m.compile_seconds:.1f} s{built}{kept}", line=line,
                           figures=CompileFigures(m.compile_seconds, m.peak_rss_mb))

    def errored(self, error: ErrorRecord, others: list[str],
                seconds: float = 0.0) -> list[CheckResult]:
        """A case × target that could not be measured: one `error` verdict with the reason
        and the detail (a traceback's or the case output's tail), the `others` skipped as
        not run. One error, not one per check: the checks did not fail, they never ran."""
        return [CheckResult(NAME, Status.ERROR, error.message, kind=error.kind,
                            body=error.detail, line=error.line, seconds=seconds),
                *(CheckResult(c, Status.SKIPPED, NOT_RUN_ERRORED, kind=SkipKind.NOT_RUN)
                  for c in others)]

    def seconds(self, m: Measurement) -> float:  # the rest of the time: see judge.judge
        return 0.0
