"""The case model: what one validated case file declares, as plain frozen data.

Every value here has been checked (`cl_validate.spec.validate`); every field a report points
at keeps the case-file line it came from (`CaseSpec.lines`, `CaseSpec.line_of`). Plain data,
sent to a case process. Imports nothing heavy.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cl_validate.paths import display_path
from cl_validate.spec.budget_keys import budget_keys
from cl_validate.spec.targets import BUILTIN, TargetDef

#: Where commands look for case files by default, and cases by name.
DEFAULT_CASES = "model_cases"
DTYPES: tuple[str, ...] = (
    "float32", "float16", "float64", "bfloat16", "int8", "uint8", "int32", "int64", "bool",
)
IO_LAYOUTS: tuple[str, ...] = ("NCHW", "NHWC")
DEFAULT_PIPELINE = "nhwc"
#: Pipelines cl_validate registers itself (`cl_validate.compile.pipeline`); a case may also
#: name its own as ``module:function``. Known here so a case file is checked without TVM.
BUILTIN_PIPELINES: tuple[str, ...] = ("nhwc", "nhwc-plain")
DEFAULT_TOLERANCE = (1e-5, 1e-5)
REFERENCES = ("float32", "float64")
#: ``weights``: the factory's weights as built, or with every BatchNorm's running statistics
#: calibrated on random inputs, or every projection drawn again with the variance that keeps
#: the signal (then calibrated): so a deep random network keeps its signal through depth
WEIGHTS = ("as-built", "calibrated", "signal-preserving")
#: ``input_sensitivity``: what a numerics comparison that cannot fail is (its outputs barely
#: depend on the input): a failure, or a warning in a passing verdict
SENSITIVITY = ("fail", "warn")
#: The float64 rule's defaults. PyTorch's accuracy CI lets a float32 result be 2x (3x where
#: noise dominates) as far from float64 as eager float32 is, plus a tenth of its 1e-4
#: tolerance (torch._dynamo.utils.same). TVM's untuned kernels sum each output in one long
#: chain and measure 0.8-2.2x on the bundled cases (BENCHMARKS.md), so the default is 3x.
DEFAULT_MULTIPLIER = 3.0
DEFAULT_FLOOR = 1e-5
#: Per-case limits of a case's processes (seconds for all targets; resident memory).
DEFAULT_TIMEOUT_S = 900.0
DEFAULT_MAX_MEMORY_MB = 6144
#: Inputs larger than this many elements are almost certainly a typo (and would exhaust memory).
MAX_INPUT_ELEMENTS = 1 << 28


@dataclass(frozen=True)
class Tolerance:
    """When TVM's output is close enough to PyTorch's.

    ``reference = "float32"`` (the default): elementwise ``|tvm - torch| <= atol + rtol *
    |torch|`` against eager float32 (numpy.isclose semantics). ``reference = "float64"``: the
    model also runs eagerly in float64, and TVM's RMSE against that must be at most
    ``multiplier`` times eager float32's own RMSE against it, plus ``floor`` (the rule
    PyTorch's accuracy CI accepts compiled models by); rtol and atol are then unused.
    ``steps`` (a quantized model): the largest error against the reference (eager float32,
    or float64 as ``reference`` says), counted in the output's quantization steps, must be at
    most ``steps``; rtol, atol, multiplier and floor are then unused.
    """

    rtol: float
    atol: float
    reference: str = "float32"
    multiplier: float = DEFAULT_MULTIPLIER
    floor: float = DEFAULT_FLOOR
    steps: float | None = None

    def merged(self, override: Mapping[str, float | str] | None) -> Tolerance:
        if not override:
            return self
        return Tolerance(
            rtol=float(override.get("rtol", self.rtol)),
            atol=float(override.get("atol", self.atol)),
            reference=str(override.get("reference", self.reference)),
            multiplier=float(override.get("multiplier", self.multiplier)),
            floor=float(override.get("floor", self.floor)),
            steps=float(override["steps"]) if "steps" in override else self.steps,
        )

    @property
    def float64(self) -> bool:
        """Whether it judges against the float64 reference run."""
        return self.reference == "float64"

    @property
    def by_steps(self) -> bool:
        """Whether it counts the error in quantization steps (a quantized output)."""
        return self.steps is not None

    @property
    def by_ratio(self) -> bool:
        """Whether it is the float64 rule: TVM's RMSE over eager float32's."""
        return self.float64 and not self.by_steps


#: A dimension: a size, or the name of a dynamic dimension declared in ``[dynamic]``.
Dim = int | str


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[Dim, ...]
    dtype: str
    layout: str | None  # None: passed as PyTorch holds it; "NHWC": program takes channels-last
    range: tuple[float, float] | None
    line: int | None = None

    def concrete(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        """The shape with each dynamic dimension at its size in `sizes`."""
        return tuple(d if isinstance(d, int) else sizes[d] for d in self.shape)


@dataclass(frozen=True)
class DynamicDim:
    """A dimension the program is compiled for symbolically (``[dynamic]``): exported once
    with a symbolic size in [min, max], its numerics run at each of `values`."""

    name: str
    min: int
    max: int
    values: tuple[int, ...]
    line: int | None = None

    @property
    def example(self) -> int:
        """The size torch.export traces with: the middle one of `values`, or another that is
        at least 2 (torch specializes a traced size of 0 or 1)."""
        middle = self.values[len(self.values) // 2]
        return middle if middle >= 2 else next((v for v in self.values if v >= 2),
                                               max(self.values))


@dataclass(frozen=True)
class Variant:
    """One more shape a case runs at (``[[variants]]``): its own compile and verdicts, named
    ``check[<variant>-<target>]``; its budget and tolerance override the case's."""

    name: str
    index: int  # its position among the [[variants]] tables
    shapes: dict[str, tuple[Dim, ...]]  # input name → shape, for the inputs it changes
    budget: dict[str, Any] = field(default_factory=dict)
    tolerance: dict[str, float | str] = field(default_factory=dict)
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # target → budget, tol
    line: int | None = None

    def path(self, *keys: str) -> tuple[str, ...]:
        """Where one of its keys is in the case file, for `CaseSpec.line_of`."""
        return ("variants", str(self.index), *keys)


@dataclass(frozen=True)
class OutputSpec:
    index: int
    name: str | None
    layout: str | None
    tolerance: dict[str, float | str] = field(default_factory=dict)
    target_tolerance: dict[str, dict[str, float | str]] = field(default_factory=dict)
    line: int | None = None
    #: ``selection = { axis, differing }``: the output holds selected items along `axis`,
    #: compared as a set (`measurements.selection`); None: element by element
    selection: tuple[int, int] | None = None


@dataclass(frozen=True)
class Budget:
    """The budgets that apply to a case on one target, with the lines that declare them: each
    ``[budget]`` key a check declared (`cl_validate.spec.budget_keys`), at its declared value
    or its default (None: not judged)."""

    values: Mapping[str, int | float | None] = field(default_factory=dict)
    lines: Mapping[str, int | None] = field(default_factory=dict)
    reason: str | None = None  # why the budget was last raised (`budget tighten --reason`)

    def get(self, key: str) -> int | float | None:
        """The budget `key` (a declared `BudgetKey` name), None when it does not apply."""
        return self.values.get(key)

    def line(self, key: str) -> int | None:
        """The case-file line that declares budget `key`."""
        return self.lines.get(key)

    def declared(self) -> dict[str, int | float]:
        """Every budget that applies, by key, in the order the checks declare them."""
        return {k.name: v for k in budget_keys() if (v := self.values.get(k.name)) is not None}


@dataclass(frozen=True)
class NumericsSample:
    """One set of inputs numerics runs: its dynamic sizes and input seed, and its name in
    reports (``batch=8, seed=2``; "" for a static case's only one)."""

    label: str
    sizes: dict[str, int]
    seed: int


@dataclass(frozen=True)
class CaseSpec:
    """One validated model case. Plain data: it is sent to a case process."""

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
    #: dynamic dimension name → its range ([dynamic])
    dynamic: dict[str, DynamicDim] = field(default_factory=dict)
    #: the other shapes the case runs at ([[variants]]), each a run of its own (`expand`)
    variants: tuple[Variant, ...] = ()
    #: the variant this spec runs (from `expand`); None: the case as its [[inputs]] declare
    variant: Variant | None = None
    #: every target in `targets` by name: built in, from [tool.cl_validate.targets] or the
    #: case's own [targets.<name>]
    target_defs: dict[str, TargetDef] = field(default_factory=dict)
    #: input draws numerics runs on (seeds ``seed`` .. ``seed + seeds - 1``; weights: ``seed``)
    seeds: int = 1
    #: time every kernel with TVM's per-call hook on every run (``profile = true``)
    profile: bool = False
    #: `WEIGHTS`: "calibrated" recomputes BatchNorm statistics before anything is measured;
    #: "signal-preserving" draws the projections again first (`session.weights`)
    weights: str = "as-built"
    #: `SENSITIVITY`: whether numerics that cannot tell a wrong kernel fail or warn
    input_sensitivity: str = "fail"
    #: the names of the model's outputs, once its forward ran (`compile.model_outputs`:
    #: ``logits``, ``1.k``; "" for a lone tensor): an [[outputs]] entry whose name is one of
    #: them is that output, wherever it stands; not from the case file
    output_names: tuple[str, ...] = ()
    #: a quantized network's convolutions and matmuls computed in integers (the nhwc
    #: pipeline's ``integer_compute`` stage); false keeps them in float between QDQ ops
    integer_compute: bool = True

    # -- variants ---------------------------------------------------------------------------
    def expand(self) -> list[CaseSpec]:
        """One spec per shape the case runs at: itself, then each [[variants]] entry with its
        shapes in place of the [[inputs]] ones."""
        return [self, *(replace(self, variant=v, inputs=tuple(
            replace(i, shape=v.shapes.get(i.name, i.shape)) for i in self.inputs))
            for v in self.variants)]

    @property
    def label(self) -> str:
        """The run's name in reports: ``resnet50``, or ``resnet50[b8]`` for a variant."""
        return self.name if self.variant is None else f"{self.name}[{self.variant.name}]"

    @property
    def ref(self) -> str:
        """How a command line names this case (``cl-validate show REF``): its name where a
        name finds it (a case file under ``model_cases/`` of the working directory), else its
        file's path, shell-quoted: a hint must work for a case kept anywhere."""
        cases = Path.cwd() / DEFAULT_CASES
        try:
            self.path.resolve().relative_to(cases.resolve())
            return self.name
        except ValueError:
            return shlex.quote(display_path(self.path))

    # -- dynamic dimensions -----------------------------------------------------------------
    def sample_sizes(self) -> list[dict[str, int]]:
        """The sizes numerics run at: one sample with no dynamic dimension; else the i-th
        value of every dimension together (all at their minimum, all at their maximum, …)."""
        if not self.dynamic:
            return [{}]
        n = max(len(d.values) for d in self.dynamic.values())
        return [{name: d.values[min(i, len(d.values) - 1)] for name, d in self.dynamic.items()}
                for i in range(n)]

    def samples(self) -> list[NumericsSample]:
        """Every run numerics compares: each input seed at each set of dynamic sizes."""
        out = []
        for sizes in self.sample_sizes():
            for seed in range(self.seed, self.seed + self.seeds):
                parts = [f"{name}={size}" for name, size in sizes.items()]
                if self.seeds > 1:
                    parts.append(f"seed={seed}")
                out.append(NumericsSample(", ".join(parts), sizes, seed))
        return out

    def example_sizes(self) -> dict[str, int]:
        """The sizes torch.export traces the model with."""
        return {name: d.example for name, d in self.dynamic.items()}

    def profiled(self, target: str) -> bool:
        """Whether runs of this case time their kernels on `target` without ``--profile``: the
        case says ``profile = true``, or it declares a budget on measured times."""
        budget = self.budget_for(target)
        return self.profile or any(budget.get(k.name) is not None for k in budget_keys()
                                   if k.needs_profile)

    def max_sizes(self) -> dict[str, int]:
        """Every dynamic dimension at its largest size: where bytes and times are taken."""
        return {name: d.max for name, d in self.dynamic.items()}

    # -- per-target views -------------------------------------------------------------------
    def target_def(self, name: str) -> TargetDef:
        """What `name` means for this case (a built-in name needs no declaration)."""
        found = self.target_defs.get(name) or BUILTIN.get(name)
        if found is None:
            raise KeyError(f"case '{self.name}' declares no target '{name}'")
        return found

    def _budget_layers(self, target: str) -> list[tuple[dict[str, Any], tuple[str, ...]]]:
        """The budget tables that apply on `target`, least specific first, with their path:
        [targets_override.<t>], then the variant's budget and its targets_override.<t>."""
        layers: list[tuple[dict[str, Any], tuple[str, ...]]] = [
            (self.overrides.get(target, {}).get("budget") or {},
             ("targets_override", target, "budget"))]
        v = self.variant
        if v is not None:
            layers.append((v.budget, v.path("budget")))
            layers.append((v.overrides.get(target, {}).get("budget") or {},
                           v.path("targets_override", target, "budget")))
        return layers

    def budget_for(self, target: str) -> Budget:
        """The budget that applies on `target`: ``[budget]``, then
        ``[targets_override.<target>] budget``, then the variant's ``budget`` and its
        ``targets_override.<target>`` (most specific wins, key by key)."""
        b = self.budget
        values = dict(b.values)
        lines = dict(b.lines)
        reason = b.reason
        for table, path in self._budget_layers(target):
            for k in budget_keys():
                if k.name in table:
                    values[k.name] = table[k.name]
                    lines[k.name] = self.line_of(*path, k.name)
            reason = table.get("reason", reason)
        return Budget(values, lines, reason)

    def budget_source(self, target: str, key: str) -> tuple[str, int | None] | None:
        """Which table declares the budget `key` that applies on `target` (``budget``,
        ``targets_override.cuda``, ``variants.b8``, ``variants.b8.targets_override.cuda``)
        and its line; None when no table does (the default)."""
        found = (("budget", self.line_of("budget", key))
                 if ("budget", key) in self.lines else None)
        for table, path in self._budget_layers(target):
            if key in table:
                where = ".".join(path[:-1]) if path[0] == "targets_override" else \
                    f"variants.{self.variant.name}" + (  # type: ignore[union-attr]
                        f".targets_override.{target}" if "targets_override" in path else "")
                found = (where, self.line_of(*path, key))
        return found

    def tolerance_for(self, target: str, output: int | None = 0
                      ) -> tuple[Tolerance, int | None]:
        """Effective tolerance for one output on one target, and the line that declared it.

        Precedence, most specific first: output × target, output, the variant's × target,
        the variant's, target, case (`output` None: without the [[outputs]] layers).
        """
        tol = self.tolerance
        line = self.line_of("tolerance")
        tgt = self.overrides.get(target, {}).get("tolerance")
        if tgt:
            tol, line = tol.merged(tgt), self.line_of("targets_override", target, "tolerance")
        v = self.variant
        if v is not None and v.tolerance:
            tol, line = tol.merged(v.tolerance), self.line_of(*v.path("tolerance"))
        vt = v.overrides.get(target, {}).get("tolerance") if v is not None else None
        if v is not None and vt:
            tol = tol.merged(vt)
            line = self.line_of(*v.path("targets_override", target, "tolerance"))
        out = self.declared_output(output) if output is not None else None
        if out is not None and out.tolerance:
            tol = tol.merged(out.tolerance)
            line = self.line_of("outputs", str(out.index), "tolerance")
        if out is not None and target in out.target_tolerance:
            tol = tol.merged(out.target_tolerance[target])
            line = self.line_of("outputs", str(out.index), "targets_override")
        return tol, line

    def declared_output(self, index: int) -> OutputSpec | None:
        """The [[outputs]] entry of the model's output `index`: the one named as the output
        is (`output_names`), else the entry at its position unless that entry names another
        output; None when none is."""
        names = self.output_names
        if index < len(names) and names[index]:
            for o in self.outputs:
                if o.name == names[index]:
                    return o
        if index < len(self.outputs):
            o = self.outputs[index]
            if not (o.name and o.name in names and names.index(o.name) != index):
                return o
        return None

    def output_label(self, index: int) -> str:
        """How reports name output `index`: ``output 0``, or ``output logits`` by the name
        the model gives it (a dict key, a field, a path ``1.k``)."""
        names = self.output_names
        name = names[index] if index < len(names) else ""
        return f"output {name}" if name and name != str(index) else f"output {index}"

    def needs_float64(self, target: str) -> bool:
        """Whether any output on `target` is judged against a float64 reference run."""
        return any(self.tolerance_for(target, i)[0].float64
                   for i in [None, *range(max(len(self.outputs), len(self.output_names)))])

    def output_layout(self, index: int) -> str | None:
        out = self.declared_output(index)
        return out.layout if out is not None else None

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
