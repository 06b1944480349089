"""What the transforms cost, and how the GPU kernels were scheduled — three optional budgets.

- ``layout_transform_bytes``: the bytes every runtime transform reads and writes, together.
  A count treats an input transpose of a 3-channel image and a transpose of a 256-channel
  activation alike; bytes do not. The figure is exact (shapes and dtypes of the compiled
  IR), so it has the count's ratchet: over fails, under is a stale budget.
- ``fallback_kernels``: GPU kernels that dlight left to its generic Fallback rule (a plain
  thread mapping, slow on a real GPU). Decided at compile time, so a CPU runner catches the
  regression; exact, with the ratchet. Skipped on targets dlight does not schedule (llvm).
- ``transform_time_share``: the share of kernel time the transform kernels take, measured
  (``--profile``). A time is noise on a shared runner, so this is a ceiling on the median
  of the runs, never a ratchet, and judged only where a case declares it.
"""

from __future__ import annotations

from cl_validate.analysis.model import (
    FALLBACK,
    UNRECORDED,
    KernelList,
    bytes_text,
    share_text,
)
from cl_validate.analysis.timing import Profile
from cl_validate.checks.budget import budget_verdict
from cl_validate.checks.measurement import Skip
from cl_validate.checks.verdict import CheckResult, Measured, Status
from cl_validate.spec import CaseSpec
from cl_validate.spec.config import StalePolicy

BYTES = "layout_transform_bytes"
FALLBACK_KERNELS = "fallback_kernels"
TIME_SHARE = "transform_time_share"


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


def check_transform_bytes(case: CaseSpec, target: str, kernels: KernelList, *,
                          stale: StalePolicy = StalePolicy.FAIL) -> CheckResult:
    budget = case.budget_for(target)
    moved = kernels.transform_bytes
    measured = Measured(transform_bytes=moved, traffic=kernels.traffic)
    share = kernels.share(moved)
    what = (f"runtime transforms move {bytes_text(moved)}"
            + (f", {share_text(share)} of the program's traffic" if share is not None else ""))
    if budget.layout_transform_bytes is None:
        return CheckResult(BYTES, Status.SKIPPED, f"no {BYTES} budget declared ({what})",
                           body=transform_costs(kernels), measured=measured)
    if moved is None:
        return CheckResult(BYTES, Status.ERROR, f"{BYTES}: the bytes of a transform are "
                           f"unknown ({target}): a shape without static or [dynamic] sizes",
                           kind="NotMeasured", line=budget.line(BYTES),
                           body=transform_costs(kernels), measured=measured)
    costliest = max((t for t in kernels.runtime_transforms), key=lambda t: t.bytes or 0,
                    default=None)
    nxt = (f"the costliest moves {bytes_text(costliest.bytes)}: {costliest.describe()}"
           if costliest is not None else "")
    return budget_verdict(case, target, BYTES, moved, budget.layout_transform_bytes,
                          budget.line(BYTES), stale, transform_costs(kernels), measured, nxt,
                          show=exact_bytes)


def schedule_text(kernels: KernelList) -> str:
    """``kernels per dlight rule: Matmul 21, Reduction 1, Fallback 2`` and the kernels left
    to the Fallback."""
    counts = kernels.schedule_counts()
    lines = ["kernels per dlight rule: " + ", ".join(f"{r} {n}" for r, n in counts.items())]
    left = [k for k in kernels if k.schedule == FALLBACK]
    if left:
        lines.append(f"left to {FALLBACK} ({len(left)}):")
        lines += [f"  {k.index:3d}  {k.name}" for k in left]
    return "\n".join(lines)


def check_fallback_kernels(case: CaseSpec, target: str, kernels: KernelList, *,
                           stale: StalePolicy = StalePolicy.FAIL) -> CheckResult:
    counts = kernels.schedule_counts()
    if not counts:
        return CheckResult(FALLBACK_KERNELS, Status.SKIPPED, f"dlight schedules no kernel on "
                           f"{target}: GPU targets only")
    budget = case.budget_for(target)
    n = counts.get(FALLBACK, 0)
    measured = Measured(fallback_kernels=n)
    body = schedule_text(kernels)
    if budget.fallback_kernels is None:
        return CheckResult(FALLBACK_KERNELS, Status.SKIPPED, f"no {FALLBACK_KERNELS} budget "
                           f"declared ({n} of {len(kernels)} kernels left to dlight's "
                           f"{FALLBACK})", body=body, measured=measured)
    if UNRECORDED in counts:
        return CheckResult(FALLBACK_KERNELS, Status.ERROR, f"the dlight rule of "
                           f"{counts[UNRECORDED]} kernels was not recorded ({target}): the "
                           "pipeline schedules them itself", kind="NotMeasured",
                           line=budget.line(FALLBACK_KERNELS), body=body, measured=measured)
    return budget_verdict(case, target, FALLBACK_KERNELS, n, budget.fallback_kernels,
                          budget.line(FALLBACK_KERNELS), stale, body, measured,
                          "a kernel no specific dlight rule matched: see which op it fuses "
                          f"(`cl-validate show {case.name} --target {target}`)")


def check_transform_time_share(case: CaseSpec, target: str, kernels: KernelList,
                               profile: Profile | None, skip: Skip | None) -> CheckResult:
    limit = case.budget_for(target).transform_time_share
    line = case.budget_for(target).line(TIME_SHARE)
    if profile is None:
        if skip is not None and skip.kind == "ProfileError" and limit is not None:
            return CheckResult(TIME_SHARE, Status.ERROR, skip.reason, kind=skip.kind,
                               line=line)
        reason = skip.reason if skip is not None else \
            "not profiled (--profile, or profile = true in the case, times the kernels)"
        return CheckResult(TIME_SHARE, Status.SKIPPED, reason,
                           kind=skip.kind if skip is not None else "NotProfiled")
    share = profile.transform_share(kernels)
    measured = Measured(time_share=share.median if share else None)
    body = profile.report(kernels)
    what = (f"runtime transforms take {share.text('share')} of kernel time"
            if share is not None else "no kernel time measured")
    if limit is None:
        return CheckResult(TIME_SHARE, Status.SKIPPED, f"no {TIME_SHARE} budget declared "
                           f"({what}, {target})", body=body, measured=measured)
    measured = Measured(time_share=measured.time_share, budget=limit)
    if share is None:
        return CheckResult(TIME_SHARE, Status.ERROR, f"{TIME_SHARE}: {what} ({target})",
                           kind="NotMeasured", line=line, body=body, measured=measured)
    runs = f"median of {profile.repeats} runs"
    if share.median > limit:
        return CheckResult(TIME_SHARE, Status.FAILED, f"{TIME_SHARE} {share_text(share.median)}"
                           f" > budget {share_text(limit)} ({target}, {runs}, "
                           f"{share_text(share.low)}–{share_text(share.high)})",
                           kind="BudgetExceeded",
                           line=line, body=body, measured=measured)
    return CheckResult(TIME_SHARE, Status.PASSED, f"{TIME_SHARE} {share_text(share.median)} "
                       f"<= budget {share_text(limit)} ({runs})", line=line, body=body,
                       measured=measured)
