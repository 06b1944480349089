"""Kernel-list baselines: a reviewable snapshot of each case's fused kernels, per target.

A budget counts kernels; a baseline pins *which* kernels. `cl-validate budget record` writes
``baselines/<case>.<target>.txt`` next to the case file, one kernel per line::

    >> transpose = transpose  [permute_dims(0,2,3,1)]  # out [1, 16, 16, 3]
       fused_conv2d_add_relu = conv2d + add + relu  # out [1, 16, 16, 8]

(name = component ops in order, then the layout transforms it contains; ``>>`` marks a kernel
with a transform; ``#`` starts an informational comment). When a baseline exists, the
`kernel_list` check compares the measured list against it and fails when kernels were added,
removed, split (a fusion broke: one kernel became several) or merged, showing the difference.

TVM numbers PrimFuncs to keep names unique (``fused_conv2d3_add2``), and the numbers shift
whenever an unrelated kernel appears earlier; both sides are compared with those numeric
suffixes stripped (``fused_conv2d_add``), and the snapshot is written that way, so renumbering
is never a diff.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from cl_validate.checks.registry import Check, FailureKind, Judging, register
from cl_validate.checks.verdict import CheckResult, Figures, Status
from cl_validate.errors import UsageError
from cl_validate.measurements.kernel_list import KernelList, shape_text
from cl_validate.measurements.kinds import SkipKind
from cl_validate.paths import display_path, inside, safe_filename
from cl_validate.spec import CaseSpec

NAME = "kernel_list"
BASELINE_DIR = "baselines"
_LINE_RE = re.compile(r"^(?P<name>[A-Za-z0-9_.]+) = (?P<ops>[^\[]+?)(?:\s+\[(?P<tr>[^\]]*)\])?$")


def normalize(name: str) -> str:
    """``fused_conv2d3_add2`` → ``fused_conv2d_add``: drop the numbers TVM appends to keep
    names unique (per ``_``-separated token; ``conv2d`` itself ends in a letter and stays)."""
    tokens = (re.sub(r"(?<=[A-Za-z])\d+$", "", t) for t in name.split("_"))
    return "_".join(t for t in tokens if t)


@dataclass(frozen=True)
class BaselineKernel:
    """One kernel as compared: normalized name, component ops, transforms (op and axes)."""

    name: str
    ops: tuple[str, ...]
    transforms: tuple[str, ...] = ()
    note: str = ""  # informational (output shape): written, never compared

    def key(self) -> str:
        tr = f"  [{'; '.join(self.transforms)}]" if self.transforms else ""
        mark = ">>" if self.transforms else "  "
        return f"{mark} {self.name} = {' + '.join(self.ops)}{tr}"

    def line(self) -> str:
        return self.key() + (f"  # {self.note}" if self.note else "")


def snapshot(kernels: KernelList) -> list[BaselineKernel]:
    out = []
    for k in kernels:
        transforms = tuple(f"{t.op}({','.join(map(str, t.axes))})" if t.axes else t.op
                           for t in k.transforms)
        note = f"out {shape_text(k.out_shape)}" if k.out_shape else ""
        out.append(BaselineKernel(normalize(k.name), tuple(normalize(o) for o in k.ops),
                                  transforms, note))
    return out


def baseline_path(case: CaseSpec, target: str) -> Path:
    """``baselines/<case>.<target>.txt`` next to the case file; the case name comes from a
    file a pull request may change, so it goes through `paths.safe_filename` and `inside`."""
    variant = f"{safe_filename(case.variant.name)}." if case.variant else ""
    name = f"{safe_filename(case.name)}.{variant}{safe_filename(target)}.txt"
    return inside(case.path.parent / BASELINE_DIR, name)


def render(case: CaseSpec, target: str, kernels: KernelList) -> str:
    """The baseline file's text. Deterministic (no timestamp): re-recording an unchanged list
    leaves the file byte for byte as it was."""
    try:
        tvm = version("apache-tvm")
    except PackageNotFoundError:  # pragma: no cover - a source build of TVM
        tvm = "unknown"
    head = [
        f"# Fused kernel list of case '{case.label}' on {target}; written by "
        "`cl-validate budget record`.",
        "# The kernel_list check fails when kernels are added, removed, split or merged:",
        "# re-record after an intended change. Numeric name suffixes are dropped (conv2d3 ->",
        "# conv2d). One kernel per line: name = component ops [layout transforms];",
        "# >> marks a kernel that contains a layout transform.",
        f"# pipeline: {case.pipeline}   apache-tvm: {tvm}",
    ]
    return "\n".join([*head, *(k.line() for k in snapshot(kernels))]) + "\n"


def parse(text: str, file: str) -> list[BaselineKernel]:
    """Kernels of a baseline file; a line that is not one is a one-line error with its line."""
    out = []
    for no, raw in enumerate(text.splitlines(), start=1):
        line, _, note = raw.partition("#")  # kernel lines have no '#' before their comment
        body = line.strip()
        if not body:
            continue
        # `>>` is derived from the transforms on writing; accept the line with or without it.
        m = _LINE_RE.match(body[2:].strip() if body.startswith(">>") else body)
        if m is None:
            raise UsageError(f"not a kernel line: {raw.strip()!r}", file=file, line=no,
                             hint="re-record it with cl-validate budget record")
        transforms = tuple(t.strip() for t in (m["tr"] or "").split(";") if t.strip())
        out.append(BaselineKernel(m["name"], tuple(o.strip() for o in m["ops"].split(" + ")),
                                  transforms, note.strip()))
    return out


def load_baseline(case: CaseSpec, target: str) -> list[BaselineKernel] | None:
    """The recorded kernels, or None when no baseline was recorded for this case and target."""
    path = baseline_path(case, target)
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read baseline: {exc}", file=display_path(path)) from None
    return parse(text, display_path(path))


# --------------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelChange:
    kind: str  # "split" | "merged" | "added" | "removed" | "changed"
    old: tuple[BaselineKernel, ...]
    new: tuple[BaselineKernel, ...]

    def describe(self) -> str:
        def one(k: BaselineKernel) -> str:
            return k.key().strip()

        if self.kind in ("split", "merged", "changed"):
            olds = ", ".join(one(k) for k in self.old)
            news = "\n".join(f"    -> {one(k)}" for k in self.new)
            return f"{self.kind}: {olds}\n{news}"
        return f"{self.kind}: " + ", ".join(one(k) for k in (*self.old, *self.new))


def _run_of(ops: tuple[str, ...], seq: Sequence[BaselineKernel], start: int) -> int:
    """k >= 2 when seq[start:start+k] together run exactly `ops`, in order; else 0."""
    acc: tuple[str, ...] = ()
    for k in range(start, len(seq)):
        acc += seq[k].ops
        if acc == ops:
            return k - start + 1 if k > start else 0
        if ops[:len(acc)] != acc:
            return 0
    return 0


def _classify(old: Sequence[BaselineKernel], new: Sequence[BaselineKernel]) -> list[KernelChange]:
    """Explain one differing stretch: splits and merges first, then pairwise changes."""
    changes: list[KernelChange] = []
    i = j = 0
    while i < len(old) and j < len(new):
        if (k := _run_of(old[i].ops, new, j)):
            changes.append(KernelChange("split", (old[i],), tuple(new[j:j + k])))
            i, j = i + 1, j + k
        elif (k := _run_of(new[j].ops, old, i)):
            changes.append(KernelChange("merged", tuple(old[i:i + k]), (new[j],)))
            i, j = i + k, j + 1
        elif old[i].ops == new[j].ops:
            changes.append(KernelChange("changed", (old[i],), (new[j],)))
            i, j = i + 1, j + 1
        else:
            changes.append(KernelChange("removed", (old[i],), ()))
            changes.append(KernelChange("added", (), (new[j],)))
            i, j = i + 1, j + 1
    changes.extend(KernelChange("removed", (k,), ()) for k in old[i:])
    changes.extend(KernelChange("added", (), (k,)) for k in new[j:])
    return changes


def compare(old: Sequence[BaselineKernel], new: Sequence[BaselineKernel]) -> list[KernelChange]:
    """Differences between a baseline and a measured list ([] when they match)."""
    a, b = [k.key() for k in old], [k.key() for k in new]
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    changes: list[KernelChange] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            changes.extend(_classify(old[i1:i2], new[j1:j2]))
    return changes


def summarize(changes: Sequence[KernelChange]) -> str:
    counts: dict[str, int] = {}
    for c in changes:
        counts[c.kind] = counts.get(c.kind, 0) + 1
    return ", ".join(f"{n} {kind}" for kind, n in counts.items())


class BaselineKind(FailureKind):
    CHANGED = ("KernelListChanged", "kernels were added, removed, split or merged against the "
               "recorded baseline")


@dataclass(frozen=True)
class BaselineFigures(Figures):
    kernels: int | None = None
    baseline: str | None = None  # kernel-list baseline file
    baseline_kernels: int | None = None
    kernel_changes: tuple[tuple[str, int], ...] = ()  # ("split", 2), ("added", 1), …


def check_kernel_list(case: CaseSpec, target: str, kernels: KernelList) -> CheckResult:
    """Compare against ``baselines/<case>.<target>.txt``; skipped when none was recorded."""
    path = baseline_path(case, target)
    shown = display_path(path)
    recorded = load_baseline(case, target)
    figures = BaselineFigures(kernels=len(kernels))
    if recorded is None:
        return CheckResult(NAME, Status.SKIPPED,
                           f"no baseline ({shown}; cl-validate budget record writes one)",
                           kind=SkipKind.NOT_DECLARED, figures=figures)
    current = snapshot(kernels)
    figures = BaselineFigures(kernels=len(kernels), baseline=shown,
                              baseline_kernels=len(recorded))
    changes = compare(recorded, current)
    if not changes:
        return CheckResult(NAME, Status.PASSED,
                           f"kernel list matches the baseline ({len(current)} kernels)",
                           figures=figures)
    figures = BaselineFigures(kernels=len(kernels), baseline=shown,
                              baseline_kernels=len(recorded),
                              kernel_changes=tuple(Counter(c.kind for c in changes).items()))
    diff = difflib.unified_diff([k.key() for k in recorded], [k.key() for k in current],
                                f"{shown} (baseline)", "measured", n=2, lineterm="")
    body = "\n".join([
        f"kernel list differs from {shown}: {summarize(changes)}",
        *(c.describe() for c in changes), "", *diff, "",
        "an intended change? re-record: cl-validate budget record " + display_path(case.path),
    ])
    return CheckResult(
        NAME, Status.FAILED,
        f"kernel list differs from the baseline ({target}): {summarize(changes)}; "
        f"{len(recorded)} -> {len(current)} kernels",
        kind=BaselineKind.CHANGED, body=body, figures=figures)


@register
class KernelBaseline(Check):
    name = NAME
    order = 60
    summary = "the fused kernel list matches its recorded baseline (when one is recorded)"
    declared_by = ("model",)
    kinds = (BaselineKind,)

    def judge(self, j: Judging) -> CheckResult:
        assert j.m.kernels is not None
        return check_kernel_list(j.case, j.target, j.m.kernels)
