"""The transform count after every pipeline stage: which stage added or kept a transform."""

from __future__ import annotations

from typing import Any

from tvm import relax

from cl_validate.analysis.fused_kernels import fused_components
from cl_validate.compile.program import Compiled
from cl_validate.ir import (
    TRANSFORM_OPS,
    all_weight_derived,
    bindings,
    call_args,
    is_transform,
    op_name,
    primfunc_transform,
    weight_derived,
)
from cl_validate.measurements.kernel_list import KernelList, StageCount


def _count_op_level(mod: Any) -> tuple[int, int] | None:
    """(runtime, weight) transforms of an op-level or fused stage; None after FuseTIR."""
    main = mod["main"]
    derived = weight_derived(main)
    runtime = weight = 0
    saw_fused_tir = False
    fused = fused_components(mod)
    for b in bindings(main):
        call = b.value
        if not isinstance(call, relax.Call):
            continue
        name = op_name(call)
        args = call_args(call)
        is_weight = all_weight_derived(args, derived)
        if name in TRANSFORM_OPS:
            kind: str | None = name if is_transform(call) else None  # identity: a copy
        elif name == "relax.call_tir":
            kind = primfunc_transform(mod, call.args[0])[0]
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
