"""Split the selected cases into N shards for parallel CI jobs (``cl-validate run --shard I/N``).

Every shard job computes the same split from the same inputs, so the split must be a pure,
deterministic function: N jobs then run every case exactly once without talking to each other.
Cases are balanced by recorded compile time when a timings file is given (greedy
longest-processing-time first), and by count otherwise: a case file's size says nothing about
how long its model takes to compile, so a count is the honest fallback.
"""

from __future__ import annotations

import statistics
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from cl_validate.checks.verdict import parse_check_id
from cl_validate.errors import UsageError
from cl_validate.paths import display_path, read_regular
from cl_validate.spec import CaseSpec


def split(cases: Sequence[CaseSpec], n: int,
          timings: Mapping[str, float] | None = None) -> list[list[CaseSpec]]:
    """Partition `cases` into `n` shards, each in the input order.

    Greedy LPT: the heaviest case goes to the lightest shard, ties broken by case name (and
    then by shard index), so the result depends only on the names and the weights. A case
    missing from `timings` weighs the median of the known ones (a new case is typical until
    measured); without timings every case weighs 1.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    weights = _weights(cases, timings or {})
    order = sorted(range(len(cases)), key=lambda i: (-weights[i], cases[i].label, i))
    loads = [0.0] * n
    members: list[list[int]] = [[] for _ in range(n)]
    for i in order:
        target = min(range(n), key=lambda s: (loads[s], len(members[s]), s))
        loads[target] += weights[i]
        members[target].append(i)
    return [[cases[i] for i in sorted(idx)] for idx in members]


def _weights(cases: Sequence[CaseSpec], timings: Mapping[str, float]) -> list[float]:
    known = [float(timings[c.label]) for c in cases if c.label in timings]
    default = statistics.median(known) if known else 1.0
    return [max(float(timings.get(c.label, default)), 0.0) for c in cases]


def select(cases: Sequence[CaseSpec], shard: tuple[int, int],
           timings: Mapping[str, float] | None = None) -> list[CaseSpec]:
    """The cases of shard ``(index, count)`` (1-based index)."""
    index, count = shard
    return split(cases, count, timings)[index - 1]


def load_timings(path: str | Path, targets: Iterable[str] | None = None) -> dict[str, float]:
    """Seconds per case name from a previous run's JUnit report (a shard's, or a merged one).

    A case's weight (a variant's, keyed ``case[variant]``) is the sum of its testcase times
    over the suites of the selected `targets` (all suites when None): the time each target
    spent compiling and running it.
    An unreadable file is a one-line usage error: a stale path must not silently turn into
    an unbalanced split.
    """
    p = Path(path)
    shown = display_path(p)
    try:
        text = read_regular(p).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot read --shard-timings file: {why}", file=shown,
                         hint="pass the JUnit report of an earlier run") from None
    return _junit_timings(text, shown, set(targets) if targets is not None else None)


def _junit_timings(text: str, shown: str, targets: set[str] | None) -> dict[str, float]:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise UsageError(f"--shard-timings: not well-formed XML ({exc})", file=shown) from None
    if root.tag not in ("testsuites", "testsuite"):
        raise UsageError(f"--shard-timings: not a JUnit report (root element <{root.tag}>)",
                         file=shown)
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    out: dict[str, float] = {}
    for suite in suites:
        name = suite.get("name", "")
        target = name.removeprefix("cl_validate.") if name.startswith("cl_validate.") else ""
        if targets is not None and target and target not in targets:
            continue
        for tc in suite.iter("testcase"):
            case = tc.get("classname")
            try:
                seconds = float(tc.get("time") or 0.0)
            except ValueError:
                seconds = 0.0
            if case:  # a variant's run weighs on its own: `resnet50[b8]`
                _, variant = parse_check_id(tc.get("name", ""), target)
                label = f"{case}[{variant}]" if variant and target else case
                out[label] = out.get(label, 0.0) + max(seconds, 0.0)
    return out


def shard_cases(cases: Sequence[CaseSpec], shard: tuple[int, int], timings_file: str | None,
                targets: Sequence[str] | None) -> list[CaseSpec]:
    """This job's share for ``cl-validate run --shard I/N``.

    Only cases that run on the selected `targets` (None: each case's own) are split (a shard
    of cases that all skip would idle), and timings count only those targets.
    """
    runnable = [c for c in cases if targets is None or set(c.targets) & set(targets)]
    timings = None
    if timings_file:
        timings = load_timings(timings_file, targets)
    return select(runnable, shard, timings)
