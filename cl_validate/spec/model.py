"""The case model: what one validated case file declares, as plain frozen data.

Every value here has been checked (`cl_validate.spec.validate`); every field a report points
at keeps the case-file line it came from (`CaseSpec.lines`, `CaseSpec.line_of`). Plain data,
safe to pickle to a worker process. Imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KNOWN_TARGETS: tuple[str, ...] = ("llvm", "cuda")
DTYPES: tuple[str, ...] = (
    "float32", "float16", "float64", "bfloat16", "int8", "uint8", "int32", "int64", "bool",
)
IO_LAYOUTS: tuple[str, ...] = ("NCHW", "NHWC")
DEFAULT_PIPELINE = "nhwc"
#: Pipelines cl_validate registers itself (`cl_validate.compile.pipeline`); a case may also
#: name its own as ``module:function``. Known here so a case file is checked without TVM.
BUILTIN_PIPELINES: tuple[str, ...] = ("nhwc", "nhwc-plain")
DEFAULT_TOLERANCE = (1e-5, 1e-5)
#: Per-case limits of the worker process (seconds for all targets; resident memory).
DEFAULT_TIMEOUT_S = 900.0
DEFAULT_MAX_MEMORY_MB = 6144
#: Inputs larger than this many elements are almost certainly a typo (and would exhaust memory).
MAX_INPUT_ELEMENTS = 1 << 28


@dataclass(frozen=True)
class Tolerance:
    """Elementwise bound |tvm - torch| <= atol + rtol * |torch| (numpy.isclose semantics)."""

    rtol: float
    atol: float

    def merged(self, override: Mapping[str, float] | None) -> Tolerance:
        if not override:
            return self
        return Tolerance(
            rtol=float(override.get("rtol", self.rtol)), atol=float(override.get("atol", self.atol))
        )


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    layout: str | None  # None: passed as PyTorch holds it; "NHWC": program takes channels-last
    range: tuple[float, float] | None
    line: int | None = None


@dataclass(frozen=True)
class OutputSpec:
    index: int
    name: str | None
    layout: str | None
    tolerance: dict[str, float] = field(default_factory=dict)
    target_tolerance: dict[str, dict[str, float]] = field(default_factory=dict)
    line: int | None = None


@dataclass(frozen=True)
class Budget:
    """Maximum counts a case may reach on one target, with the lines that declare them."""

    layout_transforms: int
    kernels: int | None
    layout_transforms_line: int | None = None
    kernels_line: int | None = None
    reason: str | None = None  # why the budget was last raised (`budget tighten --reason`)


@dataclass(frozen=True)
class CaseSpec:
    """One validated model case. Plain data: safe to pickle to a worker process."""

    name: str
    path: Path
    model: str
    description: str
    targets: tuple[str, ...]
    inputs: tuple[InputSpec, ...]
    outputs: tuple[OutputSpec, ...]
    layout: dict[str, tuple[str, ...]]
    pipeline: str
    seed: int
    budget: Budget
    tolerance: Tolerance
    overrides: dict[str, dict[str, Any]]
    lines: dict[tuple[str, ...], int]
    timeout: float = DEFAULT_TIMEOUT_S
    max_memory_mb: int = DEFAULT_MAX_MEMORY_MB
    #: nn.Module path → layouts for that module's op, overriding [layout] (mixed layouts)
    layout_overrides: dict[str, tuple[str, ...]] = field(default_factory=dict)

    # -- per-target views -------------------------------------------------------------------
    def budget_for(self, target: str) -> Budget:
        """The case budget with ``[targets_override.<target>.budget]`` applied."""
        over = self.overrides.get(target, {}).get("budget") or {}
        b = self.budget
        lt, kn = b.layout_transforms, b.kernels
        lt_line, kn_line = b.layout_transforms_line, b.kernels_line
        if "layout_transforms" in over:
            lt = over["layout_transforms"]
            lt_line = self.line_of("targets_override", target, "budget", "layout_transforms")
        if "kernels" in over:
            kn = over["kernels"]
            kn_line = self.line_of("targets_override", target, "budget", "kernels")
        return Budget(lt, kn, lt_line, kn_line, over.get("reason", b.reason))

    def tolerance_for(self, target: str, output: int = 0) -> tuple[Tolerance, int | None]:
        """Effective tolerance for one output on one target, and the line that declared it.

        Precedence, most specific first: output × target, output, target, case.
        """
        tol = self.tolerance
        line = self.line_of("tolerance")
        tgt = self.overrides.get(target, {}).get("tolerance")
        if tgt:
            tol, line = tol.merged(tgt), self.line_of("targets_override", target, "tolerance")
        out = self.outputs[output] if output < len(self.outputs) else None
        if out is not None and out.tolerance:
            tol, line = tol.merged(out.tolerance), self.line_of("outputs", str(output), "tolerance")
        if out is not None and target in out.target_tolerance:
            tol = tol.merged(out.target_tolerance[target])
            line = self.line_of("outputs", str(output), "targets_override")
        return tol, line

    def output_layout(self, index: int) -> str | None:
        return self.outputs[index].layout if index < len(self.outputs) else None

    def line_of(self, *path: str) -> int | None:
        """Line of the most specific declared key on `path` (falls back to its parents)."""
        return nearest_line(self.lines, path)


def nearest_line(lines: Mapping[tuple[str, ...], int], path: tuple[str, ...]) -> int | None:
    """Line of the most specific key of `path` that is declared (``("budget", "kernels")``,
    else ``("budget",)``), None when not even the first is."""
    p = tuple(path)
    while p:
        if p in lines:
            return lines[p]
        p = p[:-1]
    return None
