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

from cl_validate.compile.passes._plan import with_fields
from cl_validate.compile.passes._util import rebind, relax_function_pass
from cl_validate.compile.passes.shared_chains import per_tensor
from cl_validate.ir import bindings, op_name, use_sites

_MOVES = frozenset({"relax.reshape", "relax.permute_dims"})
_CUT = _MOVES | {"relax.concat"}  # what a pair after it cuts from the movement after it
_QUANTIZE, _DEQUANTIZE = "relax.quantize", "relax.dequantize"
#: Each round moves every pair one movement further; a chain is a handful of ops long.
_ROUNDS = 16


def _moves(func: relax.Function) -> dict[relax.Var, tuple[Any, Any, Any]]:
    """Movement bindings that read a pair to move: var -> (the movement, the quantize, the
    dequantize)."""
    values = {b.var: b.value for b in bindings(func)}
    users = use_sites(func)

    def only_reader(var: Any) -> bool:
        return isinstance(var, relax.Var) and len(users.get(var, [])) == 1 and \
            users[var][0] is not None

    found: dict[relax.Var, tuple[Any, Any, Any]] = {}
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
            found[var] = (value, q, deq)
    return found


def _moved(m: Any, found: tuple[Any, Any, Any], _var: relax.Var) -> relax.Expr:
    """The movement applied to the pair's input, then the pair (per tensor: the same codes
    wherever the values stand)."""
    move, q, deq = found
    value: relax.Expr = m.builder_.emit(relax.Call(
        move.op, [m.visit_expr(q.args[0]), *move.args[1:]], move.attrs, move.ty_args))
    value = m.builder_.emit(relax.Call(q.op, [value, *q.args[1:]], with_fields(q.attrs, axis=-1),
                                       q.ty_args, q.span))
    return relax.Call(deq.op, [value, *deq.args[1:]], with_fields(deq.attrs, axis=-1),
                      deq.ty_args, deq.span)


def sink_quantize_pairs(func: relax.Function) -> relax.Function:
    """Every per-tensor quantize-dequantize pair between a movement (or a concat) and the
    reshapes and permutes after it, moved after them."""
    for _ in range(_ROUNDS):
        moves = _moves(func)
        if not moves:
            break
        func = rebind(func, moves, _moved)
    return func


SinkQuantizePairs = relax_function_pass("SinkQuantizePairs")(sink_quantize_pairs)

__all__ = ["SinkQuantizePairs", "sink_quantize_pairs"]
