"""The ``[budget]`` entries a case file may declare, each declared by the check that judges it.

What a budget means lives in its check (`cl_validate.checks`); what the case-file layer needs
is only how the file writes it: a count, bytes or a fraction, its smallest value, whether it
has a default, and whether it is an exact figure that ``budget tighten`` keeps exact (a count
or bytes) or a ceiling it never writes (a measured time). A check with a budget declares its
key here when it is registered, so validating, listing and rewriting case files know every
budget without naming any: adding a budget check adds its key everywhere at once.

The checks are registered when the ``cl_validate`` package is imported (its ``__init__``
loads `cl_validate.checks`), before any case file can be read.
"""

from __future__ import annotations

from dataclasses import dataclass

#: How a budget's value is written and checked.
VALUE_KINDS = ("count", "bytes", "fraction")


@dataclass(frozen=True)
class BudgetKey:
    """One ``[budget]`` entry: its key, how its value is written, what it defaults to."""

    name: str
    value: str  # one of VALUE_KINDS: an integer count, integer bytes, a fraction in (0, 1]
    minimum: int = 0  # smallest allowed count or bytes
    default: int | None = None  # applies when the case declares none (None: not judged)
    exact: bool = True  # kept exact by the ratchet (`budget tighten` writes it); else a ceiling
    label: str = ""  # its short name in `cl-validate list` (default: the key)
    needs_profile: bool = False  # judged on kernel times: declaring it times every run

    def __post_init__(self) -> None:
        if self.value not in VALUE_KINDS:
            raise ValueError(f"budget {self.name}: value must be one of {VALUE_KINDS}")


_DECLARED: dict[str, BudgetKey] = {}


def declare(key: BudgetKey) -> BudgetKey:
    """Make `key` a ``[budget]`` entry case files may declare (done by its check)."""
    old = _DECLARED.get(key.name)
    if old is not None and old != key:
        raise ValueError(f"budget key '{key.name}' is declared twice, differently")
    _DECLARED[key.name] = key
    return key


def undeclare(name: str) -> None:
    """Forget a budget key (for a test that registers a check of its own)."""
    _DECLARED.pop(name, None)


def budget_keys() -> tuple[BudgetKey, ...]:
    """Every declared budget, in the order the checks declare them."""
    if not _DECLARED:  # pragma: no cover - a bug: the package's __init__ loads the checks
        raise RuntimeError("no budget key declared: import cl_validate (it registers the "
                           "checks) before reading case files")
    return tuple(_DECLARED.values())


def budget_key(name: str) -> BudgetKey:
    return _DECLARED[name]
