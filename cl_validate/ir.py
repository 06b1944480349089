"""Reading Relax IR: the one set of definitions the passes, the attribution and the analysis share.

A transform's verdict rests on a handful of definitions, and each is written once, here:

- **inputs and weights**: the first ``num_input`` parameters of a function are run-time inputs,
  the rest are weights (`num_input`, `input_params`, `weight_params`);
- **derived from weights**: a var whose value depends only on weights and constants, so it can
  be computed once, when the program is compiled (`weight_derived`) — exactly what
  ``fold_params`` precomputes, and what a weight transform is a transform *of*;
- **runtime tensor**: any other tensor-valued expression (`not is_weight_derived`);
- **transform op**: a ``permute_dims`` or ``layout_transform`` call that is not an identity
  (`TRANSFORM_OPS`, `transform_axes`, `is_transform`).

Plus small queries over shapes, bindings and calls, and the attribute names our legalization
writes onto the PrimFunc of every transform (so the analysis finds transforms again after
fusion without guessing from names). Imports TVM: only modules that compile or analyse IR
import this one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import tvm
import tvm_ffi
from tvm import relax
from tvm.ir.expr import Constant
from tvm.sym import Analyzer

#: Ops that permute or re-tile a tensor's axes: a layout transform when not the identity.
TRANSFORM_OPS: tuple[str, ...] = ("relax.permute_dims", "relax.layout_transform")
PERMUTE_OP = "relax.permute_dims"
#: PrimFunc attributes our legalization writes on every transform (`cl_validate.compile.legalize`)
TRANSFORM_ATTR = "cl_validate.transform"  # "permute_dims" | "layout_transform"
AXES_ATTR = "cl_validate.axes"  # permute_dims axes
SOURCE_ATTR = "cl_validate.source"  # the attribution, as JSON
#: PrimFunc attribute our GPU scheduling writes: the dlight rule that scheduled it
SCHEDULE_ATTR = "cl_validate.schedule_rule"
#: The span source name of a transform whose origin is known: the model's own code (a permute
#: or transpose in its exported graph), or TVM's importer (a permute a converter inserted for
#: another op, e.g. scaled_dot_product_attention's BHSD -> BSHD). The front end puts it on every
#: permute at import (TVM's passes keep a call's span) and our passes put the merged marks of
#: the parts on a permute they fold from marked ones. Binding names cannot tell: ConvertLayout
#: reuses them. The mark is ``cl_validate.origin:`` and a JSON list of the parts, each
#: ``[who, source, op]`` (`Part`).
ORIGIN_SPAN = "cl_validate.origin"
#: Who put a permute in the graph: the model's code, TVM's importer, or one of our passes
#: (for an op it raised, e.g. attention from matmul/softmax/matmul).
MODEL, IMPORTER, PASS = "model", "importer", "cl_validate"
#: A mark's part saying that a pass could have removed the permute and declined, and why
#: (`declined_part`): not who put it there, so not one of the permutes it was folded from.
DECLINED = "declined"
#: Calls that move arguments into a PrimFunc or packed function: bookkeeping, not an op.
LOWERED_CALL_OPS: tuple[str, ...] = (
    "relax.call_tir", "relax.call_dps_packed", "relax.call_pure_packed",
    "relax.call_tir_with_grad", "relax.call_inplace_packed", "relax.call_tir_inplace",
)
_CALLS_WITH_ARG_TUPLE = ("relax.call_tir", "relax.call_dps_packed", "relax.call_tir_inplace")


# --------------------------------------------------------------------------------------------
# Functions, bindings and calls
# --------------------------------------------------------------------------------------------
def num_input(func: relax.Function) -> int:
    """How many leading parameters are run-time inputs: the ``num_input`` attribute the
    importer sets (``keep_params_as_input``), else all of them."""
    attrs = func.attrs
    if attrs is not None and "num_input" in attrs:
        return int(attrs["num_input"])
    return len(func.params)


def input_params(func: relax.Function) -> list[relax.Var]:
    return list(func.params[:num_input(func)])


def weight_params(func: relax.Function) -> list[relax.Var]:
    return list(func.params[num_input(func):])


def bindings(func: relax.Function) -> Iterator[relax.Binding]:
    """Every binding of a function's body, in order."""
    body = func.body
    if isinstance(body, relax.SeqExpr):
        for block in body.blocks:
            yield from block.bindings


def block_index(func: relax.Function) -> dict[relax.Var, int]:
    """The block, by position, of each var a ``VarBinding`` binds: a rewrite that moves a
    value keeps it in its block (a dataflow var is not in scope outside it)."""
    out: dict[relax.Var, int] = {}
    if isinstance(func.body, relax.SeqExpr):
        for i, block in enumerate(func.body.blocks):
            out.update(dict.fromkeys(
                (b.var for b in block.bindings if isinstance(b, relax.VarBinding)), i))
    return out


def op_name(expr: object) -> str | None:
    """The operator name of a call to a Relax op (``relax.nn.conv2d``), else None."""
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        return str(expr.op.name)
    return None


def is_constant(expr: object) -> bool:
    return isinstance(expr, Constant)


def is_tensor_constant(expr: object) -> bool:
    """A tensor literal (IntImm and friends are constants too in 0.27, but not tensors)."""
    return isinstance(expr, Constant) and tensor_type(expr) is not None


def is_primitive(func: object) -> bool:
    """A fused Relax function (``Primitive``): one kernel after FuseTIR."""
    return isinstance(func, relax.Function) and func.attrs is not None and bool(
        func.attrs.get("Primitive", False))


def tensor_leaves(expr: object) -> Iterator[relax.Expr]:
    """The vars and constants in `expr`, looking into tuples."""
    if isinstance(expr, relax.Tuple):
        for f in expr.fields:
            yield from tensor_leaves(f)
    elif isinstance(expr, (relax.Var, Constant)):
        yield expr


def call_args(call: relax.Call) -> list[relax.Expr]:
    """Tensor arguments of a call; for call_tir and friends, the arguments of the PrimFunc."""
    if op_name(call) in _CALLS_WITH_ARG_TUPLE:
        return list(tensor_leaves(call.args[1]))
    return [leaf for a in call.args for leaf in tensor_leaves(a)]


def use_sites(func: relax.Function) -> dict[relax.Var, list[relax.Var | None]]:
    """For each var, the vars whose bindings read it; ``None`` marks a use by the function's
    result (or any use we do not look into, which callers must treat as "needs the value")."""
    uses: dict[relax.Var, list[relax.Var | None]] = {}
    for b in bindings(func):
        for v in relax.analysis.free_vars(b.value):
            uses.setdefault(v, []).append(b.var)
    if isinstance(func.body, relax.SeqExpr):
        for v in relax.analysis.free_vars(func.body.body):
            uses.setdefault(v, []).append(None)
    return uses


# --------------------------------------------------------------------------------------------
# Types and shapes
# --------------------------------------------------------------------------------------------
def tensor_type(expr: object) -> relax.TensorType | None:
    ty = getattr(expr, "ty", None)
    return ty if isinstance(ty, relax.TensorType) else None


def is_float(dtype: object) -> bool:
    """A floating-point dtype by TVM's name: ``float16/32/64``, the ``float8`` kinds and
    ``bfloat16``."""
    return str(dtype).startswith(("float", "bfloat"))


def float_typed(expr: object) -> bool:
    """`expr` is a tensor of a floating-point dtype (`is_float`)."""
    ty = tensor_type(expr)
    return ty is not None and is_float(ty.dtype)


def ndim(expr: object) -> int | None:
    """Rank of a tensor-typed expression, None if unknown or not a tensor."""
    ty = tensor_type(expr)
    if ty is None or ty.ndim < 0:
        return None
    return int(ty.ndim)


def shape_exprs(expr: object) -> list[Any] | None:
    """The shape of a tensor as PrimExprs (symbolic extents kept), None if unknown."""
    ty = tensor_type(expr)
    if ty is None or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    return list(ty.shape.values)


def static_shape(expr: object) -> tuple[int | None, ...] | None:
    """The shape as ints (None per symbolic extent), None if the rank is unknown."""
    dims = shape_exprs(expr)
    if dims is None:
        return None
    return tuple(int(d.value) if isinstance(d, tvm.tirx.IntImm) else None for d in dims)


def shown_shape(expr: object) -> tuple[int | str, ...] | None:
    """The shape for a person: ints, and each symbolic extent as its expression (``batch``,
    ``batch * 2``); None if the rank is unknown."""
    dims = shape_exprs(expr)
    if dims is None:
        return None
    return tuple(int(d.value) if isinstance(d, tvm.tirx.IntImm) else str(d) for d in dims)


def same_ir(a: object, b: object) -> bool:
    """Structurally equal, constants' values included."""
    return bool(tvm_ffi.structural_equal(a, b))


def known_shape(expr: object) -> tuple[int, ...] | None:
    """The shape when every extent is a known int, else None."""
    shape = static_shape(expr)
    if shape is None or any(d is None for d in shape):
        return None
    return tuple(int(d) for d in shape if d is not None)


def tensor_bytes(expr: object, sizes: Mapping[str, int]) -> int | None:
    """Bytes a tensor-typed expression occupies (a tuple: all its tensors), each symbolic
    extent at its size in `sizes` (by name); None when a shape, a dtype or a size is unknown."""
    ty = getattr(expr, "ty", None)
    if isinstance(ty, relax.TupleType):
        parts = [_type_bytes(f, sizes) for f in ty.fields]
        return None if None in parts else sum(p for p in parts if p is not None)
    return _type_bytes(ty, sizes)


def _type_bytes(ty: object, sizes: Mapping[str, int]) -> int | None:
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr) \
            or not ty.dtype:
        return None
    dtype = tvm.DataType(ty.dtype)
    elements = 1
    analyzer = Analyzer()
    for dim in ty.shape.values:
        if not isinstance(dim, tvm.tirx.IntImm):
            free = tvm.tirx.analysis.undefined_vars(dim)
            if any(v.name not in sizes for v in free):
                return None
            for v in free:
                analyzer.bind(v, tvm.tirx.IntImm(str(v.ty.dtype), sizes[v.name]))
            dim = analyzer.simplify(dim)
            if not isinstance(dim, tvm.tirx.IntImm):
                return None
        elements *= int(dim.value)
    return (elements * dtype.bits * dtype.lanes + 7) // 8  # sub-byte types come packed


# --------------------------------------------------------------------------------------------
# Weights and run time
# --------------------------------------------------------------------------------------------
def weight_derived(func: relax.Function, weights: Iterable[relax.Var] | None = None
                   ) -> set[relax.Var]:
    """Vars whose value depends only on `weights` and constants: computable when the program
    is compiled. `weights` defaults to the parameters beyond ``num_input``; pass the
    parameters of a fused function that receive weight-derived arguments to ask the same
    question inside it.

    This is the definition ``fold_params`` acts on (TVM's LiftTransformParams lifts exactly
    the bindings whose free vars are all weights or derived from them), and the one a *weight
    transform* is judged by.
    """
    known: set[relax.Var] = set(weight_params(func) if weights is None else weights)
    for b in bindings(func):
        if all(v in known for v in relax.analysis.free_vars(b.value)):
            known.add(b.var)
    return known


def is_weight_derived(expr: object, derived: set[relax.Var]) -> bool:
    """`expr` is a constant or a var in `derived` (from `weight_derived`)."""
    if isinstance(expr, relax.Var):
        return expr in derived
    return is_constant(expr)


def all_weight_derived(exprs: Iterable[object], derived: set[relax.Var]) -> bool:
    """Every expression is weight-derived, and there is at least one."""
    exprs = list(exprs)
    return bool(exprs) and all(is_weight_derived(e, derived) for e in exprs)


def output_of_weights(func: relax.Function) -> bool:
    """Every output of `func` computable from its weights alone (a model whose output
    ignores its input): TVM's LiftTransformParams would lift the output itself out of
    `func`, whose build then fails ("Var gv is not defined")."""
    out = func.body.body
    leaves = out.fields if isinstance(out, relax.Tuple) else [out]
    return all_weight_derived(leaves, weight_derived(func))


# --------------------------------------------------------------------------------------------
# Transforms
# --------------------------------------------------------------------------------------------
def strided_slice_args(call: relax.Call) -> list[list[Any]] | None:
    """``axes, begin, end`` and, when given, ``strides`` of a ``strided_slice`` call, as the
    lists of IntImm its tuple arguments hold; None if one of them is not a literal tuple."""
    fields = [getattr(a, "fields", None) for a in call.args[1:]]
    if len(fields) < 3 or any(f is None for f in fields):
        return None
    return [list(f) for f in fields]  # type: ignore[arg-type]


def permute_axes(call: object) -> tuple[int, ...] | None:
    """The full axes of a ``permute_dims`` call (``axes=None`` reverses), None if not one."""
    if op_name(call) != PERMUTE_OP:
        return None
    assert isinstance(call, relax.Call)
    axes = call.attrs.axes
    if axes is None:
        rank = ndim(call.args[0])
        return None if rank is None else tuple(reversed(range(rank)))
    return tuple(int(a) for a in axes)


def is_identity(perm: Iterable[int]) -> bool:
    return all(i == p for i, p in enumerate(perm))


def is_transform(call: object) -> bool:
    """A call to a transform op that moves data: an identity permute is a copy, not one."""
    name = op_name(call)
    if name not in TRANSFORM_OPS:
        return False
    axes = permute_axes(call)
    return axes is None or not is_identity(axes)


class Part(tuple):  # type: ignore[type-arg]
    """One permute a transform was folded from: ``(who, source, op)`` — who put it there
    (`MODEL` or `IMPORTER`), the PyTorch source (``blocks.0.attn (permute)``), and for the
    importer the op it was inserted for (``scaled_dot_product_attention``). A `DECLINED`
    part is no permute: it says which pass declined to remove the transform (its `op`) and
    why (its `source`), see `declined_part`."""

    __slots__ = ()

    def __new__(cls, who: str, source: str | None = None, op: str | None = None) -> Part:
        return super().__new__(cls, (who, source, op))

    @property
    def who(self) -> str:
        return str(self[0])

    @property
    def source(self) -> str | None:
        return self[1]  # type: ignore[no-any-return]

    @property
    def op(self) -> str | None:
        return self[2]  # type: ignore[no-any-return]


def declined_part(why: str, by: str) -> Part:
    """The part of a mark saying that pass `by` declined to remove the permute, and `why`
    (kept as ``(DECLINED, why, by)``)."""
    return Part(DECLINED, why, by)


def origin_tag(call: object) -> str | None:
    """The `ORIGIN_SPAN` mark of a transform call whose origin is known; None for any other
    call (ConvertLayout's, or one our passes inserted). Pass it on to `mark_origin`."""
    span = getattr(call, "span", None)
    if span is None:
        return None
    name = str(span.source_name.name)
    return name if name.startswith(ORIGIN_SPAN + ":") else None


def origin_parts(mark: object) -> tuple[Part, ...]:
    """The parts of a mark (a string from `origin_tag`, or a call carrying one)."""
    tag = mark if isinstance(mark, str) else origin_tag(mark)
    if not tag:
        return ()
    try:
        return tuple(Part(*p) for p in json.loads(tag[len(ORIGIN_SPAN) + 1:]))
    except (ValueError, TypeError):
        return ()


def origin_mark(parts: Iterable[Part]) -> str | None:
    """The mark of a transform made of `parts` (each named once, in order)."""
    unique = list(dict.fromkeys(parts))
    return f"{ORIGIN_SPAN}:{json.dumps([list(p) for p in unique])}" if unique else None


def merge_origins(*marks: str | None) -> str | None:
    """The mark of a permute folded from permutes with these marks: all their parts."""
    return origin_mark(p for m in marks for p in origin_parts(m or ""))


def is_own(call: object) -> bool:
    """A transform call the model's own code performs: every part of its mark is the
    model's (a fold with an importer's permute is not only the model's)."""
    parts = [p for p in origin_parts(call) if p.who != DECLINED]
    return bool(parts) and all(p.who == MODEL for p in parts)


def mark_origin(call: relax.Call, mark: str | None) -> relax.Call:
    """`call` carrying `mark` (from `origin_tag`, `origin_mark` or `merge_origins`), or
    `call` itself when there is none."""
    if not mark:
        return call
    span = tvm.ir.Span(tvm.ir.SourceName(mark), 0, 0, 0, 0)
    return relax.Call(call.op, call.args, call.attrs, call.ty_args, span=span)


def primfunc_transform(mod: tvm.IRModule, gvar: tvm.ir.GlobalVar
                       ) -> tuple[str | None, tuple[int, ...] | None]:
    """Which transform a legalized PrimFunc is, from the attributes our legalization wrote
    (None when it is not one, or only an identity permute); TVM's own names as a fallback for
    pipelines that legalize without our tagging."""
    attrs = mod[gvar].attrs
    if attrs is not None and TRANSFORM_ATTR in attrs:
        axes = tuple(int(a) for a in attrs[AXES_ATTR]) if AXES_ATTR in attrs else None
        if axes is not None and is_identity(axes):
            return None, None
        return str(attrs[TRANSFORM_ATTR]), axes
    base = gvar.name_hint.rstrip("0123456789")
    return _TVM_TRANSFORM_PRIMFUNCS.get(base), None


#: PrimFunc names TVM's own legalization gives transforms.
_TVM_TRANSFORM_PRIMFUNCS = {"transpose": "permute_dims", "te_layout_transform":
                            "layout_transform"}


def count_permutes(mod: tvm.IRModule, func_name: str = "main", *,
                   runtime_only: bool = True) -> int:
    """Non-identity ``permute_dims`` in an op-level function (run-time ones by default)."""
    func = mod[func_name]
    derived = weight_derived(func) if runtime_only else set()
    count = 0
    for b in bindings(func):
        axes = permute_axes(b.value)
        if axes is None or is_identity(axes):
            continue
        if runtime_only and is_weight_derived(b.value.args[0], derived):
            continue
        count += 1
    return count


def replace_function(mod: tvm.IRModule, name: str, func: relax.Function) -> tvm.IRModule:
    """A new module with function `name` replaced (the old module stays untouched)."""
    funcs = {gv: (func if gv.name_hint == name else f) for gv, f in mod.functions.items()}
    out = tvm.IRModule(funcs)
    return out.with_attrs(mod.attrs) if mod.attrs is not None else out
