"""The ``layout_transform_bytes`` check: what the runtime transforms cost in memory traffic.

A count treats an input transpose of a 3-channel image and a transpose of a 256-channel
activation alike; bytes do not. The figure is the bytes every runtime transform reads and
writes, together — exact (shapes and dtypes of the compiled IR), so an optional budget on it
has the count's ratchet: over fails, under is a stale budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from cl_validate.checks.ratchet import BudgetCheck, budget_verdict
from cl_validate.checks.registry import FailureKind, Figure, Judging, register
from cl_validate.checks.verdict import CheckResult, Figures, Status
from cl_validate.measurements.kernel_list import KernelList
from cl_validate.measurements.kinds import SkipKind
from cl_validate.measurements.units import bytes_text, share_text
from cl_validate.spec.budget_keys import BudgetKey

NAME = "layout_transform_bytes"


class BytesKind(FailureKind):
    NOT_MEASURED = ("NotMeasured", "a transform's bytes are unknown: a shape without static "
                    "or [dynamic] sizes")


@dataclass(frozen=True)
class BytesFigures(Figures):
    budget: float | None = None
    budget_source: str | None = None
    stale: bool = False
    transform_bytes: int | None = None  # what the runtime transforms read and write
    traffic: int | None = None  # what every kernel reads and writes


def exact_bytes(n: int) -> str:
    """``1,204,224 B (1.20 MB)``: exact, since a stale budget may be a few bytes off."""
    return f"{n:,} B" + (f" ({bytes_text(n)})" if n >= 1000 else "")


def transform_costs(kernels: KernelList) -> str:
    """Each runtime transform with what it moves, costliest first, then the totals."""
    rows = sorted(((t.bytes or 0, t, k) for k in kernels for t in k.transforms if not t.weight),
                  key=lambda r: -r[0])
    lines = [kernels.traffic_text()]
    for n, t, k in rows:
        share = kernels.share(n)
        lines.append(f"  {bytes_text(n):>9}" + (f" {share_text(share):>6}" if share is not None
                                                 else "")
                     + f"  kernel {k.index} {k.name}: {t.describe()}")
    return "\n".join(lines)


@register
class TransformBytes(BudgetCheck):
    name = NAME
    order = 30
    summary = ('the bytes the runtime transforms read and write ≤ budget (when the case declares '
               'one; reported always)')
    declared_by = ("budget", NAME)
    budget = BudgetKey(NAME, "bytes", minimum=0, label="bytes")
    kinds = (*BudgetCheck.kinds, BytesKind)
    title = "transform bytes, share of traffic"
    tracked = (Figure("transform_bytes", "transform bytes", f"{NAME}.transform_bytes", "bytes",
                      charted=True),)

    def figure(self, kernels: KernelList) -> int | None:
        return kernels.transform_bytes

    def judge(self, j: Judging) -> CheckResult:
        case, target, kernels = j.case, j.target, j.m.kernels
        assert kernels is not None
        budget = case.budget_for(target)
        limit = budget.get(NAME)
        moved = kernels.transform_bytes
        figures = BytesFigures(transform_bytes=moved, traffic=kernels.traffic)
        share = kernels.share(moved)
        what = (f"runtime transforms move {bytes_text(moved)}"
                + (f", {share_text(share)} of the program's traffic" if share is not None
                   else ""))
        if limit is None:
            return CheckResult(NAME, Status.SKIPPED, f"no {NAME} budget declared ({what})",
                               kind=SkipKind.NOT_DECLARED, body=transform_costs(kernels),
                               figures=figures)
        if moved is None:
            return CheckResult(NAME, Status.ERROR, f"{NAME}: the bytes of a transform are "
                               f"unknown ({target}): a shape without static or [dynamic] "
                               "sizes", kind=BytesKind.NOT_MEASURED, line=budget.line(NAME),
                               body=transform_costs(kernels), figures=figures)
        costliest = max((t for t in kernels.runtime_transforms), key=lambda t: t.bytes or 0,
                        default=None)
        nxt = (f"the costliest moves {bytes_text(costliest.bytes)}: {costliest.describe()}"
               if costliest is not None else "")
        return budget_verdict(j, NAME, moved, int(limit), budget.line(NAME),
                              transform_costs(kernels), figures, nxt, show=exact_bytes)

    def cell(self, result: CheckResult, compact: bool = True) -> str | None:
        f = result.figures
        if not isinstance(f, BytesFigures) or f.transform_bytes is None:
            return None
        share = f" {share_text(f.transform_bytes / f.traffic)}" if f.traffic else ""
        sep = "/" if compact else " / "
        limit = f"{sep}{bytes_text(int(f.budget))}" if f.budget is not None else ""
        return f"{bytes_text(f.transform_bytes)}{share}{limit}"
