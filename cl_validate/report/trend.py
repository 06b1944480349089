"""A case's figures over a series of reports, charted in Markdown GitHub renders: one Mermaid
``xychart-beta`` per case × target × figure (by default the figures their checks mark
charted: runtime transforms, their bytes), the reports in the order given along the x axis.

Names a report, a case file or a model chose are reduced to characters a chart's quoted
label cannot be broken by before they reach Mermaid, and escaped in the Markdown around the
charts (`cl_validate.report.escape`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from cl_validate.checks.registry import Figure, tracked_figures
from cl_validate.report.escape import md_code, md_text
from cl_validate.report.figures import Run

_UNSAFE = re.compile(r"[^\w .:/+=\[\]()-]")


def charted() -> tuple[str, ...]:
    """What `trend_markdown` charts by default: the figures their checks mark charted (what
    the runtime transforms cost)."""
    return tuple(f.name for f in tracked_figures() if f.charted)


def _label(text: str, limit: int = 40) -> str:
    text = _UNSAFE.sub("_", text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def report_labels(paths: Sequence[str]) -> list[str]:
    """A short distinct name per report: its file name without ``.xml``, with its folder
    when two share a name (each run's artifact is often ``report.xml``), else its position."""
    for name in (lambda p: Path(p).stem, lambda p: f"{Path(p).parent.name}/{Path(p).stem}"):
        labels = [_label(name(p)) for p in paths]
        if len(set(labels)) == len(labels):
            return labels
    return [f"#{i + 1}" for i in range(len(paths))]


def _scaled(f: Figure, values: Sequence[float]) -> tuple[str, list[float]]:
    """The axis title and the values in a unit that reads (kB, MB for bytes)."""
    if f.unit != "bytes":
        return f.unit, list(values)
    top = max(values, default=0)
    unit, div = ("MB", 1e6) if top >= 1e6 else ("kB", 1e3) if top >= 1e3 else ("bytes", 1.0)
    return unit, [round(v / div, 3) for v in values]


def chart(series: Sequence[tuple[str, Run]], f: Figure) -> str | None:
    """A ``xychart-beta`` of figure `f` of one case × target over `series` (report label,
    its run); None when no report has the figure."""
    points = [(label, v) for label, run in series if (v := run.value(f.prop)) is not None]
    if not points:
        return None
    run = series[0][1]
    unit, values = _scaled(f, [v for _, v in points])
    top = max(values) * 1.2 or 1  # room above the highest point
    top = math.ceil(top) if top >= 10 or all(float(v).is_integer() for v in values) else top
    numbers = ", ".join(f"{v:g}" for v in values)
    return "\n".join([
        "xychart-beta",
        f'  title "{_label(run.case, 60)} [{_label(run.target)}]: {f.label}"',
        "  x-axis [" + ", ".join(f'"{label}"' for label, _ in points) + "]",
        f'  y-axis "{_label(unit)}" 0 --> {top:.3g}',
        f"  line [{numbers}]",
    ])


def trend_markdown(reports: Sequence[tuple[str, Mapping[tuple[str, str], Run]]], *,
                   cases: Sequence[str] = (), targets: Sequence[str] = (),
                   figures: Sequence[str] | None = None) -> str:
    """Markdown with a chart per case × target × figure over the reports (label, runs), for
    the runs whose case is in `cases` (name or label; all when empty) and target in
    `targets` (all when empty); `figures` by name (default: `charted`)."""
    figures = charted() if figures is None else figures
    keys: dict[tuple[str, str], None] = {}
    for _, runs in reports:
        keys.update(dict.fromkeys(
            k for k in runs if (not cases or k[0] in cases or k[0].split("[")[0] in cases)
            and (not targets or k[1] in targets)))
    chosen = [f for f in tracked_figures() if f.name in figures]
    out = [f"## cl_validate: figures over {len(reports)} reports", ""]
    if not keys:
        return "\n".join([*out, "No case × target of these reports matches."]) + "\n"
    for key in keys:
        series = [(label, runs[key]) for label, runs in reports if key in runs]
        for f in chosen:
            text = chart(series, f)
            if text is not None:
                head = f"### {md_code(key[0], table=False)} [{md_text(key[1])}]: {f.label}"
                out += [head, "", "```mermaid", text, "```", ""]
    return "\n".join(out)
