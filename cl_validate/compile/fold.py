"""Precompute everything in ``main`` that depends only on weights and constants, then bind it.

Relax's FoldConstant folds one call at a time and builds a tiny module for each: on ResNet-50
after ConvertLayout and BatchNorm decomposition that is hundreds of builds and most of the
compile time. Here every weight/constant-only computation (the weight permutes ConvertLayout
inserted, BatchNorm scale/shift arithmetic, …) is lifted into one function with TVM's
LiftTransformParams, run once, and its outputs are bound into ``main`` as constants. The
function runs in numpy where every op in it is one numpy computes bit for bit as TVM
(`fold_values`: movements, ``+ - * /``, ``sqrt``, casts, masks — nearly every model); else it
is built for the host, which on a BatchNorm network took most of the compile (EfficientNet-B0:
2.2 s of building for 0.04 s in numpy, `benchmarks/fold_params.py`). What is left for
FoldConstant afterwards is trivial, and usually nothing: then it is not run (it legalizes
every op to look).

Tensors made from nothing (``zeros``, ``ones``, ``full``, ``arange`` of static shape: a
circular pad's buffer, a position table, an identity matrix) that something computed from
weights and constants alone reads are constants first, so that computation folds too:
neither LiftTransformParams (it lifts what depends on weights) nor FoldConstant (it leaves
tensor creation to run time) would, and a transform of one would run on every call although
nothing it reads is an input.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.fold_values import evaluate
from cl_validate.ir import (
    bindings,
    is_tensor_constant,
    known_shape,
    num_input,
    op_name,
    output_of_weights,
    replace_function,
    tensor_type,
    use_sites,
    weight_derived,
)

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


def _scalar(value: Any) -> Any:
    """The Python number of a scalar literal (a tensor, an IntImm/FloatImm, a PrimValue of
    one), None for anything else."""
    if is_tensor_constant(value):
        return value.value.numpy().item() if value.ty.ndim == 0 else None
    for v in (value, getattr(value, "value", None)):
        inner = getattr(v, "value", None)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return inner
    return None


def created(call: Any) -> np.ndarray | None:
    """The value of a tensor made from nothing, None if `call` is no such op or not static."""
    name = op_name(call)
    if name not in ("relax.zeros", "relax.ones", "relax.full", "relax.arange"):
        return None
    ty = tensor_type(call)
    if ty is None:
        return None
    dtype = str(ty.dtype)  # the result's (an arange's attribute may leave it unset)
    if name == "relax.arange":
        bounds = [_scalar(a) for a in call.args]
        return None if None in bounds else np.arange(*bounds, dtype=dtype)
    shape = known_shape(call)
    if shape is None:
        return None
    fill = {"relax.zeros": 0, "relax.ones": 1}.get(name)  # type: ignore[arg-type]
    if fill is None:
        fill = _scalar(call.args[1])
    return None if fill is None else np.full(shape, fill, dtype=dtype)


def _folded_creations(func: relax.Function) -> set[relax.Var]:
    """The tensors made from nothing that something computed from weights and constants
    alone reads (what is then precomputed); one only read at run time stays, where it is
    made inside the kernel that reads it."""
    derived, uses = weight_derived(func), use_sites(func)
    return {b.var for b in bindings(func) if created(b.value) is not None and any(
        r is not None and r in derived for r in uses.get(b.var, []))}


@mutator
class _CreationsToConstants(PyExprMutator):
    def __init__(self, folded: set[relax.Var]) -> None:
        super().__init__()
        self.folded = folded

    def visit_var_binding_(self, binding: Any) -> None:
        value = created(binding.value) if binding.var in self.folded else None
        if value is None:
            super().visit_var_binding_(binding)
            return
        self.builder_.emit_normalized(relax.VarBinding(binding.var,
                                                       relax.const(value, str(value.dtype))))


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
    body = rewriter.visit_expr(_CreationsToConstants(_folded_creations(func)).visit_expr(
        func.body))
    weights += rewriter.new_params
    values += rewriter.values
    if not weights:
        return _fold_constants(mod, entry)

    func = relax.Function(list(func.params[:n_in]) + weights, body, func.ret_ty, func.is_pure,
                          func.attrs)
    if output_of_weights(func):  # a model whose output ignores its input: all of it folds
        mod = replace_function(mod, entry, func)
        mod = relax.transform.BindParams(entry, dict(zip(weights, values, strict=True)))(mod)
        return relax.transform.FoldConstant()(mod)
    # The kernels an earlier stage wrote (a product on weights alone, say) go with `entry`:
    # what is lifted may call them.
    entry_var = mod.get_global_var(entry)
    lifted = relax.transform.LiftTransformParams()(tvm.IRModule(
        {gv: (func if gv.same_as(entry_var) else f) for gv, f in mod.functions.items()}))
    transform_name = f"{entry}_transform_params"
    new_entry = lifted[entry]
    prep = relax.transform.DeadCodeElimination([transform_name])(tvm.IRModule(
        {gv: f for gv, f in lifted.functions.items() if gv.name_hint != entry}))
    outputs = _transformed(prep, transform_name, values)
    new_weights = new_entry.params[num_input(new_entry):]
    bound = {var: outputs[i] for i, var in enumerate(new_weights)}
    mod = replace_function(mod, entry, new_entry)
    mod = relax.transform.BindParams(entry, bound)(mod)
    return _fold_constants(mod, entry)


def _transformed(prep: tvm.IRModule, name: str, values: list[Any]) -> list[Any]:
    """The outputs of the weights' transform `name` in `prep` for `values`: computed in
    numpy where every op in it is exact there (`fold_values`), else built for the host and
    run."""
    arrays = [v.numpy() if hasattr(v, "numpy") else np.asarray(v) for v in values]
    out = evaluate(prep[name], arrays)
    if out is not None:
        return [tvm.runtime.tensor(o) for o in out]
    return built_transform(prep, name, values)


def built_transform(prep: tvm.IRModule, name: str, values: list[Any]) -> list[Any]:
    """`_transformed` by TVM: `prep` built for the host (`_FOLD_OPT_LEVEL`) and run."""
    host = tvm.target.Target({"kind": "llvm", "opt-level": _FOLD_OPT_LEVEL})
    vm = relax.VirtualMachine(tvm.compile(prep, target=host), tvm.cpu())
    return list(vm[name](tuple(values)))


def _fold_constants(mod: tvm.IRModule, entry: str) -> tvm.IRModule:
    """TVM's FoldConstant on `mod` where it has something to fold in `entry`; else only what
    it would do there, unused bindings removed. FoldConstant legalizes every op of a
    dataflow block to see whether its arguments are constant (MobileNetV2: 0.6 s, more than
    the rest of this stage), and after the transform above there is usually nothing left."""
    func = mod[entry]
    if any(_foldable(b.value) for b in bindings(func)):
        return relax.transform.FoldConstant()(mod)
    return replace_function(mod, entry, relax.analysis.remove_all_unused(func))


def _foldable(value: Any) -> bool:
    """FoldConstant could change this binding or its uses: a constant or a shape bound to a
    variable (it propagates them), or a call whose tensor operands are all constants (none
    at all included: a tensor made from nothing), which it computes."""
    if is_tensor_constant(value) or isinstance(value, relax.ShapeExpr):
        return True
    if not isinstance(value, relax.Call):
        return False
    args = list(value.args)
    if op_name(value) == "relax.call_tir":
        args = list(value.args[1].fields)
    return all(is_tensor_constant(a) or tensor_type(a) is None for a in args)
