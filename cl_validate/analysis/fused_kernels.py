"""The fused kernel list of a compiled case, with its layout transforms found and classified.

Definitions ("What the numbers mean" in docs/explanation/why-transforms-cost.md, written once
in `cl_validate.ir`): a *runtime layout transform* is a ``permute_dims`` or
``layout_transform`` op in the entry function whose input is computed at run time, counted
once per op whether it runs as its own kernel or fused into a compute kernel. A *weight
transform* is one whose input derives only from parameters/constants yet survived to run
time. The *fused kernel list* is the PrimFuncs ``main`` calls, in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tvm import relax

from cl_validate.analysis.qdq_products import qdq_products
from cl_validate.compile.program import Compiled
from cl_validate.ir import (
    SCHEDULE_ATTR,
    SOURCE_ATTR,
    all_weight_derived,
    bindings,
    call_args,
    is_primitive,
    is_weight_derived,
    op_name,
    primfunc_transform,
    shown_shape,
    tensor_bytes,
    weight_derived,
)
from cl_validate.measurements.attribution import Attribution
from cl_validate.measurements.kernel_list import (
    UNRECORDED,
    Kernel,
    KernelList,
    Shape,
    Transform,
)
from cl_validate.measurements.units import total

#: TVM's mark on a PrimFunc a schedule was applied to (dlight sets it on every one it scheduled)
_SCHEDULED = "tirx.is_scheduled"


def _schedule(mod: Any, gvar: Any) -> str | None:
    """The dlight rule that scheduled a kernel's PrimFunc (`cl_validate.compile.schedule`);
    None where nothing was scheduled (a CPU target)."""
    attrs = mod[gvar].attrs
    if attrs is None:
        return None
    if SCHEDULE_ATTR in attrs:
        return str(attrs[SCHEDULE_ATTR])
    return UNRECORDED if _SCHEDULED in attrs and bool(attrs[_SCHEDULED]) else None


def _sum_bytes(exprs: Iterable[Any], sizes: Mapping[str, int]) -> int | None:
    """Bytes of all `exprs` together; None when one is unknown."""
    return total(tensor_bytes(e, sizes) for e in exprs)


def _attribution(mod: Any, gvar: Any) -> Attribution | None:
    """The attribution our legalization wrote onto a transform's PrimFunc."""
    attrs = mod[gvar].attrs
    if attrs is not None and SOURCE_ATTR in attrs:
        return Attribution.from_json(str(attrs[SOURCE_ATTR]))
    return None


@dataclass(frozen=True)
class _Component:
    primfunc: str
    transform: str | None
    axes: tuple[int, ...] | None
    in_shape: Shape | None
    weight: bool
    attribution: Attribution | None = None
    bytes_read: int | None = None
    bytes_written: int | None = None
    dtype: str | None = None  # its first argument's


def _dtype(args: list[Any]) -> str | None:
    """The dtype of a kernel's or component's first argument (a conv's data: float32, or
    int8 in an integer conv)."""
    ty = getattr(args[0], "ty", None) if args else None
    dtype = ty.dtype if isinstance(ty, relax.TensorType) else None
    return str(dtype) if dtype else None


def fused_components(mod: Any, sizes: Mapping[str, int] | None = None
                     ) -> dict[str, list[_Component]]:
    """For each fused (Primitive) Relax function called from main: its components, in order.

    Weight provenance is decided here, where the fused body is still visible: a transform in
    a fused function is a weight transform when its input derives only from fused parameters
    whose arguments at the call site in main are constant-derived. Each component's bytes
    are its arguments' and its result's, symbolic extents at `sizes`.
    """
    sizes = sizes or {}
    main = mod["main"]
    derived_main = weight_derived(main)
    out: dict[str, list[_Component]] = {}
    for b in bindings(main):
        call = b.value
        if not isinstance(call, relax.Call) or not isinstance(call.op, relax.GlobalVar):
            continue
        func = mod[call.op]
        if not is_primitive(func):
            continue
        args = [a for a in call.args]
        const_params = [p for p, a in zip(func.params, args, strict=False)
                        if is_weight_derived(a, derived_main)]
        derived = weight_derived(func, const_params)
        comps: list[_Component] = []
        for fb in bindings(func):
            inner = fb.value
            if isinstance(inner, relax.Call) and op_name(inner) == "relax.call_tir":
                gv = inner.args[0]
                kind, axes = primfunc_transform(mod, gv)
                targs = call_args(inner)
                weight = all_weight_derived(targs, derived)
                comps.append(_Component(gv.name_hint, kind, axes,
                                        shown_shape(targs[0]) if targs else None, weight,
                                        _attribution(mod, gv) if kind else None,
                                        _sum_bytes(targs, sizes), tensor_bytes(fb.var, sizes),
                                        _dtype(targs)))
        out[call.op.name_hint] = comps
    return out


def read_kernel_list(compiled: Compiled, sizes: Mapping[str, int] | None = None) -> KernelList:
    """The fused kernel list of the final stage, with transforms found and classified, and
    the bytes each kernel and transform moves (a symbolic extent at its size in `sizes`:
    the case's `max_sizes`)."""
    sizes = dict(sizes or {})
    components: dict[str, list[_Component]] = {}
    for stage in compiled.stages:  # the latest stage that still shows fused Relax functions
        found = fused_components(stage.mod, sizes)
        if found:
            components = found
    mod = compiled.final
    main = mod["main"]
    derived = weight_derived(main)
    kernels: list[Kernel] = []
    for b in bindings(main):
        call = b.value
        if not isinstance(call, relax.Call):
            continue
        name = op_name(call)
        if name in ("relax.call_tir", "relax.call_tir_inplace"):
            gv = call.args[0]
            callee = gv.name_hint
        elif name == "relax.call_dps_packed":
            callee = str(call.args[0].global_symbol if hasattr(call.args[0], "global_symbol")
                         else call.args[0])
        elif isinstance(call.op, relax.GlobalVar) and is_primitive(mod[call.op]):
            gv, callee = call.op, call.op.name_hint  # fused but not yet FuseTIR'd
        else:
            continue
        index = len(kernels)
        args = call_args(call) if name else list(call.args)
        read, written = _sum_bytes(args, sizes), tensor_bytes(b.var, sizes)
        transforms: list[Transform] = []
        if callee in components:
            comps = components[callee]
            for c in comps:
                if c.transform:
                    transforms.append(Transform(c.transform, index, c.primfunc, c.weight,
                                                c.in_shape, c.axes, c.attribution,
                                                c.bytes_read, c.bytes_written))
            ops = tuple(c.primfunc for c in comps)
            dtypes = tuple(c.dtype for c in comps)
        else:
            ops, dtypes = (callee,), (_dtype(args),)
            if name in ("relax.call_tir", "relax.call_tir_inplace"):
                kind, axes = primfunc_transform(mod, gv)
                if kind:
                    weight = all_weight_derived(args, derived)
                    transforms.append(Transform(kind, index, callee, weight,
                                                shown_shape(args[0]) if args else None, axes,
                                                _attribution(mod, gv), read, written))
        schedule = _schedule(mod, gv) if name != "relax.call_dps_packed" else None
        kernels.append(Kernel(index, callee, ops, tuple(transforms), shown_shape(b.var),
                              read, written, schedule, dtypes))
    return KernelList(kernels, sizes, qdq_products(compiled))
