"""The ``layout_transforms`` check: the runtime layout transforms of the compiled program
against the case's budget (with the ratchet), and no weight transform at all.

A *runtime layout transform* permutes (or re-tiles) a tensor computed at run time; a *weight
transform* does the same to a tensor derived only from weights, which should have folded away
at compile time: one that survived always fails. Every transform carries the reason it is
there (`cl_validate.measurements.attribution`), so a failure says what to do first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from cl_validate.checks.ratchet import BudgetCheck, budget_verdict, count_cell, show_command
from cl_validate.checks.registry import FailureKind, Figure, Judging, register
from cl_validate.checks.verdict import CheckResult, Figures, Status
from cl_validate.measurements.attribution import Reason
from cl_validate.measurements.kernel_list import KernelList, StageCount
from cl_validate.spec import CaseSpec
from cl_validate.spec.budget_keys import BudgetKey

NAME = "layout_transforms"
#: The report properties of the runtime transforms: their count, and each one's attribution
#: (written once per transform), which ``cl-validate diff`` lists as added or removed.
COUNT_PROP = f"{NAME}.{NAME}"
TRANSFORM_PROP = f"{NAME}.transform"


class TransformKind(FailureKind):
    WEIGHT_TRANSFORM = ("WeightTransform", "a transform of a weight survived to run time: it "
                        "should have folded at compile time")


@dataclass(frozen=True)
class TransformFigures(Figures):
    layout_transforms: int | None = None  # runtime layout transforms
    weight_transforms: int | None = None
    budget: float | None = None  # the budget that applied on this target
    budget_source: str | None = None  # "targets_override.cuda, line 22", "budget, line 14"
    stale: bool = False  # under budget: `budget tighten` would lower it
    #: each runtime transform's attribution, one property each ("graph output boundary, from
    #: conv2 (convolution)"): what `cl-validate diff` names as a new transform's module
    transform: tuple[str, ...] = ()


def stage_body(kernels: KernelList, counts: Sequence[StageCount]) -> str:
    """The transforms after each stage, then the kernel list with the transforms marked."""
    stages = "  ".join(f"{c.stage}={c.runtime}" + (f"+{c.weight}w" if c.weight else "")
                       for c in counts)
    return (f"transforms after each stage (runtime[+weight]): {stages}\n"
            f"kernel list ({len(kernels)} kernels, >> = contains a layout transform):\n"
            f"{kernels.render()}")


def attributions(kernels: KernelList) -> tuple[str, ...]:
    """Why each runtime transform is there and the module that caused it, in kernel order."""
    return tuple(t.attribution.describe() if t.attribution else f"{t.op} (not attributed)"
                 for t in kernels.runtime_transforms)


def next_step(case: CaseSpec, target: str, kernels: KernelList) -> str:
    """The most useful thing to do about the runtime transforms: an op that needs a layout
    rule beats the permutes inserted to convert ops, then the transforms a pass declined
    (with its reason), the model's own permutes, and the graph boundaries last."""
    atts = [t.attribution for t in kernels.runtime_transforms if t.attribution is not None]
    rules = Counter(a.relax_op for a in atts if a.reason is Reason.NO_LAYOUT_RULE and a.relax_op)
    if rules:
        op, n = rules.most_common(1)[0]
        where = next((a.source for a in atts if a.relax_op == op and a.source), None)
        return f"give {op} a layout rule ({n} transform(s){f', e.g. {where}' if where else ''})"
    inserted = [a for a in atts if a.reason in (Reason.IMPORTED, Reason.FOLDED)]
    if inserted:
        ops = ", ".join(dict.fromkeys(a.relax_op or "an op" for a in inserted))
        where = next((a.source for a in inserted if a.source), None)
        return (f"{len(inserted)} permute(s) inserted to convert {ops}"
                f"{f', e.g. {where}' if where else ''}")
    declined = [a for a in atts if a.reason is Reason.DECLINED]
    if declined:
        passes = ", ".join(dict.fromkeys(a.relax_op or "a pass" for a in declined))
        where = next((a.source for a in declined if a.source), None)
        return (f"{len(declined)} transform(s) kept by {passes}, which declined them: "
                f"{declined[0].why or 'see the kernel list'}"
                f"{f' (e.g. {where})' if where else ''}")
    own = [a for a in atts if a.reason is Reason.OWN_PERMUTE]
    if own:
        return f"the model permutes itself ({len(own)}x, e.g. {own[0].source or 'a permute'})"
    if any(a.reason is Reason.INPUT_BOUNDARY for a in atts):
        return 'declare the input layout = "NHWC" if callers can pass channels-last data'
    if any(a.reason is Reason.OUTPUT_BOUNDARY for a in atts):
        return 'declare [[outputs]] layout = "NHWC" if callers accept channels-last data'
    return f"`{show_command(case, target)}` names each transform's source"


@register
class LayoutTransforms(BudgetCheck):
    name = NAME
    order = 20
    summary = "runtime layout transforms ≤ budget, and no weight transform survived"
    declared_by = ("budget", NAME)
    budget = BudgetKey(NAME, "count", minimum=0, default=0, label="transforms")
    kinds = (*BudgetCheck.kinds, TransformKind)
    title = "transforms / budget"
    tracked = (Figure("transforms", "runtime transforms", COUNT_PROP, "transforms",
                      detail=TRANSFORM_PROP, charted=True),
               Figure("weight_transforms", "weight transforms", f"{NAME}.weight_transforms",
                      "transforms"))

    def figure(self, kernels: KernelList) -> int | None:
        return len(kernels.runtime_transforms)

    def judge(self, j: Judging) -> CheckResult:
        case, target, m = j.case, j.target, j.m
        assert m.kernels is not None
        kernels = m.kernels
        budget = case.budget_for(target)
        limit = int(budget.get(NAME) or 0)
        runtime = len(kernels.runtime_transforms)
        weights = kernels.weight_transforms
        figures = TransformFigures(layout_transforms=runtime, weight_transforms=len(weights),
                                   budget=limit, transform=attributions(kernels))
        body = stage_body(kernels, m.stage_counts) + "".join(
            f"\nnote: {note}" for note in [*m.attention_left, *m.capped])
        if weights:
            w = weights[0]
            return CheckResult(
                NAME, Status.FAILED,
                f"{len(weights)} weight transform(s) survived to run time ({target}): "
                f"{w.describe()} in kernel {kernels.kernels[w.kernel].name} — it should have "
                "folded", kind=TransformKind.WEIGHT_TRANSFORM, line=budget.line(NAME),
                body=body, figures=figures)
        return budget_verdict(j, NAME, runtime, limit, budget.line(NAME), body, figures,
                              next_step(case, target, kernels))

    def cell(self, result: CheckResult, compact: bool = True) -> str | None:
        f = result.figures
        if not isinstance(f, TransformFigures):
            return None
        value = count_cell(f.layout_transforms, f.budget, compact)
        if value is None or not f.weight_transforms:
            return value
        return value + (f" +{f.weight_transforms}w" if compact else
                        f" +{f.weight_transforms} weight")
