"""The ``transform_time_share`` check: the share of kernel time the transform kernels take,
measured (``--profile``). A time is noise on a shared runner, so this is a ceiling on the
median of the runs, never a ratchet, and judged only where a case declares it (declaring it
times every run of the case)."""

from __future__ import annotations

from dataclasses import dataclass

from cl_validate.checks.registry import Check, FailureKind, Judging, register
from cl_validate.checks.verdict import CheckResult, Figures, Status
from cl_validate.measurements.kinds import SkipKind
from cl_validate.measurements.measurement import Measurement
from cl_validate.measurements.units import share_text
from cl_validate.spec.budget_keys import BudgetKey

NAME = "transform_time_share"


class TimeShareKind(FailureKind):
    EXCEEDED = "BudgetExceeded", "the median share of kernel time is above its budget"
    NOT_MEASURED = "NotMeasured", "no kernel time was measured"
    PROFILE_ERROR = "ProfileError", "timing the kernels failed"


@dataclass(frozen=True)
class TimeShareFigures(Figures):
    budget: float | None = None
    time_share: float | None = None  # median share of kernel time in transform kernels


@register
class TransformTimeShare(Check):
    name = NAME
    order = 80
    summary = ('the measured share of kernel time in transform kernels ≤ budget (when the case '
               'declares one; reported under `--profile`)')
    declared_by = ("budget", NAME)
    budget = BudgetKey(NAME, "fraction", exact=False, label="time share", needs_profile=True)
    kinds = (TimeShareKind,)
    title = "transform time share"

    def seconds(self, m: Measurement) -> float:
        return m.profile_seconds

    def judge(self, j: Judging) -> CheckResult:
        case, target, m = j.case, j.target, j.m
        assert m.kernels is not None
        kernels, profile, skip = m.kernels, m.profile, m.profile_skip
        limit = case.budget_for(target).get(NAME)
        line = case.budget_for(target).line(NAME)
        if profile is None:
            if skip is not None and skip.kind == TimeShareKind.PROFILE_ERROR and \
                    limit is not None:
                return CheckResult(NAME, Status.ERROR, skip.reason, kind=skip.kind,
                                   line=line)
            reason = skip.reason if skip is not None else \
                "not profiled (--profile, or profile = true in the case, times the kernels)"
            return CheckResult(NAME, Status.SKIPPED, reason,
                               kind=skip.kind if skip is not None else SkipKind.NOT_PROFILED)
        share = profile.transform_share(kernels)
        figures = TimeShareFigures(time_share=share.median if share else None)
        body = profile.report(kernels)
        what = (f"runtime transforms take {share.text('share')} of kernel time"
                if share is not None else "no kernel time measured")
        if limit is None:
            return CheckResult(NAME, Status.SKIPPED, f"no {NAME} budget declared "
                               f"({what}, {target})", kind=SkipKind.NOT_DECLARED, body=body,
                               figures=figures)
        figures = TimeShareFigures(time_share=figures.time_share, budget=limit)
        if share is None:
            return CheckResult(NAME, Status.ERROR, f"{NAME}: {what} ({target})",
                               kind=TimeShareKind.NOT_MEASURED, line=line, body=body,
                               figures=figures)
        runs = f"median of {profile.repeats} runs"
        if share.median > limit:
            return CheckResult(NAME, Status.FAILED, f"{NAME} {share_text(share.median)}"
                               f" > budget {share_text(limit)} ({target}, {runs}, "
                               f"{share_text(share.low)}–{share_text(share.high)})",
                               kind=TimeShareKind.EXCEEDED, line=line, body=body,
                               figures=figures)
        return CheckResult(NAME, Status.PASSED, f"{NAME} {share_text(share.median)} "
                           f"<= budget {share_text(limit)} ({runs})", line=line, body=body,
                           figures=figures)

    def cell(self, result: CheckResult, compact: bool = True) -> str | None:
        f = result.figures
        if not isinstance(f, TimeShareFigures) or f.time_share is None:
            return None
        sep = "/" if compact else " / "
        return share_text(f.time_share) + (f"{sep}{share_text(f.budget)}"
                                           if f.budget is not None else "")
