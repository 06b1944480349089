"""The ``[budget]`` entries a case file may declare, each declared by the check that judges it.

What a budget means lives in its check (`cl_validate.checks`); what the case-file layer needs
is only how the file writes it: its kind of value (a `ValueKind`: a count, bytes, a fraction
or one a check brings), its smallest value, whether it has a default, and whether it is an
exact figure that ``budget tighten`` keeps exact (a count or bytes) or a ceiling it never
writes (a measured time). A check with a budget declares its key here when it is registered,
so validating, listing and rewriting case files know every budget without naming any: adding
a budget check adds its key everywhere at once.

A `ValueKind` is how one kind of value is read from a case file (`ValueKind.parse`: the value,
or a one-line `CaseFileError` at the key's line), written back in reports
(`ValueKind.format`), its unit and the sentence the reference docs print. The built-in kinds
are `COUNT`, `BYTES` and `FRACTION`; a check whose budget is some other kind of value defines
its kind in its own module and hands it to its `BudgetKey`.

The checks are registered when the ``cl_validate`` package is imported (its ``__init__``
loads `cl_validate.checks`), before any case file can be read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from cl_validate.errors import CaseFileError


class Reader(Protocol):
    """What a `ValueKind` reads a value with: the case-file checker
    (`cl_validate.spec.checker.Checker`), which knows the file and every key's line."""

    def fail(self, path: Iterable[str], message: str,
             hint: str | None = None) -> CaseFileError: ...

    def integer(self, value: Any, path: tuple[str, ...], what: str, minimum: int,
                maximum: int = ..., hint: str | None = None) -> int: ...

    def number(self, value: Any, path: tuple[str, ...], what: str) -> float: ...


@dataclass(frozen=True)
class ValueKind:
    """One kind of budget value: how a case file writes it, how reports show it.

    A subclass implements `parse` (and `format` when ``str`` is not how it reads); `unit`
    is what its figures are counted in, `doc` how the reference docs describe the value
    (Markdown)."""

    name: str
    unit: str
    doc: str

    def parse(self, value: Any, reader: Reader, where: tuple[str, ...],
              key: BudgetKey) -> int | float:
        """The value of `key` written at `where` (the case file's key path), or the
        `CaseFileError` `reader.fail` makes, naming the file and line, with a hint."""
        raise NotImplementedError

    def format(self, value: float) -> str:
        """The value as reports write it (``cl-validate list``, a check's cell)."""
        return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Integer(ValueKind):
    """An exact integer figure at least the key's ``minimum`` and at most `maximum` (`why`
    says why nothing is larger)."""

    maximum: int = 2**31 - 1
    why: str = ""

    def parse(self, value: Any, reader: Reader, where: tuple[str, ...],
              key: BudgetKey) -> int:
        return reader.integer(value, where, key.name, key.minimum, self.maximum, self.why)


@dataclass(frozen=True)
class Fraction(ValueKind):
    """A share in (0, 1]."""

    def parse(self, value: Any, reader: Reader, where: tuple[str, ...],
              key: BudgetKey) -> float:
        share = reader.number(value, where, key.name)
        if not 0 < share <= 1:
            raise reader.fail(where, f"{key.name} must be a fraction in (0, 1], got "
                              f"{share:g}", "0.05 is 5%")
        return share


COUNT = Integer("count", "count", "integer count", 1_000_000,
                "no program has a million kernels or transforms: write the measured count, "
                "as cl-validate budget tighten does")
BYTES = Integer("bytes", "bytes", "integer bytes (`1_204_224` allowed)", 2**50,
                "no program moves a pebibyte through layout transforms: write the measured "
                "bytes, as cl-validate budget tighten does")
FRACTION = Fraction("fraction", "share", "fraction in (0, 1]")

#: Every kind of value a `BudgetKey` may name by its name: the built-in ones, and the kinds
#: of the declared keys.
_KINDS: dict[str, ValueKind] = {k.name: k for k in (COUNT, BYTES, FRACTION)}
_BUILTIN = frozenset(_KINDS)


def value_kind(name: str) -> ValueKind:
    """The kind of value named `name` (``"count"``, ``"bytes"``, ``"fraction"``, or the
    kind of a declared key)."""
    try:
        return _KINDS[name]
    except KeyError:
        raise ValueError(f"unknown kind of value '{name}' (known: "
                         f"{', '.join(_KINDS)})") from None


@dataclass(frozen=True)
class BudgetKey:
    """One ``[budget]`` entry: its key, how its value is written, what it defaults to."""

    name: str
    #: its kind of value: a `ValueKind`, or the name of one (``"count"``, ``"bytes"``,
    #: ``"fraction"``); read back as the `ValueKind`
    value: ValueKind | str
    minimum: int = 0  # smallest allowed count or bytes
    default: int | None = None  # applies when the case declares none (None: not judged)
    exact: bool = True  # kept exact by the ratchet (`budget tighten` writes it); else a ceiling
    label: str = ""  # its short name in `cl-validate list` (default: the key)
    needs_profile: bool = False  # judged on kernel times: declaring it times every run
    #: older names of this key a case file may still use (read as this one; `budget
    #: tighten` updates the line in the spelling the file has)
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.value, str):
            try:
                object.__setattr__(self, "value", value_kind(self.value))
            except ValueError as exc:
                raise ValueError(f"budget {self.name}: {exc}") from None

    @property
    def kind(self) -> ValueKind:
        """Its kind of value."""
        assert isinstance(self.value, ValueKind)  # __post_init__ resolved a name
        return self.value

    def format(self, value: float) -> str:
        """``transforms<=2``, ``time share<=0.05``: the entry as ``cl-validate list``
        writes it."""
        return f"{self.label or self.name}<={self.kind.format(value)}"


_DECLARED: dict[str, BudgetKey] = {}


def declare(key: BudgetKey) -> BudgetKey:
    """Make `key` a ``[budget]`` entry case files may declare (done by its check), and its
    kind of value one that keys may name."""
    old = _DECLARED.get(key.name)
    if old is not None and old != key:
        raise ValueError(f"budget key '{key.name}' is declared twice, differently")
    kind = _KINDS.get(key.kind.name)
    if kind is not None and kind != key.kind:
        raise ValueError(f"budget key '{key.name}': another kind of value is named "
                         f"'{kind.name}'")
    _KINDS[key.kind.name] = key.kind
    _DECLARED[key.name] = key
    return key


def undeclare(name: str) -> None:
    """Forget a budget key (for a test that registers a check of its own), and its kind of
    value when it was the last key of a kind that is not built in."""
    key = _DECLARED.pop(name, None)
    if key is None or key.kind.name in _BUILTIN:
        return
    if all(k.kind.name != key.kind.name for k in _DECLARED.values()):
        _KINDS.pop(key.kind.name, None)


def budget_keys() -> tuple[BudgetKey, ...]:
    """Every declared budget, in the order the checks declare them."""
    if not _DECLARED:  # pragma: no cover - a bug: the package's __init__ loads the checks
        raise RuntimeError("no budget key declared: import cl_validate (it registers the "
                           "checks) before reading case files")
    return tuple(_DECLARED.values())


def budget_key(name: str) -> BudgetKey:
    return _DECLARED[name]
