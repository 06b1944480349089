"""The fused kernel list as plain data: its kernels and their transforms, the transform count
after each pipeline stage, and the layouts of layout-sensitive ops.

A case process reads these off the compiled program (`cl_validate.analysis`) and sends them to the
parent, which judges and reports them without loading TVM.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from cl_validate.measurements.attribution import Attribution
from cl_validate.measurements.units import bytes_text, share_text, sizes_text, total

Shape = tuple[int | str, ...]  # a symbolic extent ([dynamic]) is its name: ("batch", 56, 56, 64)
#: The dlight rule that leaves a GPU kernel a plain thread mapping: slow on a real GPU
FALLBACK = "Fallback"
#: A kernel's rule when dlight scheduled it but nobody noted the rule (a pipeline of its own
#: that applies dlight without `cl_validate.compile.schedule`)
UNRECORDED = "unrecorded"


def shape_text(shape: Shape) -> str:
    """``[batch, 56, 56, 64]``: no quotes around a symbolic extent."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


class _Moves:
    """What a kernel or a transform moves: what it reads plus what it writes."""

    bytes_read: int | None
    bytes_written: int | None

    @property
    def bytes(self) -> int | None:
        return total((self.bytes_read, self.bytes_written))


@dataclass(frozen=True)
class Transform(_Moves):
    """One layout transform op in the compiled program."""

    op: str  # "permute_dims" | "layout_transform"
    kernel: int  # index of the kernel it runs in
    primfunc: str
    weight: bool  # input derives only from parameters/constants
    in_shape: Shape | None = None
    axes: tuple[int, ...] | None = None
    attribution: Attribution | None = None
    #: the tensor it permutes, read once, and its result, written once (None: unknown)
    bytes_read: int | None = None
    bytes_written: int | None = None

    def describe(self) -> str:
        what = f"{self.op}{list(self.axes) if self.axes else ''}"
        shape = f" of {shape_text(self.in_shape)}" if self.in_shape else ""
        kind = "weight transform" if self.weight else "runtime transform"
        why = f": {self.attribution.describe()}" if self.attribution else ""
        return f"{what}{shape} ({kind}{why})"


@dataclass(frozen=True)
class Kernel(_Moves):
    index: int
    name: str
    ops: tuple[str, ...]  # the legalized PrimFuncs fused into it, in order
    transforms: tuple[Transform, ...] = ()
    out_shape: Shape | None = None
    #: its arguments, each read once, and its results, each written once (None: unknown)
    bytes_read: int | None = None
    bytes_written: int | None = None
    #: the dlight rule that scheduled it for a GPU (`cl_validate.compile.schedule`); None on
    #: a target dlight does not schedule (llvm)
    schedule: str | None = None
    #: the dtype of each op's first argument, as `ops` (a conv's data: ``float32``, or
    #: ``int8`` in an integer conv); empty where unknown
    dtypes: tuple[str | None, ...] = ()


@dataclass(frozen=True)
class QdqProduct:
    """A product of a quantized program: a convolution (transposed too) or a matmul whose
    operands are dequantized int8/uint8 codes (a QDQ product), computed in integers (its data
    the codes themselves) or in float (between the dequantize and the quantize)."""

    op: str  # "conv2d", "matmul", "conv2d_transpose", ...
    integer: bool
    binding: str  # its binding in the op-level program (reports name it through the sources)


@dataclass
class KernelList:
    """The PrimFuncs ``main`` calls, in execution order, after fusion."""

    kernels: list[Kernel] = field(default_factory=list)
    #: the sizes the bytes of a symbolic program were taken at (each [dynamic] maximum)
    bytes_at: dict[str, int] = field(default_factory=dict)
    #: every QDQ product of the program, in program order (empty: a float program; None:
    #: not recorded, a kernel list read before they were)
    qdq_products: tuple[QdqProduct, ...] | None = None

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

    # -- memory traffic ---------------------------------------------------------------------
    @property
    def traffic(self) -> int | None:
        """Bytes every kernel reads and writes, together (None when a kernel's are unknown)."""
        return total(k.bytes for k in self.kernels)

    @property
    def transform_bytes(self) -> int | None:
        """Bytes the runtime transforms move (each its operand read and its result written)."""
        return total(t.bytes for t in self.runtime_transforms)

    def share(self, n: int | None) -> float | None:
        """`n` bytes as a share of the whole program's traffic."""
        total = self.traffic
        return None if n is None or not total else n / total

    def traffic_text(self) -> str:
        """``traffic 205.31 MB; runtime transforms 1.20 MB (0.6%)`` (at batch=8, ...)."""
        moved = self.transform_bytes
        share = self.share(moved)
        text = (f"traffic {bytes_text(self.traffic)}; runtime transforms {bytes_text(moved)}"
                + (f" ({share_text(share)})" if share is not None else ""))
        return text + (f" at {sizes_text(self.bytes_at)}, the [dynamic] maxima"
                       if self.bytes_at else "")

    # -- GPU schedules ----------------------------------------------------------------------
    def schedule_counts(self) -> dict[str, int]:
        """dlight rule → how many kernels it scheduled; empty where dlight scheduled none."""
        counts: dict[str, int] = {}
        for k in self.kernels:
            if k.schedule is not None:
                counts[k.schedule] = counts.get(k.schedule, 0) + 1
        return counts

    def render(self, *, only_marked: bool = False, times: dict[int, str] | None = None) -> str:
        """Text table: one kernel per line with its result shape, the bytes it reads and
        writes, the GPU rule that scheduled it and its time (where known), transforms marked
        with ``>>`` and described with what they move."""
        lines = []
        width = max((len(k.name) for k in self.kernels), default=10)
        shapes = {k.index: f" -> {shape_text(k.out_shape)}" if k.out_shape else ""
                  for k in self.kernels}
        swidth = max((len(v) for v in shapes.values()), default=0)
        rwidth = max((len(k.schedule or "") for k in self.kernels), default=0)
        for k in self.kernels:
            mark = ">>" if k.transforms else "  "
            if only_marked and not k.transforms:
                continue
            line = f"{mark} {k.index:3d}  {k.name:<{width}}{shapes[k.index]:<{swidth}}"
            if k.bytes_read is not None:
                line += f"  {bytes_text(k.bytes_read):>9} in {bytes_text(k.bytes_written):>9} out"
            if rwidth:
                line += f"  {k.schedule or '':<{rwidth}}"
            if times is not None:
                line += f"  {times.get(k.index, ''):>9}"
            width_before = len(line)
            if k.transforms:
                line += "   " + self._cost(k, k.transforms[0])
            lines.append(line.rstrip())
            # Every transform a fused kernel holds gets a line of its own, marked, so the
            # marks add up to the count.
            lines += [f">>{' ' * (width_before - 2)}   {self._cost(k, t)}"
                      for t in k.transforms[1:]]
        return "\n".join(lines)

    def _cost(self, k: Kernel, t: Transform) -> str:
        """A transform and what it moves: its operand and result once each, as a kernel of
        its own would; fused with other ops, the kernel may move less."""
        share = self.share(t.bytes)
        moved = "" if t.bytes is None else f", moves {bytes_text(t.bytes)}" + (
            f" = {share_text(share)} of traffic" if share is not None and not t.weight else ""
        ) + (
            " (fused: its kernel may move less)" if len(k.ops) > 1 else "")
        return t.describe() + moved


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
    #: the shape of the operand each layout describes (data, kernel), where known
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
