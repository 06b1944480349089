"""The checks, one object each, in one ordered registry.

A check is everything cl_validate knows about one verdict: its name (``layout_transforms``:
the pytest item and JUnit testcase ``layout_transforms[llvm]``), the case-file key that
declares its budget or tolerance (the line its report points at), its failure kinds (the
JUnit ``type``, a public contract: an enum per check), how it judges a `Measurement`, and how
its figure reads in a table cell. Judging (`cl_validate.checks.judge`), the console, Markdown,
JUnit, the pytest plugin's items, ``budget tighten`` and the reference docs all iterate
`checks()`; none of them names a check.

Adding a check is one module in this package (every module here is loaded when the package
is): a `Check` subclass decorated with `register`, with an ``order`` that places it among the
others, and its test. A check with a budget declares its ``[budget]`` key
(`cl_validate.spec.budget_keys`), and case files may then declare it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeVar

from cl_validate.checks.verdict import CheckResult
from cl_validate.measurements.kinds import Kind
from cl_validate.measurements.measurement import Measurement
from cl_validate.spec import CaseSpec
from cl_validate.spec.budget_keys import BudgetKey, declare, undeclare
from cl_validate.spec.config import StalePolicy


class FailureKind(Kind):
    """Base of every check's failure kinds. A member is ``NAME = "JUnitType", "what it
    means"``: its value is the JUnit ``failure@type``/``error@type`` publishers show and CI
    scripts match, its ``doc`` the sentence the reference docs print."""


@dataclass(frozen=True)
class Judging:
    """What a check judges: one measurement of a case on one target, under the case file as
    it is now (a cached measurement re-judged after a budget edit gives the right answer)."""

    case: CaseSpec
    m: Measurement
    stale: StalePolicy = StalePolicy.FAIL

    @property
    def target(self) -> str:
        return self.m.target


class Check:
    """One check. Subclasses set the class attributes and implement `judge`."""

    #: its name in reports: ``layout_transforms``
    name: ClassVar[str]
    #: where it sits among the checks (reports list them in this order)
    order: ClassVar[int]
    #: what it checks, one sentence (the reference docs' check table)
    summary: ClassVar[str]
    #: the case-file key path that declares what it checks; its reports point at that line
    #: when the verdict names no more specific one
    declared_by: ClassVar[tuple[str, ...]] = ("model",)
    #: its failure kinds (an enum each: shared ones, then its own)
    kinds: ClassVar[tuple[type[FailureKind], ...]] = ()
    #: the ``[budget]`` entry it judges, if any
    budget: ClassVar[BudgetKey | None] = None
    #: its column heading in Markdown tables (default: the name, spaced)
    title: ClassVar[str] = ""

    def judge(self, j: Judging) -> CheckResult:
        raise NotImplementedError

    def cell(self, result: CheckResult, compact: bool = True) -> str | None:
        """Its figure in a table cell, with the budget where one applies: `compact` for the
        console (``3/2 +1w``), else for Markdown (``3 / 2 +1 weight``); None: the cell
        shows the status alone."""
        return None

    def seconds(self, m: Measurement) -> float:
        """The part of the measurement's time that went into this check (running the
        program for numerics, timing the kernels); the rest goes to the case itself."""
        return 0.0

    def heading(self) -> str:
        return self.title or self.name.replace("_", " ")


_REGISTRY: dict[str, Check] = {}
C = TypeVar("C", bound=type[Check])


def register(cls: C) -> C:
    """Class decorator: add a check to the registry (and its budget key to the case file's
    ``[budget]``)."""
    check = cls()
    if check.name in _REGISTRY and type(_REGISTRY[check.name]) is not cls:
        raise ValueError(f"two checks are named '{check.name}'")
    if check.budget is not None:
        declare(check.budget)
    _REGISTRY[check.name] = check
    return cls


def unregister(name: str) -> None:
    """Remove a check and its budget key (for tests that register one of their own)."""
    check = _REGISTRY.pop(name, None)
    if check is not None and check.budget is not None:
        undeclare(check.budget.name)


def checks() -> list[Check]:
    """Every registered check, in order."""
    return sorted(_REGISTRY.values(), key=lambda c: (c.order, c.name))


def names() -> tuple[str, ...]:
    """Every check's name, in order: the testcases of each case × target."""
    return tuple(c.name for c in checks())


def get(name: str) -> Check:
    return _REGISTRY[name]


def case_check() -> Check:
    """The check that is the case itself (order 0): where an error that stops a case is
    reported, with the other checks marked not run."""
    return checks()[0]
