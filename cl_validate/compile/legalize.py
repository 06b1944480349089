"""Legalization that tags every layout transform's PrimFunc, so the analysis finds it again.

After FuseOps and FuseTIR a transpose is a few loops inside a fused kernel, indistinguishable
by name from any other copy. Our legalization of ``permute_dims`` and ``layout_transform``
writes `TRANSFORM_ATTR` (which op), `AXES_ATTR` (the permutation) and `SOURCE_ATTR` (the
attribution `annotate_transforms` put in the call's span) onto the PrimFunc it creates;
fusion keeps the PrimFunc as a component of its kernel, and `cl_validate.analysis` reads the
attributes back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tvm
from tvm import relax

from cl_validate.compile.attribution import annotate_transforms
from cl_validate.compile.context import PipelineContext
from cl_validate.ir import AXES_ATTR, SOURCE_ATTR, TRANSFORM_ATTR, TRANSFORM_OPS


def tagged_transform_legalizations() -> dict[str, Callable[..., Any]]:
    """Legalizations of the transform ops that tag their PrimFunc with `TRANSFORM_ATTR`."""
    def tag(op_name: str) -> Callable[..., Any]:
        default = tvm.ir.Op.get(op_name).get_attr("FLegalize")

        def legalize(bb: Any, call: Any) -> Any:
            out = default(bb, call)
            gvar = out.args[0]
            func = bb.get()[gvar].with_attr(TRANSFORM_ATTR, op_name.split(".")[-1])
            if call.span is not None:  # the attribution annotate_transforms put there
                func = func.with_attr(SOURCE_ATTR, str(call.span.source_name.name))
            if op_name == "relax.permute_dims" and call.attrs.axes is not None:
                func = func.with_attr(AXES_ATTR, [int(a) for a in call.attrs.axes])
            bb.update_func(gvar, func)
            return out

        return legalize

    return {name: tag(name) for name in TRANSFORM_OPS}


def legalize(ctx: PipelineContext) -> Callable[[tvm.IRModule], tvm.IRModule]:
    """The ``legalize`` stage: attribute every transform, then lower ops to PrimFuncs."""

    def run(mod: tvm.IRModule) -> tvm.IRModule:
        mod = annotate_transforms(mod, ctx.sources, ctx.case.layout_overrides)
        with ctx.target:
            return tvm.transform.Sequential([
                relax.backend.DispatchSampling(),
                relax.backend.DispatchSortScan(),
                relax.transform.LegalizeOps(
                    customize_legalize_map=tagged_transform_legalizations()),
                relax.transform.AnnotateTIROpPattern(),
                relax.transform.FoldConstant(),
            ])(mod)

    return run
