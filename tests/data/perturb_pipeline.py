"""A user pipeline with a stage that breaks the numerics: it scales one weight constant.

The case that uses it must fail numerics, and the stage bisection must name ``perturb``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.pipeline import PipelineContext, Stage, nhwc


@mutator
class _ScaleFirstWeight(PyExprMutator):
    def __init__(self, mod: Any = None) -> None:
        super().__init__(mod)
        self.done = False

    def visit_generic_const_(self, const: Any) -> Any:
        if self.done or const.ty.ndim != 4:
            return const
        self.done = True
        return relax.const(const.value.numpy() * np.float32(1.05))


def perturb(mod: tvm.IRModule) -> tvm.IRModule:
    func = mod["main"]
    body = _ScaleFirstWeight().visit_expr(func.body)
    out = tvm.IRModule(dict(mod.functions_items()))
    out["main"] = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)
    return out


def nhwc_perturbed(ctx: PipelineContext) -> list[Stage]:
    stages = nhwc(ctx)
    at = [s.name for s in stages].index("fold_params") + 1
    return [*stages[:at], Stage("perturb", perturb), *stages[at:]]
