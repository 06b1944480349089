"""Markdown report for a reviewer: GitHub renders it as a job summary, a PR comment or a file.

JUnit tells a publisher *that* a check failed; this report tells a reviewer *why*: a table
per target, then for every failing case × target the one-line failure messages, the transform
count after each pipeline stage (which stage added or kept a transform), and a Mermaid chart
of the fused kernel chain with the transform kernels in red. Long chains are collapsed around
the transforms, so a ResNet-50 chart stays a dozen nodes.

Everything a model, a case file or TVM names (kernel names, shapes, messages) is escaped
before it reaches Mermaid or Markdown (`cl_validate.report.escape`): a hostile name must not
break the chart or the page, nor write raw control characters, HTML or mentions into it. The
tests render every chart with the real Mermaid (tools/setup-mermaid.sh).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cl_validate.atomic import write_atomic
from cl_validate.checks.fallback_kernels import schedule_text
from cl_validate.checks.layout_transform_bytes import transform_costs
from cl_validate.checks.registry import Check, checks
from cl_validate.checks.verdict import CaseResult, CheckResult, Status
from cl_validate.measurements.bisection import Bisection
from cl_validate.measurements.kernel_list import Kernel, KernelList, shape_text
from cl_validate.measurements.sources import off_pins, off_pins_line
from cl_validate.measurements.units import bytes_text, share_text
from cl_validate.paths import MARKDOWN_MARKER, repo_path
from cl_validate.report.escape import md_code, md_fenced, md_text, mermaid_text
from cl_validate.report.ledger import counted, headline, ledgers

MARK = {Status.PASSED: "✅", Status.FAILED: "❌", Status.ERROR: "⚠️", Status.SKIPPED: "⏭️"}
#: GitHub refuses a step summary over 1 MiB; stay under it with room for other steps' text.
STEP_SUMMARY_LIMIT = 1_000_000

# --------------------------------------------------------------------------------------------
# Mermaid
# --------------------------------------------------------------------------------------------
_MAX_TRANSFORMS = 3  # described per kernel node; a fused kernel may hold more


@dataclass(frozen=True)
class Gap:
    """A run of kernels drawn as one node (positions `first`..`last` in the kernel list)."""

    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1


def collapse(kernels: Sequence[Kernel], *, context: int = 1, min_run: int = 3
             ) -> list[int | Gap]:
    """Positions of the kernels to draw: every transform kernel with `context` neighbours on
    each side, the first and the last kernel; any other run longer than `min_run` kernels
    becomes a `Gap` (a shorter run is drawn as it is: "… 2 kernels …" would save nothing)."""
    n = len(kernels)
    keep = {0, n - 1}
    for pos, k in enumerate(kernels):
        if k.transforms:
            keep.update(range(pos - context, pos + context + 1))
    plan: list[int | Gap] = []
    pos = 0
    while pos < n:
        if pos in keep:
            plan.append(pos)
            pos += 1
            continue
        end = pos
        while end + 1 < n and end + 1 not in keep:
            end += 1
        if end - pos + 1 > min_run:
            plan.append(Gap(pos, end))
        else:
            plan.extend(range(pos, end + 1))
        pos = end + 1
    return plan


def _kernel_label(k: Kernel) -> str:
    parts = [mermaid_text(f"#{k.index} {k.name}")]
    if k.out_shape is not None:
        parts.append(mermaid_text(f"→ {shape_text(k.out_shape)}"))
    parts.extend(mermaid_text(t.describe(), 120) for t in k.transforms[:_MAX_TRANSFORMS])
    if len(k.transforms) > _MAX_TRANSFORMS:
        parts.append(f"+ {len(k.transforms) - _MAX_TRANSFORMS} more transforms")
    return "<br/>".join(parts)


def _gap_label(kernels: Sequence[Kernel], gap: Gap) -> str:
    first, last = kernels[gap.first].index, kernels[gap.last].index
    return mermaid_text(f"… {gap.count} kernels (#{first}–#{last}) …")


def mermaid_chart(kernels: KernelList | Sequence[Kernel], *, context: int = 1,
                  min_run: int = 3, max_nodes: int = 80) -> str:
    """A ``flowchart TD`` of the kernels in execution order, transforms highlighted.

    Transform kernels get class ``transform`` (red; ``weight`` for a weight transform, which
    should have folded), collapsed runs class ``collapsed``. Past `max_nodes` drawn nodes the
    rest becomes one final node, so even a model with 70 transforms stays a chart GitHub
    renders (Mermaid refuses charts over 50,000 characters).
    """
    ks = list(kernels)
    if not ks:
        return 'flowchart TD\n  empty["no kernels"]'
    plan = collapse(ks, context=context, min_run=min_run)
    cut: Gap | None = None
    if len(plan) > max_nodes:
        rest = plan[max_nodes - 1]
        cut = Gap(rest.first if isinstance(rest, Gap) else rest, len(ks) - 1)
        plan = plan[:max_nodes - 1]
    lines = ["flowchart TD"]
    ids: list[str] = []
    classes: dict[str, list[str]] = {"transform": [], "weight": [], "collapsed": []}
    for item in plan:
        if isinstance(item, Gap):
            node = f"g{item.first}"
            lines.append(f'  {node}(["{_gap_label(ks, item)}"])')
            classes["collapsed"].append(node)
        else:
            k = ks[item]
            node = f"k{item}"
            lines.append(f'  {node}["{_kernel_label(k)}"]')
            if k.transforms:
                weight = any(t.weight for t in k.transforms)
                classes["weight" if weight else "transform"].append(node)
        ids.append(node)
    if cut is not None:
        hidden = sum(1 for k in ks[cut.first:] if k.transforms)
        text = f"… {cut.count} more kernels, {hidden} with transforms: see the kernel list …"
        lines.append(f'  more(["{mermaid_text(text, 200)}"])')
        classes["collapsed"].append("more")
        ids.append("more")
    lines.extend(f"  {a} --> {b}" for a, b in itertools.pairwise(ids))
    lines += ["  classDef transform fill:#ffd7d5,stroke:#cf222e,stroke-width:3px,color:#1f2328",
              "  classDef weight fill:#ffebc2,stroke:#bc4c00,stroke-width:3px,color:#1f2328",
              "  classDef collapsed fill:#f6f8fa,stroke:#8c959f,stroke-dasharray:4 3,"
              "color:#59636e"]
    lines.extend(f"  class {','.join(nodes)} {name}" for name, nodes in classes.items() if nodes)
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------
def _check_cell(result: CaseResult, check: Check) -> str:
    try:
        c = result.check(check.name)
    except KeyError:
        return "–"
    value = check.cell(c, compact=False)
    if value is None:
        value = {Status.PASSED: "ok", Status.FAILED: "failed", Status.ERROR: "error",
                 Status.SKIPPED: "skipped"}[c.status]
    elif c.figures.stale:
        value += " (stale)"
    return f"{MARK[c.status]} {md_text(value)}"


def _counts(results: Sequence[CaseResult]) -> dict[Status, int]:
    return {s: sum(1 for r in results for c in r.checks if c.status is s) for s in Status}


def _heading(results: Sequence[CaseResult]) -> list[str]:
    n = _counts(results)
    bad = [r for r in results if not r]
    if n[Status.ERROR]:
        verdict = f"⚠️ {len(bad)} of {len(results)} case × target runs failed or errored"
    elif n[Status.FAILED]:
        verdict = f"❌ {len(bad)} of {len(results)} case × target runs failed"
    else:
        verdict = f"✅ all {len(results)} case × target runs passed"
    return [f"## cl_validate: {verdict}", "",
            f"**{n[Status.PASSED]}** passed · **{n[Status.FAILED]}** failed · "
            f"**{n[Status.ERROR]}** errors · **{n[Status.SKIPPED]}** skipped checks  ",
            "✅ passed · ❌ failed · ⚠️ error · ⏭️ skipped; budgets read *measured / budget*",
            *(["", f"> ⚠️ {md_text(line)}"] if (line := off_pins_line(off_pins())) else [])]


def _table(results: Sequence[CaseResult], target: str) -> list[str]:
    every = checks()
    head = ["case", *(c.heading() for c in every), "time"]
    out = [f"### {md_text(target)}", "", "| " + " | ".join(head) + " |",
           "|" + "|".join([" --- "] + [" :---: "] * len(every) + [" ---: "]) + "|"]
    for r in results:
        if r.target == target:
            cells = [md_code(r.case.label), *(_check_cell(r, c) for c in every),
                     f"{r.seconds:.1f} s"]
            out.append("| " + " | ".join(cells) + " |")
    return out


def _where(result: CaseResult, check: CheckResult) -> str:
    path = repo_path(result.case.path)
    return f"{path}:{check.line}" if check.line else path


def _stages(result: CaseResult) -> str:
    return " → ".join(f"{c.stage} {c.runtime}" + (f"+{c.weight}w" if c.weight else "")
                      for c in result.stage_counts)


def _bisection_table(b: Bisection) -> list[str]:
    """Each pipeline stage's program run on the failing inputs: where the numerics broke."""
    at = f" on inputs {md_code(b.sample, table=False)}" if b.sample else ""
    out = [f"Numerics after each pipeline stage (built and run on {b.target}{at}):", "",
           "| stage | error | |", "|---|---|---|"]
    first = b.first_break
    for run in b.stages:
        if not run.ran:
            out.append(f"| {md_code(run.stage)} | {md_text(run.note)} | ⏭️ |")
            continue
        mark = "✅" if run.ok else ("❌ first break" if run.stage == first else "❌")
        out.append(f"| {md_code(run.stage)} | {md_text(run.worst().figure())} | {mark} |")
    if b.stopped:
        out.append(f"\n_Stopped: {md_text(b.stopped)}_")
    return [*out, ""]


def failure_section(result: CaseResult, *, chart: bool = True) -> str:
    """Why one case × target failed: messages, transforms per stage, the kernel chain."""
    out = [f"### {MARK[result.status]} {md_code(result.case.label, table=False)} on "
           f"{md_text(result.target)}", "",
           f"Case file: {md_code(repo_path(result.case.path), table=False)}", ""]
    for c in result.checks:
        if c.status.bad:
            out.append(f"- {MARK[c.status]} **{md_text(c.check)}**: "
                       f"{md_code(c.message, table=False)} at "
                       f"{md_code(_where(result, c), table=False)}")
    out.append("")
    if result.bisection is not None and result.bisection.stages:
        out += _bisection_table(result.bisection)
    if result.stage_counts:
        out += ["Runtime layout transforms after each stage (`+Nw`: weight transforms): "
                + md_code(_stages(result), table=False), ""]
    kernels = result.kernels
    if kernels is not None and len(kernels):
        n_t = len(kernels.runtime_transforms) + len(kernels.weight_transforms)
        if chart:
            out += [f"Kernel chain in execution order ({len(kernels)} kernels, {n_t} "
                    "transforms in red, long runs without transforms collapsed):", "",
                    md_fenced(mermaid_chart(kernels), "mermaid"), ""]
        profile = result.profile
        times = profile.times() if profile is not None else None
        costs = [transform_costs(kernels)]
        if kernels.schedule_counts():
            costs.append(schedule_text(kernels))
        if profile is not None:
            costs.append(profile.report(kernels))
        summary = "bytes in and out" + ("; time" if times else "")
        out += ["<details><summary>Kernel list (<code>&gt;&gt;</code> marks a layout "
                f"transform; {summary})</summary>", "",
                md_fenced("\n\n".join([kernels.render(times=times), *costs]), "text"),
                "", "</details>", ""]
    return "\n".join(out)


def ledger_section(results: Sequence[CaseResult], *, names: int | None = 3) -> str:
    """The blocker ledger (`cl_validate.report.ledger`): per target, a row per reason a
    runtime transform is there, most transforms first, with its bytes, cases and modules."""
    out = ["## What the runtime transforms are there for (blocker ledger)", "",
           "Bytes: what the transforms read and write; share: of all kernels' traffic."]
    for led in ledgers(results):
        out += ["", f"### {md_text(led.target)}", "", md_text(headline(led)), ""]
        if not led.entries:
            continue
        out += ["| transforms | bytes | share | why | cases | modules |",
                "| ---: | ---: | ---: | --- | --- | --- |"]
        for e in led.entries:
            share = share_text(e.bytes / led.traffic) if led.traffic else "–"
            out.append(f"| {e.transforms} | {bytes_text(e.bytes)} | {share} | {md_text(e.why)} | "
                       f"{md_text(counted(e.cases, names))} | "
                       f"{md_text(counted(e.modules, names))} |")
    return "\n".join(out) + "\n"


def render_markdown(results: Sequence[CaseResult], *, charts: bool = True,
                    max_bytes: int | None = None) -> str:
    """The whole report. With `max_bytes`, failure sections that do not fit are left out and
    counted in a closing note, then the blocker ledger if even it does not fit (the tables
    always stay)."""
    out = _heading(results)
    for target in dict.fromkeys(r.target for r in results):
        out += ["", *_table(results, target)]
    text = "\n".join(out) + "\n"
    ledger_left_out = False
    if any(r.kernels is not None and r.kernels.transforms for r in results):
        ledger = "\n" + ledger_section(results)
        if max_bytes is not None and len((text + ledger).encode()) > max_bytes - 400:
            ledger_left_out = True  # the tables first: the ledger has a command of its own
        else:
            text += ledger
    failing = [r for r in results if not r]
    if failing:
        text += "\n## Why it failed\n"
    left_out = 0
    for r in failing:
        section = "\n" + failure_section(r, chart=charts)
        if max_bytes is not None and len((text + section).encode()) > max_bytes - 200:
            left_out += 1
            continue
        text += section
    if left_out:
        text += (f"\n_{left_out} more failing case × target runs left out to stay under the "
                 "size limit: see the JUnit report or `cl-validate show CASE`._\n")
    if ledger_left_out:
        text += ("\n_The blocker ledger was left out to stay under the size limit: "
                 "`cl-validate ledger`._\n")
    return text


def write_markdown(results: Sequence[CaseResult], path: str | Path) -> Path:
    """Write atomically: a reader (or an interrupted run) never sees half a file."""
    return write_marked(path, render_markdown(results))


def write_marked(path: str | Path, text: str) -> Path:
    """A Markdown report file (atomically): `MARKDOWN_MARKER` first, by which the next run
    knows the file is a report it may replace (`cl_validate.paths.report_file`); GitHub
    renders the comment as nothing."""
    return write_atomic(path, f"{MARKDOWN_MARKER}\n{text}")


def append_step_summary(results: Sequence[CaseResult],
                        env: Mapping[str, str] | None = None) -> Path | None:
    """Append the report to ``$GITHUB_STEP_SUMMARY`` (GitHub Actions' job summary) when set.

    Appends, never truncates: earlier steps' summaries in the same file are theirs. Stays
    under GitHub's 1 MiB per-step limit by leaving out failure sections that do not fit.
    """
    env = os.environ if env is None else env
    target = env.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    used = path.stat().st_size if path.exists() else 0
    text = render_markdown(results, max_bytes=max(STEP_SUMMARY_LIMIT - used, 20_000))
    with path.open("a", encoding="utf-8", newline="\n") as f:
        f.write(("\n" if used else "") + text)
    return path
