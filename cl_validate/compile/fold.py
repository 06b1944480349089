"""Precompute everything in ``main`` that depends only on weights and constants, then bind it.

Relax's FoldConstant folds one call at a time and builds a tiny module for each: on ResNet-50
after ConvertLayout and BatchNorm decomposition that is hundreds of builds and most of the
compile time. Here every weight/constant-only computation (the weight permutes ConvertLayout
inserted, BatchNorm scale/shift arithmetic, …) is lifted into one function with TVM's
LiftTransformParams, built once for the host, run once, and its outputs are bound into ``main``
as constants. What is left for FoldConstant afterwards is trivial.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.ir import num_input, replace_function

_PREFIX = "cl_validate_const"
#: LLVM's optimization level for the weight transforms: they run once, so compiling them
#: fast matters, not running them fast. The values are the same at any level (LLVM does not
#: reorder float arithmetic without fast-math).
_FOLD_OPT_LEVEL = 0


@mutator
class _ConstantsToParams(PyExprMutator):
    """Replace every non-scalar constant with a new parameter, remembering its value."""

    def __init__(self, mod: Any = None) -> None:
        super().__init__(mod)
        self.new_params: list[Any] = []
        self.values: list[Any] = []

    def visit_generic_const_(self, const: Any) -> Any:
        if const.ty.ndim == 0:
            return const
        var = relax.Var(f"{_PREFIX}{len(self.new_params)}", const.ty)
        self.new_params.append(var)
        self.values.append(const.value)
        return var


def fold_params(mod: tvm.IRModule, params: dict[str, Any], *, entry: str = "main"
                ) -> tvm.IRModule:
    """Bind `params` (by parameter name) into `entry`, precomputing their transformations."""
    func = mod[entry]
    n_in = num_input(func)
    weights = list(func.params[n_in:])
    missing = [p.name for p in weights if p.name not in params]
    if missing:
        raise ValueError(f"no value for weight parameter(s) {', '.join(missing)}")
    values = [params[p.name] for p in weights]

    rewriter = _ConstantsToParams()
    body = rewriter.visit_expr(func.body)
    weights += rewriter.new_params
    values += rewriter.values
    if not weights:
        return relax.transform.FoldConstant()(mod)
    func = relax.Function(list(func.params[:n_in]) + weights, body, func.ret_ty, func.is_pure,
                          func.attrs)
    # The kernels an earlier stage wrote (a product on weights alone, say) go with `entry`:
    # what is lifted may call them.
    entry_var = mod.get_global_var(entry)
    lifted = relax.transform.LiftTransformParams()(tvm.IRModule(
        {gv: (func if gv.same_as(entry_var) else f) for gv, f in mod.functions.items()}))
    transform_name = f"{entry}_transform_params"
    new_entry = lifted[entry]
    host = tvm.target.Target({"kind": "llvm", "opt-level": _FOLD_OPT_LEVEL})
    prep = relax.transform.DeadCodeElimination([transform_name])(tvm.IRModule(
        {gv: f for gv, f in lifted.functions.items() if gv.name_hint != entry}))
    exe = tvm.compile(prep, target=host)
    vm = relax.VirtualMachine(exe, tvm.cpu())
    outputs = vm[transform_name](tuple(values))
    new_weights = new_entry.params[num_input(new_entry):]
    bound = {var: outputs[i] for i, var in enumerate(new_weights)}
    mod = replace_function(mod, entry, new_entry)
    mod = relax.transform.BindParams(entry, bound)(mod)
    return relax.transform.FoldConstant()(mod)
