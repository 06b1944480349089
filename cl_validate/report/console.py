"""Console output: a progress line per case × target, and the closing summary table.

A model's exception text, a kernel or module name, a key in a case file can hold any
character. Printed raw, ``\x1b[...`` would recolour or rewrite the terminal (or hide a line),
``\r`` would overwrite what came before, and in a CI log a line that starts with ``::`` is a
workflow command. So everything ``cl-validate`` prints goes through `printable` (the CLI puts
it on its streams: `cl_validate.cli.streams`) and fields that are one line by design through
`one_line`: both are `cl_validate.report.escape`'s, the one place every output's escaping is
(re-exported here for the CLI).
"""

from __future__ import annotations

from collections.abc import Sequence

from cl_validate.checks.registry import Check, checks
from cl_validate.checks.verdict import CaseResult, Status
from cl_validate.paths import display_path
from cl_validate.report.escape import one_line
from cl_validate.report.escape import printable as printable

_SHORT = {Status.PASSED: "ok", Status.FAILED: "FAIL", Status.SKIPPED: "skip", Status.ERROR: "ERR"}


def progress_line(result: CaseResult, done: int, total: int) -> str:
    """``[ 3/12] PASS resnet50  llvm  layout=ok layout_transforms=ok kernels=skip ...  41.2s``."""
    verdicts = " ".join(f"{c.check}={_SHORT[c.status]}" for c in result.checks)
    head = {Status.PASSED: "PASS", Status.SKIPPED: "SKIP", Status.FAILED: "FAIL",
            Status.ERROR: "ERROR"}[result.status]
    width = len(str(total))
    return one_line(f"[{done:>{width}}/{total}] {head:<5} {result.case.label}  "
                    f"{result.target}  {verdicts}  {result.seconds:.1f}s")


def _cell(result: CaseResult, check: Check) -> str:
    try:
        c = result.check(check.name)
    except KeyError:
        return "-"
    s = check.cell(c, compact=True) or ""
    if c.figures.stale:
        s += " stale"  # under budget: `cl-validate budget tighten` would lower it
    mark = {Status.PASSED: "", Status.FAILED: "FAIL ", Status.SKIPPED: "skip ",
            Status.ERROR: "ERR "}[c.status]
    return (mark + s).strip() or "ok"


def summary_table(results: Sequence[CaseResult]) -> str:
    """One table per target, then every failure's one-line message."""
    out: list[str] = []
    every = checks()
    headers = ["case", *(c.name for c in every), "time", "peak MB"]
    for target in dict.fromkeys(r.target for r in results):
        rows = [[r.case.label, *(_cell(r, c) for c in every), f"{r.seconds:.1f}s",
                 f"{r.peak_rss_mb:.0f}" if r.peak_rss_mb else "-"]
                for r in results if r.target == target]
        widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
        out.append(f"\n{target}:")
        out.append("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
        out.append("  ".join("-" * w for w in widths))
        out.extend("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    bad = [(r, c) for r in results for c in r.checks if c.status.bad]
    if bad:
        out.append("")
        for r, c in bad:
            path = display_path(r.case.path)
            where = f"{path}:{c.line}" if c.line else path
            out.append(one_line(f"{c.status.value.upper()} {r.case.label} [{r.target}] "
                                f"{c.check}: {c.message}  ({where})"))
    stale = [(r, c) for r in results for c in r.checks
             if c.status is Status.PASSED and c.figures.stale]
    if stale:  # stale_budget = "warn": passes, but the budget should come down
        out.append("")
        for r, c in stale:
            path = display_path(r.case.path)
            where = f"{path}:{c.line}" if c.line else path
            out.append(one_line(f"WARNING {r.case.label} [{r.target}] {c.check}: {c.message}  "
                                f"({where})"))
    n = {s: sum(1 for r in results for c in r.checks if c.status is s) for s in Status}
    out.append(f"\n{n[Status.PASSED]} passed, {n[Status.FAILED]} failed, {n[Status.ERROR]} "
               f"errors, {n[Status.SKIPPED]} skipped ({len(results)} case x target runs)")
    return "\n".join(out)
