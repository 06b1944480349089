"""Casts a half-precision model leaves between movements: DropRoundTrips and NarrowMovements.

DropRoundTrips: a value widened and cast straight back to its own dtype is the value.
``astype(astype(x, wide), narrow)`` with ``x`` of dtype ``narrow`` and ``wide`` holding every
``narrow`` value exactly (float16 or bfloat16 in float32, float32 in float64, an integer in a
wider one of the same sign) is ``x``, bit for bit. A half-precision model leaves such pairs
where two rewrites meet: its products and reductions are rounded to the model's dtype
(`compile.precision_converters`) right where a raised attention (summed in float32) or a
float32 read begins. Between two permutes the pair keeps them from cancelling: a float16
window attention kept 6 transforms its float32 model does not have.

NarrowMovements: views and permutes move the narrower values. A rounding to a narrower float
dtype after movements of a value read by them alone is done first, on the value; a widening
cast before movements that alone read it is done after them. A product rounded to the model's
dtype after the model's own permutes, or a float32 read of it before further permutes
(VOLO's outlooker: ``(attn @ v).permute(...).reshape(...)``, then a fold read in float32),
kept the permutes before and after the cast from folding into one; moved, they fold, and the
movement moves half the bytes. Exact: a cast and a movement commute.
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import rebind, relax_function_pass
from cl_validate.ir import bindings, op_name, tensor_type, use_sites

#: dtype -> the dtypes that hold each of its values exactly
_EXACT_IN = {
    "float16": {"float32", "float64"}, "bfloat16": {"float32", "float64"},
    "float32": {"float64"},
    "int8": {"int16", "int32", "int64"}, "int16": {"int32", "int64"}, "int32": {"int64"},
    "uint8": {"uint16", "uint32", "uint64", "int16", "int32", "int64"},
    "uint16": {"uint32", "uint64", "int32", "int64"}, "uint32": {"uint64", "int64"},
}


def _dtype(e: relax.Expr) -> str | None:
    ty = tensor_type(e)
    return None if ty is None else str(ty.dtype)


@mutator
class _Drop(PyExprMutator):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.values: dict[relax.Var, relax.Expr] = {}

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        self.values[binding.var] = binding.value
        value = binding.value
        if op_name(value) == "relax.astype":
            wide = self.values.get(value.args[0]) if isinstance(value.args[0], relax.Var) \
                else None
            if op_name(wide) == "relax.astype":
                x = wide.args[0]  # type: ignore[union-attr]
                narrow, mid = _dtype(x), _dtype(value.args[0])
                if narrow is not None and narrow == str(value.attrs.dtype) and \
                        mid in _EXACT_IN.get(narrow, ()):
                    new = self.visit_expr(x)
                    if isinstance(binding.var, relax.DataflowVar) or \
                            not isinstance(new, relax.DataflowVar):
                        self.set_var_remap(binding.var, new)
                    else:  # a block's output var stays, bound to the value
                        self.builder_.emit_normalized(relax.VarBinding(binding.var, new))
                    return
        super().visit_var_binding_(binding)


def drop_round_trips(func: relax.Function) -> relax.Function:
    """Every ``astype(astype(x, wide), dtype(x))`` with `wide` exact for `x` read as `x`."""
    new = _Drop().visit_expr(func)
    return func if new.same_as(func) else relax.analysis.remove_all_unused(new)


DropRoundTrips = relax_function_pass("DropRoundTrips")(drop_round_trips)

#: Movements a cast is moved through: each moves every element once (or repeats one)
_MOVEMENTS = frozenset({"relax.reshape", "relax.permute_dims", "relax.expand_dims",
                        "relax.squeeze", "relax.broadcast_to"})


#: The float dtypes a cast is moved between, by width (float16 and bfloat16 are neither
#: narrower than the other). bfloat16 was left out while this pass ran before SinkPermutes
#: (the bundled FIR filters went 2 -> 6 transforms, their channel filters' unfold declined);
#: after it, the 38 bundled cases that run in bfloat16 are at their float32 counts with it.
_FLOAT_BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}


def _narrower_float(src: str | None, dst: str) -> bool:
    """`dst` is a float dtype narrower than the float dtype `src`."""
    return src in _FLOAT_BITS and dst in _FLOAT_BITS and _FLOAT_BITS[dst] < _FLOAT_BITS[src]


_Plan = tuple[str, relax.Expr, list[relax.Call], str]  # (kind, source, movements, dtype)


def narrow_movements(func: relax.Function) -> relax.Function:
    """Every ``astype(movements(x), narrower float)`` as ``movements(astype(x, narrower))``
    and every ``movements(astype(x, wider float))`` as ``astype(movements(x), wider)``, each
    movement and cast read once, by the chain."""
    values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    uses = use_sites(func)

    def once(e: relax.Expr) -> bool:
        return isinstance(e, relax.Var) and len(uses.get(e, [])) == 1

    plans: dict[relax.Var, _Plan] = {}
    for var, value in values.items():
        if op_name(value) != "relax.astype":
            continue
        src, dst = value.args[0], str(value.attrs.dtype)  # type: ignore[attr-defined]
        chain: list[relax.Call] = []
        e = src
        while once(e) and op_name(values.get(e)) in _MOVEMENTS:  # up: a rounding
            chain.append(values[e])  # type: ignore[arg-type]
            e = values[e].args[0]  # type: ignore[attr-defined]
        if chain and _narrower_float(_dtype(e), dst):
            plans[var] = ("round", e, chain[::-1], dst)
            continue
        last, down = var, []
        while once(last) and (user := uses[last][0]) is not None and \
                op_name(values.get(user)) in _MOVEMENTS:  # down: a widening
            down.append(values[user])  # type: ignore[arg-type]
            last = user
        narrow = _dtype(src)
        if down and narrow is not None and _narrower_float(dst, narrow):
            plans[last] = ("widen", src, down, dst)

    def rebuild(m: PyExprMutator, plan: _Plan, var: relax.Var) -> relax.Expr:
        kind, source, chain, dtype = plan
        e = m.visit_expr(source)
        if kind == "round":
            e = m.builder_.emit(relax.op.astype(e, dtype))
        for call in chain[:-1]:
            e = m.builder_.emit(relax.Call(call.op, [e, *call.args[1:]], call.attrs))
        last = relax.Call(chain[-1].op, [e, *chain[-1].args[1:]], chain[-1].attrs)
        return relax.op.astype(m.builder_.emit(last), dtype) if kind == "widen" else last

    return rebind(func, plans, rebuild)


NarrowMovements = relax_function_pass("NarrowMovements")(narrow_movements)

__all__ = ["DropRoundTrips", "NarrowMovements", "drop_round_trips", "narrow_movements"]
