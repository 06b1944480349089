"""Which op a failed pipeline stage failed on, and where the model wrote it; which kernel a
failed build failed on.

A stage that raises deep in TVM says what went wrong ("Cannot convert infinity to BigInt")
but not where: the op, or the line of the model that made it. When a stage fails, each call
of the IR it was given is run through the same stage alone (a function of that one call, its
operands as parameters of the same types): the first that fails the same way is the culprit,
named with its op and the PyTorch source the import recorded for its binding. Paid only when a
stage has failed; a stage whose failure no single call reproduces (one that needs the whole
graph) names none. A build that fails is asked the same of its kernels: each PrimFunc built
alone for the target, the first that fails the same way named (its name lists the ops fused
into it: ``fused_greater_less_multiply``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import tvm
from tvm import relax, tirx

from cl_validate.errors import last_line
from cl_validate.ir import bindings, op_name

#: The most time spent looking for the culprit.
BUDGET_S = 20.0


def culprit(run: Callable[[tvm.IRModule], tvm.IRModule], mod: tvm.IRModule,
            sources: dict[str, str], error: BaseException) -> str | None:
    """``relax.clip (binding lv2, from blocks.0.attn at model.py:42)`` for the first call of
    `mod`'s ``main`` that `run` (the failed stage) fails on alone with the same error as
    `error` (its type and what it says); None when none does (or the search runs out of
    time)."""
    deadline = time.perf_counter() + BUDGET_S
    main = mod["main"] if "main" in [g.name_hint for g in mod.get_global_vars()] else None
    if not isinstance(main, relax.Function):
        return None
    for b in bindings(main):
        if time.perf_counter() > deadline:
            return None
        name = op_name(b.value)
        if name is None:
            continue
        alone = _alone(b.value)
        if alone is None:
            continue
        try:
            run(alone)
        except Exception as exc:  # the stage's own failure, on this call alone
            if type(exc) is type(error) and last_line(exc) == last_line(error):
                source = sources.get(b.var.name)
                where = f"binding {b.var.name}" + (f", from {source}" if source else "")
                return f"{name} ({where})"
    return None


def failing_kernel(mod: tvm.IRModule, target: Any, error: BaseException) -> str | None:
    """``kernel fused_greater_less_multiply`` for the first PrimFunc of `mod` that fails to
    build alone for `target` with the same error as `error`; None when none does (or the
    search runs out of time)."""
    deadline = time.perf_counter() + BUDGET_S
    for gvar, func in mod.functions.items():
        if time.perf_counter() > deadline:
            return None
        if not isinstance(func, tirx.PrimFunc):
            continue
        alone = tvm.IRModule({gvar: func.with_attr("global_symbol", gvar.name_hint)})
        try:
            with target:
                tirx.build(alone, target=target)
        except Exception as exc:  # the build's own failure, on this kernel alone
            if type(exc) is type(error) and last_line(exc) == last_line(error):
                return f"kernel {gvar.name_hint}"
    return None


def _alone(call: relax.Call) -> tvm.IRModule | None:
    """A module whose ``main`` is `call` alone, its variable operands made parameters."""
    params: list[relax.Var] = []

    def operand(arg: Any) -> Any:
        if isinstance(arg, relax.Var):
            v = relax.Var(arg.name, arg.ty)
            params.append(v)
            return v
        if isinstance(arg, relax.Tuple):
            return relax.Tuple([operand(f) for f in arg.fields])
        return arg

    try:
        args = [operand(a) for a in call.args]
        bb = relax.BlockBuilder()
        with bb.function("main", params):
            out = bb.emit(relax.Call(call.op, args, call.attrs, call.ty_args))
            bb.emit_func_output(out)
        return bb.get()
    except Exception:  # an operand the builder cannot take alone: not a candidate
        return None
