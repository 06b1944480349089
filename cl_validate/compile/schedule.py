"""GPU schedules by dlight, with the rule that scheduled each kernel written on its PrimFunc.

TVM's cuda backend schedules every fused PrimFunc with dlight's ``ApplyDefaultSchedule``: the
rules are tried in order (Matmul, GEMV, Reduction, GeneralReduction, Fallback) and the first
that returns a schedule wins. The generic Fallback only binds loops to threads; a kernel that
ends there is slow on a real GPU, and which rule a kernel gets is decided entirely at compile
time — so a CPU runner can see it, no GPU needed.

dlight does not say which rule won. Here each rule is wrapped in an observer that notes the
PrimFunc it returned a schedule for and passes the schedule through untouched, so the pass
that runs is TVM's own, with TVM's own rules: the schedules are exactly what TVM's backend
produces (the tests compare them structurally). Afterwards every PrimFunc carries
`SCHEDULE_ATTR` = the winning rule's name, which the analysis reads into the kernel list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tvm
from tvm import tirx
from tvm.s_tir import dlight as dl

from cl_validate.compile.attention import AttentionRule
from cl_validate.ir import SCHEDULE_ATTR

#: The rule a PrimFunc gets when no rule returned a schedule: it is left unscheduled, and
#: building it for a GPU fails.
NO_RULE = "none"


def default_gpu_rules() -> list[Any]:
    """The rules, in the order TVM 0.27's cuda backend applies them
    (``tvm.relax.backend.cuda.pipeline.legalize_passes``), after cl_validate's rule for its
    attention kernel (`cl_validate.compile.attention.AttentionRule`: no rule of TVM's takes
    it), which schedules nothing else."""
    return [AttentionRule(), dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
            dl.gpu.GeneralReduction(), dl.gpu.Fallback()]


class _Observed(dl.ScheduleRule):  # type: ignore[misc]
    """A rule that behaves exactly as `rule` and notes each PrimFunc it scheduled."""

    def __init__(self, rule: Any, seen: list[tuple[Any, str]]) -> None:
        self.rule = rule
        self.name = type(rule).__name__.removesuffix("Rule")
        self.seen = seen

    def apply(self, func: Any, target: Any, tunable: bool) -> Any:
        space = self.rule.apply(func, target, tunable)
        if space is not None:
            self.seen.append((func, self.name))
        return space


def schedule_gpu(mod: tvm.IRModule, target: Any, rules: Sequence[Any] | None = None
                 ) -> tvm.IRModule:
    """dlight's ``ApplyDefaultSchedule`` with `rules` (default: TVM's cuda list) under
    `target`, every PrimFunc it looked at tagged with `SCHEDULE_ATTR`: the rule that scheduled
    it, or `NO_RULE`. PrimFuncs scheduled before (``tirx.is_scheduled``) keep their tag, or
    get none."""
    todo = {gv: f for gv, f in mod.functions_items()
            if isinstance(f, tirx.PrimFunc) and not _scheduled(f)}
    seen: list[tuple[Any, str]] = []
    observed = [_Observed(r, seen) for r in (default_gpu_rules() if rules is None else rules)]
    with target:
        out = dl.ApplyDefaultSchedule(*observed)(mod)
    rule_of = {gv: next((name for f, name in seen if f.same_as(func)), NO_RULE)
               for gv, func in todo.items()}
    funcs = {gv: f.with_attr(SCHEDULE_ATTR, rule_of[gv]) if gv in rule_of else f
             for gv, f in out.functions_items()}
    scheduled = tvm.IRModule(funcs)
    return scheduled.with_attrs(out.attrs) if out.attrs is not None else scheduled


def _scheduled(func: Any) -> bool:
    attrs = func.attrs
    return attrs is not None and "tirx.is_scheduled" in attrs and bool(
        attrs["tirx.is_scheduled"])
