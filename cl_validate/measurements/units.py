"""How reports write measured figures: bytes, shares, times, sizes; and summing figures that
may be unknown. Plain functions of numbers, shared by the console, Markdown and JUnit."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def total(values: Iterable[int | None]) -> int | None:
    """The sum, or None when one of `values` is unknown."""
    out = 0
    for v in values:
        if v is None:
            return None
        out += v
    return out


def in_units(x: float | None, units: Sequence[tuple[float, float, str]]) -> str:
    """`x` written in the first of `units` — (below this, divide by this, format) — it is
    below; ``?`` when unknown."""
    if x is None:
        return "?"
    for limit, scale, fmt in units:
        if x < limit:
            return fmt.format(x / scale)
    limit, scale, fmt = units[-1]
    return fmt.format(x / scale)


_BYTES = ((1000, 1, "{:.0f} B"), (100_000, 1e3, "{:.1f} kB"), (1e9, 1e6, "{:.2f} MB"),
          (math.inf, 1e9, "{:.2f} GB"))


def bytes_text(n: int | None) -> str:
    """``602 B``, ``6.1 kB``, ``0.60 MB``, ``1.20 GB`` (decimal units, as memory bandwidth is
    quoted); ``?`` when unknown."""
    return in_units(n, _BYTES)


def share_text(x: float | None) -> str:
    """``12.3%``, ``0.6%``, ``0.00079%``: two significant digits below 1%, so a small share
    never reads as zero."""
    if x is None:
        return "?"
    if x == 0 or x >= 0.01:
        return f"{x:.1%}"
    return f"{x * 100:.2g}%"


def sizes_text(sizes: dict[str, int]) -> str:
    """``batch=8``: the sizes symbolic figures were taken at; "" for a static program."""
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


_TIME = ((1e3, 1, "{:.0f} ns"), (1e6, 1e3, "{:.1f} µs"), (1e9, 1e6, "{:.1f} ms"),
         (math.inf, 1e9, "{:.2f} s"))


def time_text(ns: float | None) -> str:
    """``48.7 µs``, ``103.9 ms``, ``1.23 s``."""
    return in_units(ns, _TIME)
