"""The weights' transforms computed in numpy, where every op in them is exact there.

`fold_params` lifts what ``main`` computes from weights alone into one function and runs it
once. Built with TVM, that function costs more than anything else in a small model's
compile: every op becomes a kernel that TVM legalizes and LLVM compiles (MobileNetV2's 52
BatchNorms are 364 of them: 1.5 s of its 4.3 s llvm compile, `benchmarks/fold_params.py`,
and more in a fresh process, whose first LLVM build pays its set-up). What such a
function holds is mostly data movement (a weight permuted to OHWI, a view, a broadcast) and
BatchNorm's scale arithmetic (``gamma / sqrt(var + eps)``), masks and index tables computed
from constants, and numpy computes each of those bit for bit as TVM's kernel does: a movement
copies values, comparisons, logic and integer division are exact, and IEEE 754 rounds
``+ - * /`` and ``sqrt`` correctly in every implementation (float16 through float32 included, whose
24 bits hold the exact result of any of them on two 11-bit operands before the one rounding
that matters). So `evaluate` runs a function whose every binding is such an op; a function
with anything else — an exponential or a power (each library rounds them its own way), a
float-to-integer cast, a call to a kernel an earlier stage wrote, a symbolic shape — is
None here and built with TVM as before. Each value is checked against the dtype and shape
the binding declares.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from tvm import relax

from cl_validate.ir import bindings, is_tensor_constant, op_name, permute_axes

#: dtypes numpy holds with TVM's meaning (bfloat16 and the float8s are not numpy's)
_DTYPES = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64",
                     "uint8", "uint16", "uint32", "uint64", "bool"})
#: elementwise arithmetic IEEE 754 rounds correctly (on floats; integers wrap alike)
_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
    "relax.divide": np.divide,
}
_FLOAT_ONLY = frozenset({"relax.divide", "relax.sqrt"})
#: integer division (a position table's row and column of an index)
_INTEGER_DIVISION: dict[str, Callable[[Any, Any], Any]] = {
    "relax.floor_divide": np.floor_divide, "relax.floor_mod": np.mod, "relax.mod": np.fmod,
}
#: comparisons and logic (a mask computed from weights and constants: a causal mask)
_LOGIC: dict[str, Callable[..., Any]] = {
    # TVM's `!=` is ordered, false on a NaN as every comparison (numpy's is true)
    "relax.equal": np.equal, "relax.not_equal": lambda a, b: (a < b) | (a > b),
    "relax.less": np.less,
    "relax.less_equal": np.less_equal, "relax.greater": np.greater,
    "relax.greater_equal": np.greater_equal, "relax.logical_and": np.logical_and,
    "relax.logical_or": np.logical_or, "relax.logical_not": np.logical_not,
    "relax.bitwise_not": np.invert, "relax.where": np.where,
}


def _ints(values: Any) -> list[int] | None:
    """Ints (an attribute's) or IntImms (a static ShapeExpr's values) as ints; None if one is
    neither (a symbolic extent)."""
    out = []
    for v in values:
        v = getattr(v, "value", v)
        if not isinstance(v, int) or isinstance(v, bool):
            return None
        out.append(v)
    return out


def _cast_ok(src: np.dtype, dst: str) -> bool:
    """Casts numpy and LLVM do alike: float to float and integer to float round to nearest
    even, integer to integer keeps the low bits. A float to an integer is left to TVM."""
    if dst not in _DTYPES:
        return False
    return dst.startswith("float") or src.kind in "iub"


def _op(call: relax.Call, args: list[Any]) -> Any:
    """The value of one op on numpy operands, or None when it is not one computed here."""
    name = op_name(call)
    attrs = call.attrs
    if name in _BINARY:
        a, b = args
        if a.dtype != b.dtype or a.dtype.kind == "b" or \
                (name in _FLOAT_ONLY and a.dtype.kind != "f"):
            return None  # booleans: numpy's + is "or" (BoolArithmetic leaves none)
        return _BINARY[name](a, b)
    if name in _INTEGER_DIVISION:
        a, b = args
        if a.dtype != b.dtype or a.dtype.kind not in "iu" or not np.all(b):
            return None  # floats round their own way here; a zero divisor is undefined
        return _INTEGER_DIVISION[name](a, b)
    if name in _LOGIC:
        if name != "relax.where" and len({a.dtype for a in args}) != 1:
            return None
        return np.asarray(_LOGIC[name](*args))
    if name == "relax.sqrt":
        return np.sqrt(args[0]) if args[0].dtype.kind == "f" else None
    if name == "relax.negative":
        return np.negative(args[0])
    if name == "relax.abs":
        return np.abs(args[0])
    if name == "relax.flip":
        return np.flip(args[0], int(attrs.axis))
    if name == "relax.tile":
        repeats = _ints(attrs.repeats)
        return None if repeats is None else np.tile(args[0], repeats)
    if name == "relax.repeat":  # numpy's repeat: each element `repeats` times, flat if no axis
        axis = None if attrs.axis is None else int(attrs.axis)
        return np.repeat(args[0], int(attrs.repeats), axis)
    if name == "relax.permute_dims":
        return np.transpose(args[0], permute_axes(call))
    if name in ("relax.reshape", "relax.broadcast_to"):
        shape = _ints(getattr(call.args[1], "values", ()))
        if shape is None:
            return None
        return args[0].reshape(shape) if name == "relax.reshape" else \
            np.broadcast_to(args[0], shape)
    if name == "relax.expand_dims":
        axes = _ints(attrs.axis)
        return None if axes is None else np.expand_dims(args[0], tuple(axes))
    if name == "relax.squeeze":
        axes = None if attrs.axis is None else _ints(attrs.axis)
        return np.squeeze(args[0], None if axes is None else tuple(axes))
    if name == "relax.concat":
        axis = getattr(attrs.axis, "value", attrs.axis)
        return np.concatenate(args[0], axis) if isinstance(axis, int) else None
    if name == "relax.astype":
        dtype = str(attrs.dtype)
        return args[0].astype(dtype) if _cast_ok(args[0].dtype, dtype) else None
    return None


def _operand(expr: Any, env: dict[Any, Any]) -> Any:
    """A call's operand: a bound value, a constant's array, a tuple of them; None if it is
    anything else (a shape, a PrimValue: read from the call by `_op` itself)."""
    if isinstance(expr, relax.Var):
        return env.get(expr)
    if is_tensor_constant(expr):
        return expr.value.numpy()
    if isinstance(expr, relax.Tuple):
        parts = [_operand(f, env) for f in expr.fields]
        return None if any(p is None for p in parts) else tuple(parts)
    return None


def _matches(value: Any, ty: Any) -> bool:
    """`value` has the dtype and static shape the type `ty` declares (a tuple: each field)."""
    if isinstance(value, tuple):
        fields = getattr(ty, "fields", None)
        return fields is not None and len(fields) == len(value) and all(
            _matches(v, f) for v, f in zip(value, fields, strict=True))
    shape = _ints(getattr(getattr(ty, "shape", None), "values", None) or ()) \
        if getattr(ty, "shape", None) is not None else None
    return isinstance(value, np.ndarray) and hasattr(ty, "dtype") and \
        str(ty.dtype) == str(value.dtype) and shape is not None and \
        tuple(shape) == value.shape


def evaluate(func: relax.Function, values: Sequence[np.ndarray]) -> list[np.ndarray] | None:
    """The outputs of `func` (LiftTransformParams' transform: one tuple parameter, a tuple
    out) for the tuple `values`, or None when one of its bindings is not an op computed here
    exactly (then TVM builds it)."""
    if len(func.params) != 1 or any(str(v.dtype) not in _DTYPES for v in values):
        return None
    env: dict[Any, Any] = {func.params[0]: tuple(values)}
    with np.errstate(all="ignore"):  # inf and nan are values here, as in TVM's kernels
        for binding in bindings(func):
            if not isinstance(binding, relax.VarBinding):
                return None
            try:
                value = _bound(binding.value, env)
            except (ValueError, TypeError, IndexError):  # numpy refused: TVM builds it
                return None
            if value is None or not _matches(value, binding.var.ty):
                return None
            env[binding.var] = value
    out = _operand(func.body.body if isinstance(func.body, relax.SeqExpr) else func.body, env)
    if not isinstance(out, tuple) or any(not isinstance(o, np.ndarray) for o in out):
        return None
    return [np.ascontiguousarray(o) for o in out]


def _bound(expr: Any, env: dict[Any, Any]) -> Any:
    if isinstance(expr, relax.TupleGetItem):
        whole = _operand(expr.tuple_value, env)
        return whole[expr.index] if isinstance(whole, tuple) else None
    if isinstance(expr, (relax.Tuple, relax.Var)):
        return _operand(expr, env)
    if not isinstance(expr, relax.Call) or op_name(expr) is None:
        return None
    args = [_operand(a, env) for a in expr.args[:1]] if op_name(expr) in (
        "relax.reshape", "relax.broadcast_to") else [_operand(a, env) for a in expr.args]
    if any(a is None for a in args):
        return None
    return _op(expr, args)


def value_of(expr: relax.Expr, values: Mapping[relax.Var, relax.Expr],
             leaf: Callable[[relax.Expr], np.ndarray | None], depth: int = 32
             ) -> np.ndarray | None:
    """`expr`'s value where it is computed from constants alone, before anything is folded:
    through the bindings `values`, every op one `evaluate` computes, down to tensor constants
    and what `leaf` knows (a tensor made from nothing); None past `depth` ops or at anything
    else (an input, a weight, an op not computed here)."""
    env: dict[Any, Any] = {}

    def walk(e: relax.Expr, left: int) -> Any:
        if is_tensor_constant(e):
            return e.value.numpy()  # type: ignore[attr-defined]
        if not isinstance(e, relax.Var) or left == 0 or e not in values:
            return None
        if e not in env:
            call = values[e]
            known = leaf(call)
            if known is None and isinstance(call, relax.Call) and op_name(call) is not None:
                for a in call.args:  # a shape argument is no Var: `_bound` reads it itself
                    if isinstance(a, relax.Var) and walk(a, left - 1) is None:
                        break
                else:
                    with np.errstate(all="ignore"):
                        try:
                            known = _bound(call, env)
                        except (ValueError, TypeError, IndexError):
                            known = None
            env[e] = known if known is not None and _matches(known, e.ty) else None
        return env[e]

    return walk(expr, depth)


def identical(a: np.ndarray, b: np.ndarray) -> bool:
    """What "bit for bit" means above: the same dtype, shape and bits, a NaN matching any
    NaN (which operand's payload a sum of two NaNs keeps is the hardware's choice, not a
    value). The tests and `benchmarks/fold_params.py` compare both routes with it."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind != "f":
        return bool(np.array_equal(a, b))
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b))) and bool(np.array_equal(
        a[~nan].view(f"u{a.itemsize}"), b[~nan].view(f"u{b.itemsize}")))


__all__ = ["evaluate", "identical"]
