"""SinkQuantizePairs: a per-tensor quantize-dequantize pair that stands between a movement (a
reshape, a permute or a concat) and the reshapes and permutes after it goes after them.

PT2E quantizers put a quantize-dequantize pair on a concat's output: in ShuffleNetV2 it
stands between the concat and the channel shuffle's ``reshape -> permute -> reshape``. Per
tensor (one scale, one zero point), the pair computes the same codes wherever the values
stand, so moving it is exact; where it stood, it cut the movement in two, and the passes that
fold movement (``InterleaveConcats``, ``FoldMovementChains``, ``CancelPermutes``,
``SinkPermutes``) each saw half of it: the quantized ShuffleNetV2 kept a transpose per stage
that the float model does not have. Moved, the movement is one chain and the pair ends it,
right before the op that reads the quantized values (a convolution, a split into them), where
``IntegerCompute`` looks for it.

Only a pair read by nothing else is moved, and only after a movement or a concat (where it
cuts a chain); a pair after any other op stays where the quantizer put it.
"""

from __future__ import annotations

from typing import Any

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._plan import with_fields
from cl_validate.compile.passes._util import relax_function_pass
from cl_validate.compile.passes.shared_chains import per_tensor
from cl_validate.ir import bindings, op_name, use_sites

_MOVES = frozenset({"relax.reshape", "relax.permute_dims"})
_CUT = _MOVES | {"relax.concat"}  # what a pair after it cuts from the movement after it
_QUANTIZE, _DEQUANTIZE = "relax.quantize", "relax.dequantize"
#: Each round moves every pair one movement further; a chain is a handful of ops long.
_ROUNDS = 16


def _moves(func: relax.Function) -> dict[relax.Var, tuple[Any, Any]]:
    """Movement bindings that read a pair to move: var -> (the quantize, the dequantize)."""
    values = {b.var: b.value for b in bindings(func)}
    users = use_sites(func)

    def only_reader(var: Any) -> bool:
        return isinstance(var, relax.Var) and len(users.get(var, [])) == 1 and \
            users[var][0] is not None

    found: dict[relax.Var, tuple[Any, Any]] = {}
    for var, value in values.items():
        if op_name(value) not in _MOVES:
            continue
        deq_var = value.args[0]
        deq = values.get(deq_var) if isinstance(deq_var, relax.Var) else None
        if op_name(deq) != _DEQUANTIZE or not per_tensor(deq) or not only_reader(deq_var):
            continue
        q_var = deq.args[0]  # type: ignore[union-attr]
        q = values.get(q_var) if isinstance(q_var, relax.Var) else None
        if op_name(q) != _QUANTIZE or not per_tensor(q) or not only_reader(q_var):
            continue
        src = q.args[0]  # type: ignore[union-attr]
        if isinstance(src, relax.Var) and op_name(values.get(src)) in _CUT:
            found[var] = (q, deq)
    return found


@mutator
class _Mover(PyExprMutator):  # type: ignore[misc]
    def __init__(self, moves: dict[relax.Var, tuple[Any, Any]]) -> None:
        super().__init__()
        self.moves = moves

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        pair = self.moves.get(binding.var)
        if pair is None:
            super().visit_var_binding_(binding)
            return
        q, deq = pair
        move = binding.value
        value: relax.Expr = self.builder_.emit(relax.Call(
            move.op, [self.visit_expr(q.args[0]), *move.args[1:]], move.attrs, move.ty_args))
        for call in (q, deq):  # per tensor: the same codes wherever the values stand
            value = relax.Call(call.op, [value, *call.args[1:]],
                               with_fields(call.attrs, axis=-1), call.ty_args, call.span)
            if call is q:
                value = self.builder_.emit(value)
        self.builder_.emit_normalized(
            relax.VarBinding(binding.var, self.builder_.normalize(value)))


def sink_quantize_pairs(func: relax.Function) -> relax.Function:
    """Every per-tensor quantize-dequantize pair between a movement (or a concat) and the
    reshapes and permutes after it, moved after them."""
    for _ in range(_ROUNDS):
        moves = _moves(func)
        if not moves:
            break
        func = relax.analysis.remove_all_unused(_Mover(moves).visit_expr(func))
    return func


SinkQuantizePairs = relax_function_pass("SinkQuantizePairs")(sink_quantize_pairs)

__all__ = ["SinkQuantizePairs", "sink_quantize_pairs"]
