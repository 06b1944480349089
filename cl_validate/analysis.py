"""Read a compiled case: the fused kernel list, its layout transforms, and op layouts.

Definitions (DESIGN.md): a *runtime layout transform* is a ``permute_dims`` or
``layout_transform`` op in the entry function whose input is computed at run time, counted
once per op whether it runs as its own kernel or fused into a compute kernel. A *weight
transform* is one whose input derives only from parameters/constants yet survived to run time.
The *fused kernel list* is the PrimFuncs ``main`` calls, in order, after fusion.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cl_validate.attribution import Attribution
from cl_validate.pipeline import AXES_ATTR, SOURCE_ATTR, TRANSFORM_ATTR, Compiled

if TYPE_CHECKING:
    pass

TRANSFORM_OPS = ("relax.permute_dims", "relax.layout_transform")
#: PrimFunc names TVM's own legalization gives transforms; a fallback for pipelines that
#: legalize without our tagging.
_TRANSFORM_PRIMFUNC_PREFIXES = {"transpose": "permute_dims", "te_layout_transform":
                                "layout_transform"}
_LAYOUT_ATTRS = ("data_layout", "kernel_layout", "out_layout", "layout")
#: Ops whose call is bookkeeping, not an op with a layout (never a kernel of its own).
_NOT_OPS = ("relax.call_tir", "relax.call_dps_packed", "relax.call_pure_packed",
            "relax.call_tir_with_grad", "relax.call_inplace_packed", "relax.call_tir_inplace")


@dataclass(frozen=True)
class Transform:
    """One layout transform op in the compiled program."""

    op: str  # "permute_dims" | "layout_transform"
    kernel: int  # index of the kernel it runs in
    primfunc: str
    weight: bool  # input derives only from parameters/constants
    in_shape: tuple[int, ...] | None = None
    axes: tuple[int, ...] | None = None
    attribution: Attribution | None = None

    def describe(self) -> str:
        what = f"{self.op}{list(self.axes) if self.axes else ''}"
        shape = f" of {list(self.in_shape)}" if self.in_shape else ""
        kind = "weight transform" if self.weight else "runtime transform"
        why = f": {self.attribution.describe()}" if self.attribution else ""
        return f"{what}{shape} ({kind}{why})"


@dataclass(frozen=True)
class Kernel:
    index: int
    name: str
    ops: tuple[str, ...]  # the legalized PrimFuncs fused into it, in order
    transforms: tuple[Transform, ...] = ()
    out_shape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class OpLayout:
    """A layout-sensitive op of the final op-level IR and the layouts it runs in."""

    op: str
    var: str
    layouts: dict[str, str]
    module: str | None = None  # nn.Module path of the PyTorch op it came from


@dataclass
class KernelList:
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
            shape = f" -> {list(k.out_shape)}" if k.out_shape else ""
            line = f"{mark} {k.index:3d}  {k.name:<{width}}{shape}"
            if k.transforms:
                line += "   " + "; ".join(t.describe() for t in k.transforms)
            lines.append(line)
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# IR helpers
# --------------------------------------------------------------------------------------------
def _bindings(func: Any) -> Iterator[Any]:
    for block in func.body.blocks:
        yield from block.bindings


def _const_type() -> type:
    from tvm.ir.expr import Constant

    return Constant


def _is_const(expr: Any) -> bool:
    return isinstance(expr, _const_type())


def _op_name(call: Any) -> str | None:
    from tvm import ir

    return call.op.name if isinstance(call.op, ir.Op) else None


def _shape(expr: Any) -> tuple[int, ...] | None:
    from tvm import relax

    sinfo = getattr(expr, "ty", None)
    if isinstance(sinfo, relax.TensorType) and sinfo.shape is not None:
        try:
            return tuple(int(d) for d in sinfo.shape.values)
        except (TypeError, AttributeError):
            return None
    return None


def _tensor_leaves(expr: Any) -> Iterator[Any]:
    from tvm import relax

    if isinstance(expr, relax.Tuple):
        for f in expr.fields:
            yield from _tensor_leaves(f)
    elif isinstance(expr, (relax.Var, _const_type())):
        yield expr


def _call_args(call: Any) -> list[Any]:
    """Tensor arguments of a call; for call_tir, the arguments of the PrimFunc."""
    name = _op_name(call)
    if name in ("relax.call_tir", "relax.call_dps_packed", "relax.call_tir_inplace"):
        return list(_tensor_leaves(call.args[1]))
    return [leaf for a in call.args for leaf in _tensor_leaves(a)]


def _const_derived(func: Any, const_params: Iterable[Any]) -> set[Any]:
    """Vars of `func` whose value depends only on constants and `const_params`."""
    from tvm import relax

    derived: set[Any] = set(const_params)
    for b in _bindings(func):
        value = b.value
        if _is_const(value):
            derived.add(b.var)
        elif isinstance(value, relax.Var):
            if value in derived:
                derived.add(b.var)
        elif isinstance(value, relax.TupleGetItem):
            if isinstance(value.tuple_value, relax.Var) and value.tuple_value in derived:
                derived.add(b.var)
        elif isinstance(value, (relax.Call, relax.Tuple)):
            leaves = _call_args(value) if isinstance(value, relax.Call) else list(
                _tensor_leaves(value))
            if all(_is_const(x) or x in derived for x in leaves):
                derived.add(b.var)
    return derived


def _weight_params(func: Any) -> list[Any]:
    attrs = func.attrs
    n = int(attrs["num_input"]) if attrs is not None and "num_input" in attrs else len(func.params)
    return list(func.params[n:])


def _transform_kind(mod: Any, gvar: Any) -> tuple[str | None, tuple[int, ...] | None]:
    """Which transform a legalized PrimFunc is (None if it is not one)."""
    func = mod[gvar]
    attrs = func.attrs
    if attrs is not None and TRANSFORM_ATTR in attrs:
        axes = tuple(int(a) for a in attrs[AXES_ATTR]) if AXES_ATTR in attrs else None
        if axes is not None and axes == tuple(range(len(axes))):
            return None, None  # an identity permute copies; it does not transform a layout
        return str(attrs[TRANSFORM_ATTR]), axes
    base = gvar.name_hint.rstrip("0123456789")
    return _TRANSFORM_PRIMFUNC_PREFIXES.get(base), None


def _attribution(mod: Any, gvar: Any) -> Attribution | None:
    attrs = mod[gvar].attrs
    if attrs is not None and SOURCE_ATTR in attrs:
        return Attribution.from_json(str(attrs[SOURCE_ATTR]))
    return None


def _is_primitive(func: Any) -> bool:
    from tvm import relax

    return isinstance(func, relax.Function) and func.attrs is not None and bool(
        func.attrs.get("Primitive", False))


# --------------------------------------------------------------------------------------------
# Kernel list
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Component:
    primfunc: str
    transform: str | None
    axes: tuple[int, ...] | None
    in_shape: tuple[int, ...] | None
    weight: bool
    attribution: Attribution | None = None


def _fused_components(mod: Any) -> dict[str, list[_Component]]:
    """For each fused (Primitive) Relax function called from main: its components, in order.

    Weight provenance is decided here, where the fused body is still visible: a transform in
    a fused function is a weight transform when its input derives only from fused parameters
    whose arguments at the call site in main are constant-derived.
    """
    from tvm import relax

    main = mod["main"]
    derived_main = _const_derived(main, _weight_params(main))
    out: dict[str, list[_Component]] = {}
    for b in _bindings(main):
        call = b.value
        if not isinstance(call, relax.Call) or not isinstance(call.op, relax.GlobalVar):
            continue
        func = mod[call.op]
        if not _is_primitive(func):
            continue
        args = [a for a in call.args]
        const_params = [p for p, a in zip(func.params, args, strict=False)
                        if _is_const(a) or a in derived_main]
        derived = _const_derived(func, const_params)
        comps: list[_Component] = []
        for fb in _bindings(func):
            inner = fb.value
            if isinstance(inner, relax.Call) and _op_name(inner) == "relax.call_tir":
                gv = inner.args[0]
                kind, axes = _transform_kind(mod, gv)
                targs = _call_args(inner)
                weight = bool(targs) and all(
                    _is_const(x) or x in derived for x in targs)
                comps.append(_Component(gv.name_hint, kind, axes,
                                        _shape(targs[0]) if targs else None, weight,
                                        _attribution(mod, gv) if kind else None))
        out[call.op.name_hint] = comps
    return out


def kernel_list(compiled: Compiled) -> KernelList:
    """The fused kernel list of the final stage, with transforms found and classified."""
    from tvm import relax

    components: dict[str, list[_Component]] = {}
    for stage in compiled.stages:  # the latest stage that still shows fused Relax functions
        found = _fused_components(stage.mod)
        if found:
            components = found
    mod = compiled.final
    main = mod["main"]
    derived = _const_derived(main, _weight_params(main))
    kernels: list[Kernel] = []
    for b in _bindings(main):
        call = b.value
        if not isinstance(call, relax.Call):
            continue
        name = _op_name(call)
        if name in ("relax.call_tir", "relax.call_tir_inplace"):
            gv = call.args[0]
            callee = gv.name_hint
        elif name == "relax.call_dps_packed":
            callee = str(call.args[0].global_symbol if hasattr(call.args[0], "global_symbol")
                         else call.args[0])
        elif isinstance(call.op, relax.GlobalVar) and _is_primitive(mod[call.op]):
            gv, callee = call.op, call.op.name_hint  # fused but not yet FuseTIR'd
        else:
            continue
        index = len(kernels)
        args = _call_args(call) if name else list(call.args)
        transforms: list[Transform] = []
        if callee in components:
            comps = components[callee]
            for c in comps:
                if c.transform:
                    transforms.append(Transform(c.transform, index, c.primfunc, c.weight,
                                                c.in_shape, c.axes, c.attribution))
            ops = tuple(c.primfunc for c in comps)
        else:
            ops = (callee,)
            if name in ("relax.call_tir", "relax.call_tir_inplace"):
                kind, axes = _transform_kind(mod, gv)
                if kind:
                    weight = bool(args) and all(
                        _is_const(x) or x in derived for x in args)
                    transforms.append(Transform(kind, index, callee, weight,
                                                _shape(args[0]) if args else None, axes,
                                                _attribution(mod, gv)))
        kernels.append(Kernel(index, callee, ops, tuple(transforms), _shape(b.var)))
    return KernelList(kernels)


# --------------------------------------------------------------------------------------------
# Per-stage counts and op layouts
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StageCount:
    stage: str
    runtime: int
    weight: int


def _count_op_level(mod: Any) -> tuple[int, int] | None:
    """(runtime, weight) transforms of an op-level or fused stage; None after FuseTIR."""
    from tvm import relax

    main = mod["main"]
    derived = _const_derived(main, _weight_params(main))
    runtime = weight = 0
    saw_fused_tir = False
    fused = _fused_components(mod)
    for b in _bindings(main):
        call = b.value
        if not isinstance(call, relax.Call):
            continue
        name = _op_name(call)
        args = _call_args(call)
        is_weight = bool(args) and all(_is_const(x) or x in derived for x in args)
        if name in TRANSFORM_OPS:
            kind: str | None = name
            axes = getattr(call.attrs, "axes", None)
            if axes is not None and [int(a) for a in axes] == list(range(len(axes))):
                kind = None  # identity permute: a copy, not a layout transform
        elif name == "relax.call_tir":
            kind = _transform_kind(mod, call.args[0])[0]
            if kind is None and call.args[0].name_hint.startswith("fused_"):
                saw_fused_tir = True
        elif isinstance(call.op, relax.GlobalVar) and call.op.name_hint in fused:
            for c in fused[call.op.name_hint]:
                if c.transform:
                    weight += c.weight
                    runtime += not c.weight
            continue
        else:
            kind = None
        if kind:
            weight += is_weight
            runtime += not is_weight
    return None if saw_fused_tir else (runtime, weight)


def stage_counts(compiled: Compiled, final: KernelList) -> list[StageCount]:
    """Transforms after each stage (runtime, weight): shows which stage added or kept one."""
    out: list[StageCount] = []
    for stage in compiled.stages:
        counted = _count_op_level(stage.mod)
        if counted is None:
            counted = (len(final.runtime_transforms), len(final.weight_transforms))
        out.append(StageCount(stage.name, *counted))
    return out


def op_level_stage(compiled: Compiled) -> str:
    """Name of the last stage before legalization: main calls Relax ops, not PrimFuncs."""
    from tvm import relax

    best = compiled.stages[0].name
    for stage in compiled.stages:
        if any(isinstance(b.value, relax.Call) and _op_name(b.value) in _NOT_OPS
               for b in _bindings(stage.mod["main"])):
            break
        best = stage.name
    return best


def op_layouts(mod: Any, sources: dict[str, str] | None = None) -> list[OpLayout]:
    """Every op in main with layout attributes (convolutions, pooling, resize, …).

    `sources` (binding name → "module.path (op)") gives each op its nn.Module path.
    """
    from tvm import relax

    out: list[OpLayout] = []
    for b in _bindings(mod["main"]):
        call = b.value
        if not isinstance(call, relax.Call) or _op_name(call) is None or call.attrs is None:
            continue
        layouts: dict[str, str] = {}
        for key in _LAYOUT_ATTRS:
            try:
                value = getattr(call.attrs, key)
            except AttributeError:
                continue
            if value is not None and str(value):
                layouts[key] = str(value)
        if layouts:
            src = (sources or {}).get(b.var.name)
            module = src.rsplit(" (", 1)[0] if src and not src.startswith("(") else None
            out.append(OpLayout(str(_op_name(call)), b.var.name, layouts, module))
    return out
