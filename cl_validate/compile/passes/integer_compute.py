"""IntegerCompute: a quantized network's convolutions and matmuls computed in integers.

PT2E leaves ``dequantize → conv2d / matmul → … → quantize`` (QDQ): each operand is dequantized
to float32, the product computed in float32, the result quantized again. TVM 0.27 has no QNN
dialect to lower that to integer kernels, so every quantized convolution ran in float. Here
each convolution (2-D, and 1-D: a TCN's, a Conformer's) and matmul whose data is a per-tensor
dequantized activation and whose weight is a dequantized constant (per tensor, or per output
channel) reads the integer codes instead:

    acc   = conv2d(pad(xq, zx), wq, out_dtype="int32")        # uint8/int8 x int8 → int32
    acc  -= zx · Σ wq                                           # one int32 per channel
    y     = float32(acc) · (sx · sw)                           # the float conv's value

A matmul may have its weight on either side: ``x @ W`` as a Linear imports, or ``W @ x``
where the cleanup swapped a Linear on a transposed activation (MLP-Mixer's token mixing;
the correction then sums each weight row), and its operands may be broadcast (the import of
a batched Linear broadcasts both): the codes are broadcast the same way.

``pad(xq, zx)`` pads the codes with the activation's zero point (a padded zero of the float
data is the code ``zx``), so the correction ``zx · Σ wq`` over the whole window is exact at the
borders too. Everything from the weights is computed when the program is compiled (the
sums ``Σ wq`` of a constant weight here, the rest by ``fold_params``), so the program holds
int8 weights and int32 vectors only, and reads uint8/int8 activations.

The last two lines are one op, ``dequantize(acc, sx·sw, zx·Σwq)`` (``float32(acc - zx·Σwq) ·
sx·sw``: the same integer sum and float multiply): on llvm every op of a fused kernel is a loop
nest of its own that LLVM optimizes (vectorizes, unrolls) apart, and an add, a cast and a
multiply were three, most of what the integer program's build took beyond the float one's
(bundled ResNet-18: 2.8 s against 2.0 s; 2.4 s as one op).

The model's bias stays a float32 add after the scaling, in the same fused kernel. An int32
bias (``round(b / (sx·sw))`` added to the accumulator, as TFLite does) was measured here and
dropped: it rounds the bias to ``sx·sw``, which is coarser than the output's step wherever
``sx·sw > sy`` — random-weight networks have such channels — and put the bundled quantized
ResNet 4.8 steps and MobileNetV2 82 steps off PyTorch; in float the same programs are within
one step, at no cost in speed (the add is fused either way).

The requantize stays the graph's own: what follows the product (bias, ReLU, clip, Hardswish,
an add, the quantize) runs on ``y`` in float32, fused into the convolution's kernel. Scaling
is floating point, not fixed-point: the accumulator is exact, one float32 multiply by the
per-channel ``sx·sw`` is as exact as PyTorch's own reference (which dequantizes and multiplies
in float32), and the targets here all have float units; a fixed-point multiplier and shift
(gemmlowp's) would only add int64 multiplies on a GPU. Nothing moves: the data keeps its
layout (NHWC), no transform is added.

What is not rewritten stays as it was, and `find` says why (the report names each): data
that is not a dequantized activation (the quantizer left the op in float), per-channel or
computed scales of an activation, a weight with a non-zero zero point (asymmetric weights
would need a data-dependent correction), both operands activations (attention's matmuls).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import relax_function_pass
from cl_validate.ir import (
    bindings,
    is_tensor_constant,
    known_shape,
    op_name,
    weight_derived,
)

_CONV, _MATMUL = "relax.nn.conv2d", "relax.matmul"
#: the convolutions computed in integers (a TCN's or a Conformer's Conv1d as a Conv2d's)
_CONVS = {_CONV: relax.op.nn.conv2d, "relax.nn.conv1d": relax.op.nn.conv1d}
#: products on quantized data this stage has no integer form for: named, left in float
_UNLOWERED = ("relax.nn.conv3d", "relax.nn.conv2d_transpose", "relax.nn.conv1d_transpose")
_DEQUANTIZE, _ASTYPE = "relax.dequantize", "relax.astype"
#: ops that only move or view data: replayed on the integer codes as they are
_VIEWS = frozenset({"relax.permute_dims", "relax.reshape", "relax.expand_dims",
                    "relax.squeeze", "relax.broadcast_to", "relax.flip", "relax.nn.pad"})
_PAD = "relax.nn.pad"
_INTEGER = ("int8", "uint8")


@dataclass
class _Dequantized:
    """An operand that is ``views(dequantize(codes, scale, zero, axis))``."""

    codes: relax.Expr
    scale: np.ndarray
    zero: np.ndarray
    axis: int | None  # the scale's axis in the operand (None: one scale for all)
    views: list[relax.Call] = field(default_factory=list)  # dequantize → operand, in order


@dataclass
class _Plan:
    """How one product becomes integer."""

    data: _Dequantized
    weight: _Dequantized
    channel_axis: int  # the output channel's axis in the product's result
    channels: int
    #: a matmul with the weight first, ``W @ x`` (the cleanup swaps ``x @ Wᵀ`` into it when
    #: the activation arrives transposed: MLP-Mixer's token mixing)
    weight_left: bool = False


@dataclass
class LeftInFloat:
    """A convolution or matmul on quantized data that stays in float, and why."""

    source: str  # the product's binding name
    op: str
    why: str


def _constant(expr: relax.Expr, values: dict[relax.Var, relax.Expr]) -> np.ndarray | None:
    """The value of a constant, or of ``astype`` of one (how zero points are imported)."""
    if isinstance(expr, relax.Var) and op_name(values.get(expr)) == _ASTYPE:
        call = values[expr]
        inner = _constant(call.args[0], values)
        return None if inner is None else inner.astype(str(call.attrs.dtype))
    if is_tensor_constant(expr):
        return np.asarray(expr.value.numpy())
    return None


def _dequantized(expr: relax.Expr, values: dict[relax.Var, relax.Expr]
                 ) -> tuple[_Dequantized | None, str]:
    """`expr` as views of a dequantize with constant parameters, else why not."""
    views: list[relax.Call] = []
    while isinstance(expr, relax.Var) and op_name(values.get(expr)) in _VIEWS:
        view = values[expr]
        if op_name(view) == _PAD and not _zero_pad(view):
            return None, "it is padded with a value other than zero"
        views.insert(0, view)
        expr = view.args[0]
    call = values.get(expr) if isinstance(expr, relax.Var) else None
    if op_name(call) != _DEQUANTIZE:
        return None, "its operand is not dequantized (the quantizer left it in float)"
    assert call is not None
    codes, scale, zero = call.args[0], _constant(call.args[1], values), \
        _constant(call.args[2], values)
    dtype = str(codes.ty.dtype) if hasattr(codes.ty, "dtype") else ""
    if dtype not in _INTEGER:
        return None, f"its codes are {dtype or 'not a tensor'}, not int8/uint8"
    if scale is None or zero is None:
        return None, "its scale or zero point is computed at run time"
    rank = len(known_shape(codes) or ())
    axis: int | None = None
    if scale.size > 1:
        axis = int(call.attrs.axis) % max(rank, 1)
        axis = _follow_axis(axis, codes, views)
        if axis is None:
            return None, "its per-channel scale's axis is lost in a reshape"
    return _Dequantized(codes, scale.astype(np.float32).reshape(-1),
                        zero.astype(np.int64).reshape(-1), axis, views), ""


def _zero_pad(view: relax.Call) -> bool:
    """A pad with zeros (a transposed convolution's inserted zeros, a conv's border): on the
    codes it pads with the zero point, the code of 0.0."""
    return str(view.attrs.pad_mode) == "constant" and float(view.attrs.pad_value) == 0.0


def _follow_axis(axis: int, codes: relax.Expr, views: Sequence[relax.Call]) -> int | None:
    """Where `axis` of `codes` is after `views` (None: merged or split by a reshape)."""
    shape = known_shape(codes)
    for view in views:
        name = op_name(view)
        out = known_shape(view)
        if shape is None or out is None:
            return None
        if name == "relax.permute_dims":
            axes = [int(a) for a in view.attrs.axes] if view.attrs.axes is not None \
                else list(range(len(shape)))[::-1]
            axis = axes.index(axis)
        elif name == "relax.broadcast_to":  # axes align at the end: leading ones are new
            axis += len(out) - len(shape)
        elif name in ("relax.flip", _PAD):  # the same axes, reversed or padded
            if name == _PAD and any(int(w) for w in view.attrs.pad_width[2 * axis:2 * axis + 2]):
                return None  # the scale's own axis padded: no scale for the new entries
        else:  # a reshape keeps the axis where everything before it is kept as it was
            before = int(np.prod(shape[:axis], dtype=np.int64))
            stops = list(np.cumprod([1, *out]))
            if before not in stops:
                return None
            new = stops.index(before)
            if new >= len(out) or out[new] != shape[axis]:
                return None
            axis = new
        shape = out
    return axis


def find(func: relax.Function) -> tuple[dict[relax.Var, _Plan], list[LeftInFloat]]:
    """Every product that becomes integer (by its binding), and every one on quantized data
    that stays in float with the reason."""
    values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    derived = weight_derived(func)
    plans: dict[relax.Var, _Plan] = {}
    left: list[LeftInFloat] = []
    for var, value in values.items():
        name = op_name(value)
        if name not in (*_CONVS, _MATMUL, *_UNLOWERED):
            continue
        data, why_data = _dequantized(value.args[0], values)
        weight, why_weight = _dequantized(value.args[1], values)
        if data is None and weight is None:
            continue  # a float product of a float model (or of float data): not quantized
        short = str(name).rsplit(".", 1)[-1]
        if name in _UNLOWERED:
            left.append(LeftInFloat(var.name, short, "no integer lowering for it here "
                                    "(conv2d and matmul have one)"))
            continue
        weight_left = name == _MATMUL and data is not None and weight is not None and \
            _constant_codes(data, derived) and not _constant_codes(weight, derived)
        if weight_left:  # W @ x: the constant operand first
            data, weight, why_data, why_weight = weight, data, why_weight, why_data
        why = _refusal(value, data, weight, why_data, why_weight, derived)
        if why:
            left.append(LeftInFloat(var.name, short, why))
            continue
        assert data is not None and weight is not None
        plan = _plan(value, data, weight, weight_left)
        if isinstance(plan, str):
            left.append(LeftInFloat(var.name, short, plan))
            continue
        plans[var] = plan
    return plans, left


def _refusal(value: relax.Call, data: _Dequantized | None, weight: _Dequantized | None,
             why_data: str, why_weight: str, derived: set[relax.Var]) -> str:
    if data is None:
        return f"its data: {why_data}"
    if weight is None:
        return f"its weight: {why_weight}"
    if not _constant_codes(weight, derived):
        return "both operands are computed at run time (an integer product needs a constant " \
               "weight here)"
    if data.scale.size != 1 or data.zero.size != 1:
        return "its data is quantized per channel (one scale and zero point are needed)"
    if np.any(weight.zero != 0):
        return "its weight's zero point is not 0 (asymmetric weights need a correction " \
               "that depends on the data)"
    if str(value.attrs.out_dtype) not in ("float32", ""):
        return f"it computes in {value.attrs.out_dtype}"
    return ""


def _constant_codes(operand: _Dequantized, derived: set[relax.Var]) -> bool:
    """The operand's codes are known when the program is compiled (a weight)."""
    return is_tensor_constant(operand.codes) or operand.codes in derived


def _plan(value: relax.Call, data: _Dequantized, weight: _Dequantized,
          weight_left: bool = False) -> _Plan | str:
    """The output channel axis and count, checked against the weight's scale axis."""
    w_shape = known_shape(value.args[0 if weight_left else 1])
    if w_shape is None or known_shape(value) is None:
        return "its shapes are not static"
    if op_name(value) in _CONVS:
        if str(value.attrs.data_layout) != str(value.attrs.out_layout):
            return "its output layout differs from its data's"
        kernel = str(value.attrs.kernel_layout)
        weight_axis, out_axis = kernel.index("O"), str(value.attrs.out_layout).index("C")
    else:  # a matrix, broadcast over leading axes of one at most
        if len(w_shape) < 2 or any(d != 1 for d in w_shape[:-2]):
            return "its weight is not a matrix"
        rank = len(known_shape(value) or ())
        # x @ W: W is (K, O), the output's channels last; W @ x: W is (O, K), channels rows
        weight_axis = len(w_shape) - (2 if weight_left else 1)
        out_axis = rank - (2 if weight_left else 1)
    if weight.axis is not None and weight.axis != weight_axis:
        return "its weight's scale is per channel on another axis than the output channels"
    return _Plan(data, weight, out_axis, int(w_shape[weight_axis]), weight_left)


def _replay(codes: relax.Expr, views: Sequence[relax.Call], zero: int = 0) -> relax.Expr:
    """`views` on the codes; a pad of zeros pads with the zero point `zero`."""
    out = codes
    for view in views:
        if op_name(view) == _PAD:
            out = relax.op.nn.pad(out, [int(w) for w in view.attrs.pad_width], "constant",
                                  float(zero))
        else:
            out = relax.Call(view.op, [out, *view.args[1:]], view.attrs, view.ty_args)
    return out


def _constant_sums(operand: _Dequantized, weight: relax.Expr, reduce: Sequence[int]
                   ) -> np.ndarray | None:
    """Σ of a constant weight's codes over `reduce` (axes of `weight`, the codes through
    their views), one per output channel, computed here; None where the codes are computed
    (a parameter's: `fold_params` computes the sums) or the views hide the channel axis.

    Each such sum left to `fold_params` is three more ops (astype, sum, multiply) that it
    lowers, builds and runs: on the bundled ResNet-18 its stage took 0.8 s, 0.4 s without. The
    views only move the codes (a pad pads with the weight's zero point, 0), so the sum over
    every axis but the channel's is the same on the codes as on `weight`."""
    shape = known_shape(weight)
    if not is_tensor_constant(operand.codes) or shape is None:
        return None
    codes = np.asarray(operand.codes.value.numpy())
    if codes.size != int(np.prod(shape, dtype=np.int64)):
        return None  # a broadcast repeats codes: leave it to the Relax ops
    kept = [a for a in range(len(shape)) if a not in reduce][-1]  # any others are 1 wide
    axis = next((a for a in range(codes.ndim)
                 if _follow_axis(a, operand.codes, operand.views) == kept), None)
    if axis is None:
        return None
    others = tuple(a for a in range(codes.ndim) if a != axis)
    return codes.astype(np.int64).sum(axis=others)


@mutator
class _Rewriter(PyExprMutator):  # type: ignore[misc]
    def __init__(self, plans: dict[relax.Var, _Plan]) -> None:
        super().__init__()
        self.plans = plans

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if binding.var in self.plans:
            self._emit(binding.var, binding.value, self.plans[binding.var])
            return
        super().visit_var_binding_(binding)

    def _emit(self, var: relax.Var, value: relax.Call, plan: _Plan) -> None:
        bb = self.builder_
        zx = int(plan.data.zero[0])
        data = bb.normalize(_replay(self.visit_expr(plan.data.codes), plan.data.views, zx))
        weight = bb.normalize(_replay(self.visit_expr(plan.weight.codes), plan.weight.views,
                                      int(plan.weight.zero[0])))
        if op_name(value) in _CONVS:
            attrs = value.attrs
            padding = [int(p) for p in attrs.padding]
            if zx != 0 and any(padding):
                layout = str(attrs.data_layout)
                spatial = [d for d in layout if d not in "NC"]  # padding: all begins, then ends
                width = [0] * (2 * len(layout))
                for k, dim in enumerate(spatial):
                    axis = layout.index(dim)
                    width[2 * axis] = padding[k]
                    width[2 * axis + 1] = padding[k + len(spatial)]
                data = bb.normalize(relax.op.nn.pad(data, width, pad_value=float(zx)))
                padding = [0] * len(padding)
            acc = _CONVS[str(op_name(value))](
                data, weight, strides=attrs.strides, padding=padding, dilation=attrs.dilation,
                groups=attrs.groups, data_layout=str(attrs.data_layout),
                kernel_layout=str(attrs.kernel_layout), out_layout=str(attrs.out_layout),
                out_dtype="int32")
            kernel = str(attrs.kernel_layout)
            reduce = [i for i in range(len(kernel)) if kernel[i] != "O"]
        else:  # the correction sums the weight over K: its rows (x @ W) or columns (W @ x)
            w_rank = len(known_shape(weight) or ())
            if plan.weight_left:
                acc = relax.op.matmul(weight, data, out_dtype="int32")
                reduce = [w_rank - 1]
            else:
                acc = relax.op.matmul(data, weight, out_dtype="int32")
                reduce = [w_rank - 2]
        scale = (plan.data.scale[0] * plan.weight.scale).astype(np.float32)
        scale = np.broadcast_to(scale, (plan.channels,)).copy()
        # the correction as a zero point: one loop nest, not three (see the module docstring)
        zero: relax.Expr = relax.const(0, "int32")
        if zx != 0:
            known = _constant_sums(plan.weight, weight, reduce)
            if known is not None:
                zero = relax.const((known * zx).astype(np.int32))
            else:
                sums = relax.op.sum(relax.op.astype(weight, "int32"), axis=reduce)
                zero = relax.op.reshape(relax.op.multiply(sums, relax.const(zx, "int32")),
                                        [plan.channels])
        real = relax.op.dequantize(acc, relax.const(scale), zero, axis=plan.channel_axis,
                                   out_dtype="float32")
        bb.emit_normalized(relax.VarBinding(var, bb.normalize(real)))


def integer_compute(func: relax.Function) -> relax.Function:
    """Every quantized convolution and matmul that qualifies reads integer codes (see the
    module docstring); the rest is left as it was."""
    plans, _ = find(func)
    if not plans:
        return func
    return relax.analysis.remove_all_unused(_Rewriter(plans).visit_expr(func))


IntegerCompute = relax_function_pass("IntegerCompute")(integer_compute)


def report(func: relax.Function, sources: dict[str, str]) -> list[str]:
    """One line per product on quantized data left in float, as reports say it."""
    _, left = find(func)
    return [f"{x.op} at {sources.get(x.source, x.source)} left in float: {x.why}" for x in left]


__all__ = ["IntegerCompute", "LeftInFloat", "find", "integer_compute", "report"]
