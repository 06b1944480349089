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
(`cl_validate.spec.budget_keys`), with its kind of value (a `ValueKind`: how the case file
writes it and reports show it; a check may bring a kind of its own), and case files may then
declare it. The figures ``cl-validate diff`` compares and ``cl-validate trend`` charts are
declared by their checks too (`Check.tracked`, a `Figure` each), read back from the
properties of its reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeVar

from cl_validate.checks.verdict import CheckResult
from cl_validate.measurements.kinds import Kind
from cl_validate.measurements.measurement import Measurement
from cl_validate.measurements.units import bytes_text
from cl_validate.spec import CaseSpec
from cl_validate.spec.budget_keys import BudgetKey, ValueKind, declare, undeclare
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


@dataclass(frozen=True)
class Figure:
    """One figure of a check a reviewer compares between runs (``cl-validate diff``) and
    follows over them (``cl-validate trend``): where it is in the report, its unit, how it
    reads, and the change that is noise (both `noise_rel` of the larger value and `noise_abs`
    must be exceeded; exact counts have none). Every figure is better smaller."""

    name: str  # short id: trend names and `--figure`
    label: str  # how reports say it
    prop: str  # ``check.property``: the testcase property it is read back from
    unit: str
    noise_rel: float = 0.0
    noise_abs: float = 0.0
    #: how its values read (its `ValueKind.format`); None: by `unit`
    kind: ValueKind | None = None
    #: a ``check.property`` written once per item (``transform``) whose values go with the
    #: figure into the trend JSON's ``extra``
    detail: str = ""
    #: charted by ``cl-validate trend`` when no ``--figure`` is given
    charted: bool = False

    def text(self, value: float | None) -> str:
        if value is None:
            return "–"
        if self.kind is not None:
            return self.kind.format(value)
        if self.unit == "bytes":
            return bytes_text(int(value))
        if self.unit == "s":
            return f"{value:.1f} s"
        if self.unit == "MB":
            return f"{value:.0f} MB"
        if self.unit == "x":
            return f"{value:.3g}x"
        if float(value).is_integer():
            return str(int(value))
        return f"{value:.3g}"

    def changed(self, before: float, after: float) -> bool:
        """Whether `before` → `after` is a change and not measurement noise."""
        delta = abs(after - before)
        return delta > 0 and delta > self.noise_abs and \
            delta > self.noise_rel * max(abs(before), abs(after))


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
    #: the figures of its results ``cl-validate diff`` compares and ``trend`` charts (each
    #: a property of its testcases, ``check.property``)
    tracked: ClassVar[tuple[Figure, ...]] = ()

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
    for f in check.tracked:  # read back from its own testcases' properties
        if not f.prop.startswith(f"{check.name}."):
            raise ValueError(f"check {check.name}: figure {f.name} reads '{f.prop}', not a "
                             f"property of its own ('{check.name}.NAME')")
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


def tracked_figures() -> tuple[Figure, ...]:
    """Every check's tracked figures, in report order, except that what the case itself cost
    (the case check's, `case_check`) comes after what the checks measured."""
    ordered = checks()
    figures = [f for c in [*ordered[1:], *ordered[:1]] for f in c.tracked]
    seen: dict[str, Figure] = {}
    for f in figures:
        if seen.setdefault(f.name, f) is not f:
            raise ValueError(f"two figures are named '{f.name}'")
    return tuple(figures)


def get(name: str) -> Check:
    return _REGISTRY[name]


def case_check() -> Check:
    """The check that is the case itself (order 0): where an error that stops a case is
    reported, with the other checks marked not run."""
    return checks()[0]
