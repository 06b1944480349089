"""FoldScaleShift: a per-channel scale and shift after a convolution moves into its weights.

After BatchNorm decomposition and weight folding, every ``conv → BatchNorm`` of an inference
graph reads ``((conv(x, W) - mean) / std) * gamma + beta`` with constant per-channel vectors.
Fused, that is four extra elementwise loop nests in the convolution's kernel, each one more
pass over the output and more code for LLVM to compile (on ResNet-50 it nearly doubles the
JIT time of the built module). Because every step is affine per output channel,

    s * conv(x, W) + b  ==  conv(x, W * s[o]) + b

so the chain becomes one convolution with rescaled constant weights and a single bias add.

What qualifies, all of it checked, otherwise the IR is left as it was:

* a ``relax.nn.conv1d/2d/3d`` whose weight is a constant (run after the weights are bound)
  and whose data and kernel layouts are plain (no packed ``NCHW4c``-style axes);
* followed by ``add``, ``subtract``, ``multiply`` or ``divide`` with a floating-point
  constant that varies at most along the output channel axis (a scalar, a ``(C,)`` vector in
  NHWC, a ``(1, C, 1, 1)`` tensor in NCHW, ...) and does not change the result's shape;
* ``subtract`` on either side; ``divide`` only by the constant;
* every intermediate result read by the next step and nothing else.

The arithmetic is done in float64 and rounded once to the weights' dtype, so the numerics
differ from the unfolded graph only by float rounding (well inside any case's tolerance).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import relax_function_pass
from cl_validate.ir import is_float, is_tensor_constant, op_name, static_shape, tensor_type

CONV_OPS = ("relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d")
AFFINE_OPS = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


@dataclass
class _Fold:
    """One planned rewrite: ``conv`` gets ``weight``; ``last`` becomes ``conv + bias``; the
    bindings of the steps in between go."""

    conv: relax.Var
    last: relax.Var
    middle: list[relax.Var]
    weight: np.ndarray
    bias: np.ndarray | None  # None: the shift is exactly zero, ``last`` is the conv itself


def _plain_axis(layout: str, axis: str) -> int | None:
    """Index of `axis` in a plain layout string ("NHWC", "OIHW"), None if packed or absent."""
    if not layout.isalpha() or not layout.isupper():
        return None
    return layout.find(axis) if axis in layout else None


def _channel_vector(const: Any, out_shape: tuple[int | None, ...], c_axis: int
                    ) -> np.ndarray | None:
    """The constant as a per-output-channel float64 vector, or None if it varies elsewhere
    (or would broadcast the convolution's result to a larger shape)."""
    ty = tensor_type(const)
    if ty is None or not is_float(ty.dtype):
        return None
    value = const.value.numpy().astype(np.float64)
    rank = len(out_shape)
    if value.ndim > rank:
        return None
    value = value.reshape((1,) * (rank - value.ndim) + value.shape)
    channels = out_shape[c_axis]
    if channels is None:
        return None
    for axis, extent in enumerate(value.shape):
        if extent != 1 and (axis != c_axis or extent != channels):
            return None
    unit = [1] * rank
    unit[c_axis] = channels
    return np.broadcast_to(value, unit).reshape(channels).copy()


def _plan(func: relax.Function) -> dict[relax.Var, _Fold]:
    """Find every foldable conv chain; keyed by both the conv var and the chain's last var."""
    if not isinstance(func.body, relax.SeqExpr):
        return {}
    block_of: dict[relax.Var, int] = {}
    value_of: dict[relax.Var, relax.Expr] = {}
    uses: dict[relax.Var, list[relax.Var | None]] = {}
    for i, block in enumerate(func.body.blocks):
        for b in block.bindings:
            if not isinstance(b, relax.VarBinding):
                continue
            block_of[b.var] = i
            value_of[b.var] = b.value
            for v in relax.analysis.free_vars(b.value):
                uses.setdefault(v, []).append(b.var)
    for v in relax.analysis.free_vars(func.body.body):
        uses.setdefault(v, []).append(None)

    plans: dict[relax.Var, _Fold] = {}
    for var, value in value_of.items():
        if op_name(value) not in CONV_OPS or not is_tensor_constant(value.args[1]):
            continue
        attrs = value.attrs
        c_axis = _plain_axis(str(attrs.out_layout), "C")
        o_axis = _plain_axis(str(attrs.kernel_layout), "O")
        out_shape = static_shape(var)
        w_ty = tensor_type(value.args[1])
        if (c_axis is None or o_axis is None or out_shape is None or w_ty is None
                or not is_float(w_ty.dtype)):
            continue
        scale = np.ones(1, dtype=np.float64)
        shift = np.zeros(1, dtype=np.float64)
        chain: list[relax.Var] = []  # the steps folded, in order
        cur, scaled = var, False
        while True:
            users = uses.get(cur, [])
            if len(users) != 1 or users[0] is None:
                break
            nxt = users[0]
            step = value_of.get(nxt)
            if step is None or block_of.get(nxt) != block_of[var] or static_shape(nxt) != out_shape:
                break
            op = op_name(step)
            if op not in AFFINE_OPS:
                break
            lhs, rhs = step.args[0], step.args[1]
            const_first = is_tensor_constant(lhs) and rhs.same_as(cur)
            if not const_first and not (lhs.same_as(cur) and is_tensor_constant(rhs)):
                break
            vec = _channel_vector(lhs if const_first else rhs, out_shape, c_axis)
            if vec is None:
                break
            if op == "relax.add":
                shift = shift + vec
            elif op == "relax.subtract":
                if const_first:
                    scale, shift = -scale, vec - shift
                else:
                    shift = shift - vec
            elif op == "relax.multiply":
                scale, shift, scaled = scale * vec, shift * vec, True
            else:  # divide
                if const_first:
                    break
                scale, shift, scaled = scale / vec, shift / vec, True
            cur = nxt
            chain.append(cur)
        # A lone bias add is already what the rewrite would produce.
        if not chain or (len(chain) == 1 and not scaled):
            continue
        weight = value.args[1].value.numpy()
        channels = int(out_shape[c_axis])  # type: ignore[arg-type]
        s_shape = [1] * weight.ndim
        s_shape[o_axis] = channels
        s = np.broadcast_to(scale, (channels,)).reshape(s_shape)
        new_weight = (weight.astype(np.float64) * s).astype(weight.dtype)
        out_dtype = str(tensor_type(var).dtype)  # type: ignore[union-attr]
        bias_shape = [1] * len(out_shape)
        bias_shape[c_axis] = channels
        full_shift = np.broadcast_to(shift, (channels,))
        bias = None if not full_shift.any() else full_shift.reshape(bias_shape).astype(out_dtype)
        fold = _Fold(var, cur, chain[:-1], new_weight, bias)
        plans[var] = fold
        plans[cur] = fold
    return plans


@mutator
class _ScaleShiftFolder(PyExprMutator):  # type: ignore[misc]
    def __init__(self, plans: dict[relax.Var, _Fold]) -> None:
        super().__init__()
        self.plans = plans
        self.dropped = {v for fold in plans.values() for v in fold.middle}
        self.pending: dict[relax.Var, relax.Expr] = {}  # last var → its shift-free conv

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        fold = self.plans.get(binding.var)
        if fold is not None and fold.conv.same_as(binding.var):
            call = binding.value
            new = relax.Call(call.op, [self.visit_expr(call.args[0]), relax.const(fold.weight)],
                             call.attrs, call.ty_args, call.span)
            if fold.bias is None:
                # No shift: the chain's last variable is bound to the convolution itself, at
                # the last step. An alias ``last = conv`` instead would stop FuseOps from
                # fusing the convolution with what follows (a ReLU, a residual add).
                self.pending[fold.last] = new
                return
            self.builder_.emit_normalized(
                relax.VarBinding(binding.var, self.builder_.normalize(new)))
            return
        if fold is not None:  # the chain's last step
            value: relax.Expr
            if fold.bias is None:
                value = self.pending.pop(binding.var)
            else:
                value = relax.op.add(fold.conv, relax.const(fold.bias))
            self.builder_.emit_normalized(
                relax.VarBinding(binding.var, self.builder_.normalize(value)))
            return
        if binding.var in self.dropped:
            return
        super().visit_var_binding_(binding)


def fold_scale_shift(func: relax.Function) -> relax.Function:
    """Fold every constant per-channel affine chain after a constant-weight convolution into
    the convolution's weights plus one bias add (see the module docstring)."""
    plans = _plan(func)
    if not plans:
        return func
    return _ScaleShiftFolder(plans).visit_expr(func)


FoldScaleShift = relax_function_pass("FoldScaleShift")(fold_scale_shift)

__all__ = ["FoldScaleShift", "fold_scale_shift"]
