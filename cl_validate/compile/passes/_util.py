"""Shared helpers of the layout cleanup passes: permutation algebra, the pass wrapper, and
the notes a pass leaves when it stops short (`note`, `collect_notes`).

IR queries (bindings, shapes, which values derive from weights) are `cl_validate.ir`'s, the
same definitions the attribution and the analysis use.

A permutation ``p`` is read the way ``R.permute_dims(x, axes=p)`` reads it: axis ``i`` of the
result is axis ``p[i]`` of ``x``. Everything here is pure data movement reasoning, so a pass
built on it only ever changes where values sit in memory, never what they are.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.ir import (
    is_identity,
    is_weight_derived,
    permute_axes,
    static_shape,
    weight_derived,
)
from cl_validate.spec.layouts import moves_only_unit_axes  # the passes import it from here

Perm = tuple[int, ...]
#: A static shape: an int per axis, None for a symbolic extent.
Shape = tuple[int | None, ...]
#: What run-time permutes cost: (transposes that move data, permutes that only move size-1
#: axes). Compared as a tuple: fewer real transposes first, then fewer would-be reshapes.
Cost = tuple[int, int]
FREE: Cost = (0, 0)


# --------------------------------------------------------------------------------------------
# Permutation algebra
# --------------------------------------------------------------------------------------------
def compose(first: Sequence[int], second: Sequence[int]) -> Perm:
    """The one permutation equal to ``permute_dims(permute_dims(x, first), second)``."""
    return tuple(first[i] for i in second)


def inverse(perm: Sequence[int]) -> Perm:
    """The permutation that undoes ``perm``."""
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def permute_cost(in_shape: Shape | None, perm: Sequence[int]) -> Cost:
    """What one run-time ``permute_dims(x, perm)`` costs, ``x`` having shape ``in_shape``."""
    if is_identity(perm):
        return FREE
    if in_shape is not None and moves_only_unit_axes(in_shape, perm):
        return (0, 1)
    return (1, 1)


def add_costs(costs: Iterable[Cost]) -> Cost:
    total = FREE
    for c in costs:
        total = (total[0] + c[0], total[1] + c[1])
    return total


def runtime_cost(func: relax.Function, taken: Iterable[relax.Var] = ()) -> Cost:
    """What every run-time permute of `func` costs (permutes of weights fold away; those bound
    to a var of `taken`, which a later stage absorbs, cost nothing)."""
    weights, skip = weight_derived(func), set(taken)
    costs = []
    for block in func.body.blocks:
        for b in block.bindings:
            axes = permute_axes(b.value)
            if axes is not None and b.var not in skip and \
                    not is_weight_derived(b.value.args[0], weights):
                costs.append(permute_cost(static_shape(b.value.args[0]), axes))
    return add_costs(costs)


def cost_text(cost: Cost) -> str:
    real, unit = cost[0], cost[1] - cost[0]
    return f"{real} transposes" + (f" + {unit} size-1 permutes" if unit else "")


def relax_function_pass(
    name: str,
) -> Callable[[Callable[[relax.Function], relax.Function]], Callable[[], tvm.transform.Pass]]:
    """Turn ``rewrite(func) -> func`` into a factory of a Relax function pass.

    A factory rather than a pass object, so every pipeline gets a fresh pass and the pass name
    shows in ``tvm.transform`` instrumentation.
    """

    def deco(rewrite: Callable[[relax.Function], relax.Function]
             ) -> Callable[[], tvm.transform.Pass]:
        def factory() -> tvm.transform.Pass:
            def transform(func: relax.Function, _mod: tvm.IRModule,
                          _ctx: tvm.transform.PassContext) -> relax.Function:
                return rewrite(func)

            return relax.transform.function_pass(transform, opt_level=0, name=name)

        factory.__name__ = name
        factory.__qualname__ = name
        factory.__doc__ = rewrite.__doc__
        return factory

    return deco


# --------------------------------------------------------------------------------------------
# Notes: what a pass left undone
# --------------------------------------------------------------------------------------------
#: The notes of the pipeline stage being run (`collect_notes`); None outside one.
_NOTES: ContextVar[list[str] | None] = ContextVar("cl_validate_pass_notes", default=None)


class PassNoteWarning(RuntimeWarning):
    """A pass stopped short, run where nothing collects its notes."""


def note(line: str) -> None:
    """Say that a pass stopped short of what it would do (it hit a cap): one line, with what
    was left. `compile_case` collects the notes of every stage (`collect_notes`) and the
    report shows them; a pass run on its own, outside a collection, warns instead, so a
    stop is never silent."""
    notes = _NOTES.get()
    if notes is None:
        warnings.warn(line, PassNoteWarning, stacklevel=2)
    else:
        notes.append(line)


@contextmanager
def collect_notes() -> Iterator[list[str]]:
    """The notes the passes run inside the ``with`` leave (TVM calls a Python pass back in
    this thread, so the passes of a `tvm.transform.Sequential` are collected too)."""
    notes: list[str] = []
    token = _NOTES.set(notes)
    try:
        yield notes
    finally:
        _NOTES.reset(token)


class UnionFind:
    """Disjoint sets of vars (SinkPermutes' regions)."""

    def __init__(self) -> None:
        self.parent: dict[relax.Var, relax.Var] = {}

    def find(self, v: relax.Var) -> relax.Var:
        root = self.parent.setdefault(v, v)
        while root is not self.parent[root]:
            root = self.parent[root]
        self.parent[v] = root
        return root

    def union(self, a: relax.Var, b: relax.Var) -> None:
        self.parent[self.find(a)] = self.find(b)


@mutator
class _Rebinder(PyExprMutator):  # type: ignore[misc]
    def __init__(self, plans: dict[relax.Var, Any],
                 rebuild: Callable[[PyExprMutator, Any, relax.Var], relax.Expr]) -> None:
        super().__init__()
        self.plans, self.rebuild = plans, rebuild

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        plan = self.plans.get(binding.var)
        if plan is None:
            super().visit_var_binding_(binding)
            return
        value = self.builder_.normalize(self.rebuild(self, plan, binding.var))
        self.builder_.emit_normalized(relax.VarBinding(binding.var, value))


def rebind(func: relax.Function, plans: dict[relax.Var, Any],
           rebuild: Callable[[PyExprMutator, Any, relax.Var], relax.Expr]) -> relax.Function:
    """`func` with each var of `plans` bound to ``rebuild(mutator, plan, var)`` (the mutator's
    ``visit_expr`` gives an operand as rewritten, its ``builder_`` binds what it emits) and
    what no longer has a reader removed; `func` itself when there is no plan."""
    if not plans:
        return func
    return relax.analysis.remove_all_unused(_Rebinder(plans, rebuild).visit_expr(func))


def alias_var(builder: relax.BlockBuilder, mut: PyExprMutator, var: relax.Var,
              value: relax.Expr) -> None:
    """Make ``var`` stand for ``value``: a remap for dataflow vars, a binding for outputs."""
    if isinstance(var, relax.DataflowVar):
        if not isinstance(value, relax.Var):
            value = builder.emit(value, name_hint=var.name)
        mut.set_var_remap(var, value)
    else:
        builder.emit_normalized(relax.VarBinding(var, builder.normalize(value)))


def canonicalize(func: relax.Function) -> relax.Function:
    """Resolve ``t = (a, b); c = t[0]`` to ``a`` and drop dead bindings first: a use through a
    tuple nobody reads (as torch's max_pool2d leaves behind) would count as a real use."""
    mod = relax.transform.CanonicalizeBindings()(tvm.IRModule({"f": func}))
    return relax.analysis.remove_all_unused(mod["f"])
