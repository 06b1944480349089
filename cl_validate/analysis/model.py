"""What the analysis reports, as plain data: the fused kernel list, its transforms, the
transform count after each stage, and the layouts of layout-sensitive ops.

No TVM here: a worker computes these from the compiled program and sends them to the parent,
which judges and reports them without loading TVM (`cl_validate.analysis.kernels` and friends
read the IR).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from cl_validate.compile.reasons import Attribution

Shape = tuple[int | str, ...]  # a symbolic extent ([dynamic]) is its name: ("batch", 56, 56, 64)


def shape_text(shape: Shape) -> str:
    """``[batch, 56, 56, 64]``: no quotes around a symbolic extent."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


@dataclass(frozen=True)
class Transform:
    """One layout transform op in the compiled program."""

    op: str  # "permute_dims" | "layout_transform"
    kernel: int  # index of the kernel it runs in
    primfunc: str
    weight: bool  # input derives only from parameters/constants
    in_shape: Shape | None = None
    axes: tuple[int, ...] | None = None
    attribution: Attribution | None = None

    def describe(self) -> str:
        what = f"{self.op}{list(self.axes) if self.axes else ''}"
        shape = f" of {shape_text(self.in_shape)}" if self.in_shape else ""
        kind = "weight transform" if self.weight else "runtime transform"
        why = f": {self.attribution.describe()}" if self.attribution else ""
        return f"{what}{shape} ({kind}{why})"


@dataclass(frozen=True)
class Kernel:
    index: int
    name: str
    ops: tuple[str, ...]  # the legalized PrimFuncs fused into it, in order
    transforms: tuple[Transform, ...] = ()
    out_shape: Shape | None = None


@dataclass
class KernelList:
    """The PrimFuncs ``main`` calls, in execution order, after fusion."""

    kernels: list[Kernel] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.kernels)

    def __iter__(self) -> Iterator[Kernel]:
        return iter(self.kernels)

    @property
    def transforms(self) -> list[Transform]:
        return [t for k in self.kernels for t in k.transforms]

    @property
    def runtime_transforms(self) -> list[Transform]:
        return [t for t in self.transforms if not t.weight]

    @property
    def weight_transforms(self) -> list[Transform]:
        return [t for t in self.transforms if t.weight]

    def render(self, *, only_marked: bool = False) -> str:
        """Text table: one kernel per line, transforms marked with ``>>``."""
        lines = []
        width = max((len(k.name) for k in self.kernels), default=10)
        for k in self.kernels:
            mark = ">>" if k.transforms else "  "
            if only_marked and not k.transforms:
                continue
            shape = f" -> {shape_text(k.out_shape)}" if k.out_shape else ""
            line = f"{mark} {k.index:3d}  {k.name:<{width}}{shape}"
            if k.transforms:
                line += "   " + "; ".join(t.describe() for t in k.transforms)
            lines.append(line)
        return "\n".join(lines)


@dataclass(frozen=True)
class StageCount:
    """Runtime and weight transforms in the IR after one pipeline stage."""

    stage: str
    runtime: int
    weight: int


@dataclass(frozen=True)
class OpLayout:
    """A layout-sensitive op of the final op-level IR and the layouts it runs in."""

    op: str
    var: str
    layouts: dict[str, str]
    module: str | None = None  # nn.Module path of the PyTorch op it came from
