"""Typed results: one `CheckResult` per case × target × check, grouped in a `CaseResult`.

No formatting decisions live here beyond the one-line message each check writes; reporters
(JUnit, console, Markdown, annotations) render these objects, asking each check
(`cl_validate.checks.registry`) how its figure reads. The figures behind a verdict are typed
fields of the check's own `Figures`, never strings to be parsed back.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Any

from cl_validate.measurements.bisection import Bisection
from cl_validate.measurements.kernel_list import KernelList, StageCount
from cl_validate.measurements.profile import Profile
from cl_validate.spec import CaseSpec

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
class Figures:
    """The figures one check measured: each check defines its own (a frozen dataclass with
    this base). Every field that is set is reported, as JUnit ``<properties>`` and pytest's
    ``user_properties``; `stale` marks a budget above the measured figure."""

    stale = False  # a budget check's figures declare it as a field

    def properties(self) -> list[tuple[str, str]]:
        """The figures that are set, as (name, text) pairs, in field order."""
        out: list[tuple[str, str]] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool):
                if value:
                    out.append((f.name, "true"))
            elif isinstance(value, tuple) and all(isinstance(v, tuple) for v in value):
                out.extend((str(k), str(n)) for k, n in value)  # counted kinds: ("split", 2)
            elif isinstance(value, tuple):  # one property per item, all named as the field
                out.extend((f.name, str(v)) for v in value)
            elif isinstance(value, float):
                out.append((f.name, f"{value:.6g}"))
            elif value is not None:
                out.append((f.name, str(value)))
        return out


def _plain_kind(kind: Any) -> str:
    """A failure kind as the text JUnit's ``type`` carries (an enum member's value)."""
    return str(getattr(kind, "value", kind))


@dataclass(frozen=True)
class CheckResult:
    check: str  # the check's name (`cl_validate.checks.registry`)
    status: Status
    message: str  # one line a reviewer understands alone
    kind: str = ""  # failure type (JUnit ``type``): a member of the check's kinds
    line: int | None = None  # case-file line that declares what was checked
    body: str = ""  # kernel list, stage counts, error figures
    figures: Figures = field(default_factory=Figures)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", _plain_kind(self.kind))

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
    peak_rss_mb: float | None = None  # the peak of the processes that measured it
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
