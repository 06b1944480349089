"""Run-time assertions after the computation, so the computation is one dataflow block.

A model whose exported graph checks values at run time (``F.one_hot``'s "class values must
be non-negative", ``torch._assert`` on a tensor) imports as an impure ``main`` with every
binding outside any dataflow block, around its ``assert_op`` calls. ConvertLayout rewrites
dataflow blocks only: such a model stayed NCHW from its first convolution to its last (the
``layout`` check failed, nothing said why). The assertions read values and produce none that
the computation reads, so they can run after it: here the pure bindings become one dataflow
block (each keeping its name: the model's sources are found by them; only what the
assertions and the result read leave it), and the assertions follow, in their order. The
outputs are the same; an assertion that fails still fails the call.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.ir import op_name, replace_function

_ASSERT = "relax.assert_op"


@mutator
class _Remap(PyExprMutator):  # type: ignore[misc]
    """Reads each var as the one it was rebound to."""


def asserts_last(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with main's assertions after one dataflow block of everything else; `mod` itself
    when main has no assertion, or something impure besides them, or a dataflow block."""
    func = mod["main"]
    body = func.body
    if not isinstance(body, relax.SeqExpr) or any(
            isinstance(b, relax.DataflowBlock) for b in body.blocks):
        return mod
    every = [b for block in body.blocks for b in block.bindings]
    asserts = [b for b in every if op_name(b.value) == _ASSERT]
    pure = [b for b in every if op_name(b.value) != _ASSERT]
    if not asserts or not all(isinstance(b, relax.VarBinding) for b in pure) or any(
            isinstance(b.value, relax.Call) and not _is_pure(b.value) for b in pure):
        return mod
    read_after = set(relax.analysis.free_vars(body.body))
    for b in asserts:
        read_after |= set(relax.analysis.free_vars(b.value))
    remap = _Remap()
    bb = relax.BlockBuilder()
    with bb.function("main", list(func.params), dict(func.attrs) if func.attrs else None,
                     pure=False):
        with bb.dataflow():
            for b in pure:
                value = remap.visit_expr(b.value)
                emit = bb.emit_output if b.var in read_after else bb.emit
                remap.set_var_remap(b.var, emit(value, name_hint=b.var.name))
        for b in asserts:
            bb.emit(remap.visit_expr(b.value), name_hint=b.var.name)
        bb.emit_func_output(remap.visit_expr(body.body))
    return replace_function(mod, "main", bb.get()["main"])


def _is_pure(call: relax.Call) -> bool:
    op = call.op
    if isinstance(op, tvm.ir.Op):
        return not bool(op.get_attr("FPurity") is False)
    return True


__all__ = ["asserts_last"]
