"""The blocker ledger: across a run, what the runtime layout transforms are there for.

Every runtime transform carries its `Attribution` (why it is there, the Relax op that forced
it, its PyTorch source). Summed over the cases of a run, per target, that says what to fix
first: the op without a layout rule behind most transforms and bytes, the cases and modules
it is in. Rows are a reason together with its op (``relax.nn.conv2d_transpose`` has no
layout rule; the model's own ``permute_dims``; the graph input boundary, which has none),
most transforms first, then most bytes. Shown at the end of ``cl-validate run`` (the top
rows), in the Markdown report and by ``cl-validate ledger`` (all of them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from cl_validate.checks.verdict import CaseResult
from cl_validate.measurements.attribution import Reason
from cl_validate.measurements.units import bytes_text, share_text

_UNATTRIBUTED = "unattributed"


@dataclass
class Entry:
    """One reason (with its op): how many transforms and bytes, in which cases and modules."""

    reason: Reason | None
    op: str | None
    transforms: int = 0
    bytes: int = 0
    unknown: int = 0  # transforms whose bytes are unknown
    cases: Counter[str] = field(default_factory=Counter)
    modules: Counter[str] = field(default_factory=Counter)

    @property
    def why(self) -> str:
        if self.reason is None:
            return _UNATTRIBUTED
        if self.reason in (Reason.NO_LAYOUT_RULE, Reason.PINNED, Reason.KEPT_LAYOUT) \
                and self.op:
            return f"{self.op}: {self.reason.value}"
        return self.reason.value + (f" ({self.op})" if self.op else "")

    def next_step(self) -> str:
        return self.reason.next_step.format(op=self.op or "the op") if self.reason else ""


@dataclass
class Ledger:
    """The ledger of one target: its entries, most transforms first."""

    target: str
    entries: list[Entry]
    runs: int  # case × target runs it sums over (those that compiled)
    traffic: int  # bytes every kernel of those runs moves

    @property
    def top_op(self) -> Entry | None:
        """The op without a layout rule behind the most transforms: what to fix first. Not
        a boundary (no op), a pinned layout (asked for) or the model's own permute (the
        model's to change, not the compiler's), however many transforms those have."""
        return next((e for e in self.entries if e.reason is Reason.NO_LAYOUT_RULE and e.op),
                    None)


def ledgers(results: Sequence[CaseResult]) -> list[Ledger]:
    """One ledger per target, in the order targets first appear."""
    return [ledger(results, t) for t in dict.fromkeys(r.target for r in results)]


def ledger(results: Sequence[CaseResult], target: str) -> Ledger:
    rows: dict[tuple[Reason | None, str | None], Entry] = {}
    runs = traffic = 0
    for r in results:
        if r.target != target or r.kernels is None:
            continue
        runs += 1
        traffic += r.kernels.traffic or 0
        for t in r.kernels.runtime_transforms + r.kernels.weight_transforms:
            a = t.attribution
            key = (a.reason, a.relax_op) if a is not None else (None, None)
            e = rows.setdefault(key, Entry(*key))
            e.transforms += 1
            if t.bytes is None:
                e.unknown += 1
            else:
                e.bytes += t.bytes
            e.cases[r.case.label] += 1
            if a is not None and a.source:
                e.modules[a.source] += 1
    entries = sorted(rows.values(), key=lambda e: (-e.transforms, -e.bytes, e.why))
    return Ledger(target, entries, runs, traffic)


def counted(c: Counter[str], limit: int | None) -> str:
    items = c.most_common()
    shown = ", ".join(f"{k} ({n})" if n > 1 else k for k, n in items[:limit])
    more = len(items) - len(items[:limit])
    return shown + (f", … {more} more" if more > 0 else "")


def _n(count: int, what: str) -> str:
    return f"{count} {what}" + ("s" if count != 1 else "")


def headline(led: Ledger) -> str:
    top = led.top_op
    runs = _n(led.runs, "case run")
    if not led.entries:
        return f"{led.target}: no runtime layout transform in {runs}"
    first = led.entries[0]
    line = (f"{led.target}: {_n(sum(e.transforms for e in led.entries), 'transform')} in "
            f"{runs}; most: {first.why} ({first.transforms})")
    if top is not None:
        line += (f"; the op without a layout rule behind the most: {top.op} "
                 f"({_n(top.transforms, 'transform')}, {bytes_text(top.bytes)}, in "
                 f"{counted(top.cases, 3)})")
    return line


def render_ledger(led: Ledger, limit: int | None = None, names: int | None = 3) -> str:
    """Text: the headline, then a row per reason (the first `limit`), each with its cases
    and modules (the first `names` of each; None: all)."""
    lines = [headline(led)]
    total = led.traffic
    for e in led.entries[:limit]:
        share = f" {share_text(e.bytes / total):>7}" if total else ""
        unknown = f" (+{e.unknown} unknown)" if e.unknown else ""
        lines.append(f"  {e.transforms:4d}  {bytes_text(e.bytes):>9}{share}{unknown}  {e.why}")
        lines.append(f"        cases: {counted(e.cases, names)}")
        if e.modules:
            lines.append(f"        modules: {counted(e.modules, names)}")
    if limit is not None and len(led.entries) > limit:
        lines.append(f"  … {len(led.entries) - limit} more reasons: cl-validate ledger")
    return "\n".join(lines)


def console_ledger(results: Sequence[CaseResult], limit: int = 3) -> str:
    """The closing summary of ``cl-validate run``: the top reasons per target."""
    return "\n".join(["", "blocker ledger (bytes: read + written; share: of all kernels' "
                      "traffic):"] + [render_ledger(led, limit) for led in ledgers(results)])
