"""Typed results: one `CheckResult` per case × target × check, grouped in a `CaseResult`.

No formatting decisions live here beyond the one-line message each check writes; reporters
(JUnit, console, Markdown, annotations) render these objects. The figures behind a verdict
are typed fields (`Measured`), never strings to be parsed back.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields

from cl_validate.analysis.model import KernelList, StageCount
from cl_validate.analysis.timing import Profile
from cl_validate.checks.bisection import Bisection
from cl_validate.spec import CaseSpec

#: Every case × target gets one verdict per check. ``compile`` is the case itself: it passes
#: when the case was built, exported and compiled, and it is where an error that stops the
#: case (a factory that raises, a compile error, a worker that crashed or timed out) is
#: reported, once, with the others marked not run.
COMPILE = "compile"
CHECKS: tuple[str, ...] = (COMPILE, "layout", "layout_transforms", "layout_transform_bytes",
                           "kernels", "fallback_kernels", "kernel_list", "numerics",
                           "transform_time_share")
#: The skip message of the other checks when the case errored.
NOT_RUN_ERRORED = "not run: the case errored"


def check_id(check: str, target: str, variant: str | None = None) -> str:
    """How every report names one check on one target, ``layout_transforms[llvm]`` (or
    ``layout_transforms[b8-llvm]`` for a case's variant ``b8``): the pytest plugin's item
    name, the JUnit testcase name (publishers key tests on classname and name, so target and
    variant must be in the name, not only in the suite)."""
    return f"{check}[{variant}-{target}]" if variant else f"{check}[{target}]"


def parse_check_id(name: str, target: str) -> tuple[str, str | None]:
    """(check, variant) of a testcase name in the suite of `target` (`check_id` reversed);
    a name without the target (a report from before names carried it) is the check."""
    check, _, rest = name.partition("[")
    rest = rest.removesuffix("]")
    if rest == target or not rest:
        return check, None
    return check, rest.removesuffix(f"-{target}") if rest.endswith(f"-{target}") else rest


class Status(enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"

    @property
    def bad(self) -> bool:
        return self in (Status.FAILED, Status.ERROR)


@dataclass(frozen=True)
class Measured:
    """The figures a check measured. Every field is optional: each check sets its own."""

    layout_transforms: int | None = None  # runtime layout transforms
    weight_transforms: int | None = None
    kernels: int | None = None
    budget: float | None = None  # the budget that applied on this target
    budget_source: str | None = None  # "targets_override.cuda, line 22", "budget, line 14"
    stale: bool = False  # under budget: `budget tighten` would lower it
    layout_sensitive_ops: int | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    rmse: float | None = None  # root-mean-square error against the reference
    float64_ratio: float | None = None  # TVM's RMSE / eager float32's, both against float64
    first_break: str | None = None  # the first pipeline stage that broke the numerics
    baseline: str | None = None  # kernel-list baseline file
    baseline_kernels: int | None = None
    kernel_changes: tuple[tuple[str, int], ...] = ()  # ("split", 2), ("added", 1), …
    transform_bytes: int | None = None  # what the runtime transforms read and write
    traffic: int | None = None  # what every kernel reads and writes
    fallback_kernels: int | None = None  # GPU kernels left to dlight's Fallback rule
    time_share: float | None = None  # median share of kernel time in transform kernels

    def numerics_figure(self) -> str | None:
        """The numerics figure a table shows: ``1.0e-04`` (max abs error), or ``1.3x f64``
        (TVM's error over eager float32's, against float64)."""
        if self.float64_ratio is not None:
            return f"{self.float64_ratio:.2g}x f64"
        return f"{self.max_abs:.1e}" if self.max_abs is not None else None

    def properties(self) -> list[tuple[str, str]]:
        """The figures that are set, as (name, text) pairs: JUnit ``<properties>``, pytest's
        ``user_properties``."""
        out: list[tuple[str, str]] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "kernel_changes":
                out.extend((kind, str(n)) for kind, n in value)
            elif f.name == "stale":
                if value:
                    out.append(("stale", "true"))
            elif isinstance(value, float):
                out.append((f.name, f"{value:.6g}"))
            elif value is not None:
                out.append((f.name, str(value)))
        return out


@dataclass(frozen=True)
class CheckResult:
    check: str
    status: Status
    message: str  # one line a reviewer understands alone
    kind: str = ""  # failure type, e.g. "BudgetExceeded"
    line: int | None = None  # case-file line that declares what was checked
    body: str = ""  # kernel list, stage counts, error figures
    measured: Measured = field(default_factory=Measured)
    seconds: float = 0.0

    def __bool__(self) -> bool:
        return not self.status.bad


@dataclass
class CaseResult:
    case: CaseSpec
    target: str
    checks: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0
    kernels: KernelList | None = None
    stage_counts: list[StageCount] = field(default_factory=list)
    peak_rss_mb: float | None = None  # the worker's peak while it measured this case × target
    bisection: Bisection | None = None  # where the numerics broke, when they did
    profile: Profile | None = None  # every kernel's time (``--profile``)

    @property
    def status(self) -> Status:
        statuses = [c.status for c in self.checks]
        for s in (Status.ERROR, Status.FAILED, Status.PASSED):
            if s in statuses:
                return s
        return Status.SKIPPED

    def __bool__(self) -> bool:
        return not self.status.bad

    def check(self, name: str) -> CheckResult:
        for c in self.checks:
            if c.check == name:
                return c
        raise KeyError(name)
