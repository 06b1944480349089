"""Typed results: one `CheckResult` per case × target × check, grouped in a `CaseResult`.

No formatting decisions live here beyond the one-line message each check writes; reporters
(JUnit, console, Markdown) render these objects.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cl_validate.spec import CaseSpec

if TYPE_CHECKING:
    from cl_validate.analysis import KernelList, StageCount

CHECKS: tuple[str, ...] = ("layout", "layout_transforms", "kernels", "kernel_list", "numerics")


class Status(enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"

    @property
    def bad(self) -> bool:
        return self in (Status.FAILED, Status.ERROR)


@dataclass(frozen=True)
class CheckResult:
    check: str
    status: Status
    message: str  # one line a reviewer understands alone
    kind: str = ""  # failure type, e.g. "BudgetExceeded"
    line: int | None = None  # case-file line that declares what was checked
    body: str = ""  # kernel list, stage counts, error figures
    measured: dict[str, str] = field(default_factory=dict)
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
    peak_rss_mb: float | None = None  # of the worker process that ran it

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
