"""HoistChainSteps: an elementwise step with a constant operand, standing between two movement
chains, runs before the first chain, on what that chain moves, so the two chains become one.

TNT adds a position to its pixel patches in the middle of their movement: ``unfold ->
transpose -> reshape(B·N, C, 4, 4) -> + pixel_pos (1, C, 4, 4) -> reshape(B·N, C, 16) ->
transpose``. Under NHWC the movement before the add is a reshape and a permute of the
convolution's output, the one after it a reshape and a permute: two transposes where the
movement is one, and SinkPermutes cannot carry the first through the add (its reshape merges
the patches' rows and columns, which are not adjacent before the permute). The step does not
need to stand there: a chain of reshapes and permutes only reorders the elements, so
``chain(x) + c`` is ``chain(x + c')`` where ``c'`` is ``c`` moved back through the chain.
Every element meets the same element of ``c`` as before: exact.

``c'`` must stay a broadcast of the same size class, not a materialized copy of the whole
tensor: in the chain's atoms (`movement_chains.Atoms`: the factors its reshapes cut the axes
into) each axis of ``x`` must be, in ``c``, broadcast whole or present whole. Taken where
``c`` is computable when the program is compiled (a weight or a constant: its movement folds
away), the chain moves data (has a permute) and ends in a view (a permute right before the
step is SinkPermutes' to carry through, the weight permuted there), the step is its only
reader and the step's result is read by movements only. The chain is made again after the
step, folded into at most one transpose, and folds with the movement after it; it never
moves more than before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._layout_ops import BROADCAST_OPS
from cl_validate.compile.passes._plan import remake
from cl_validate.compile.passes._util import FREE, relax_function_pass
from cl_validate.compile.passes.movement_chains import (
    RESHAPE_OP,
    Chain,
    MovementChains,
    Step,
    chain_atoms,
    folded_movement,
    is_movement,
)
from cl_validate.ir import is_identity, is_weight_derived, op_name, static_shape, tensor_type

# Steps of two operands (`where` and `ewise_fma` take three: left where they are).
_STEPS = BROADCAST_OPS - {"relax.where", "relax.ewise_fma"}


@dataclass(frozen=True)
class _Plan:
    chain: Chain  # the movement before the step, ending at its operand
    pos: int  # where that operand stands among the step's two
    moved: _Moved  # the operand moved back to the chain's root
    root: tuple[int, ...]  # the root's shape


@dataclass(frozen=True)
class _Moved:
    """An operand moved back through a chain: viewed as `atoms` (the chain's atoms, in the
    order its end has them), permuted by `perm` (into the root's order), viewed as `shape`,
    it broadcasts against the chain's root viewed as `view`."""

    atoms: tuple[int, ...]
    perm: tuple[int, ...]
    shape: tuple[int, ...]
    view: tuple[int, ...]


def constant_at_root(root: tuple[int, ...], steps: list[Step], shape: tuple[int, ...]
                     ) -> _Moved | None:
    """An operand of `shape` that broadcasts against the end of the chain `steps` from a root
    of shape `root`, moved back to the root. The root is viewed as its atoms where one of its
    axes is made of atoms the operand is broadcast along and atoms it is present along (TNT:
    the patches' rows and the pixels' rows in one axis), as it is otherwise. None where an
    axis of the chain's end is broadcast in part only."""
    atoms = chain_atoms(root, steps)
    if atoms is None:
        return None
    end = tuple(math.prod(atoms.size[a] for a in d) for d in atoms.dims)
    if len(shape) > len(end):
        return None
    aligned = (1,) * (len(end) - len(shape)) + tuple(shape)
    full: set[int] = set()  # the atoms the operand is present along
    order: list[int] = []  # the atoms in the chain's end order
    for dims, extent, have in zip(atoms.dims, end, aligned, strict=True):
        if have not in (1, extent):
            return None
        order += dims
        if have == extent:
            full.update(dims)
    size = {a: atoms.size[a] if a in full else 1 for a in order}
    root_order = [a for d in atoms.root for a in d]
    perm = tuple(order.index(a) for a in root_order)
    if all(len({a in full for a in dims}) <= 1 for dims in atoms.root):
        return _Moved(tuple(size[a] for a in order), perm,
                      tuple(math.prod(size[a] for a in dims) for dims in atoms.root), root)
    return _Moved(tuple(size[a] for a in order), perm, tuple(size[a] for a in root_order),
                  tuple(atoms.size[a] for a in root_order))


def _plans(func: relax.Function) -> dict[relax.Var, _Plan]:
    chains = MovementChains(func)
    plans: dict[relax.Var, _Plan] = {}
    for var, call in chains.values.items():
        if op_name(call) not in _STEPS or len(call.args) != 2:
            continue
        readers = chains.uses.get(var, [])
        if not readers or any(r is None or not is_movement(chains.values.get(r))
                              for r in readers):
            continue
        for pos in (0, 1):
            data, other = call.args[pos], call.args[1 - pos]
            # a chain that ends in a view: a permute right before the step is SinkPermutes'
            # to carry through (the weight permuted there)
            if not isinstance(data, relax.Var) or \
                    op_name(chains.values.get(data)) != RESHAPE_OP or \
                    chains.uses.get(data) != [var] or tensor_type(other) is None or \
                    not is_weight_derived(other, chains.weights):
                continue
            chain = chains.chain(data)
            shape, out, end = static_shape(other), static_shape(var), static_shape(data)
            if chain is None or shape is None or None in shape or out != end or \
                    not chain.cost > FREE:  # moves no run-time data
                continue
            root = static_shape(chain.root)
            if root is None or None in root:
                continue
            moved = constant_at_root(root, chain.steps, shape)  # type: ignore[arg-type]
            if moved is not None:
                plans[var] = _Plan(chain, pos, moved, root)  # type: ignore[arg-type]
                break
    return plans


@mutator
class _Hoister(PyExprMutator):  # type: ignore[misc]
    def __init__(self, plans: dict[relax.Var, _Plan]) -> None:
        super().__init__()
        self.plans = plans

    def _moved(self, expr: relax.Expr, moved: _Moved) -> relax.Expr:
        """The operand viewed on the atoms, permuted into the root's order, viewed there."""
        if static_shape(expr) != moved.atoms:
            expr = self.builder_.emit(relax.op.reshape(expr, list(moved.atoms)))
        if not is_identity(moved.perm):
            expr = self.builder_.emit(relax.op.permute_dims(expr, list(moved.perm)))
        if static_shape(expr) != moved.shape:
            expr = self.builder_.emit(relax.op.reshape(expr, list(moved.shape)))
        return expr

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        plan = self.plans.get(binding.var)
        if plan is None:
            super().visit_var_binding_(binding)
            return
        call, moved = binding.value, plan.moved
        steps = plan.chain.steps
        root = self.visit_expr(plan.chain.root)
        if moved.view != plan.root:
            root = self.builder_.emit(relax.op.reshape(root, list(moved.view)))
            steps = [("reshape", plan.root), *steps]
        other = self._moved(self.visit_expr(call.args[1 - plan.pos]), moved)
        stepped = self.builder_.emit(remake(call, [root, other] if plan.pos == 0 else
                                            [other, root]))
        folded = folded_movement(stepped, moved.view, steps,
                                 static_shape(binding.var),  # type: ignore[arg-type]
                                 plan.chain.origin, self.builder_.emit)
        assert folded is not None  # the chain `constant_at_root` walked, from its atoms
        self.builder_.emit_normalized(relax.VarBinding(binding.var,
                                                       self.builder_.normalize(folded[0])))


def hoist_chain_steps(func: relax.Function) -> relax.Function:
    """Each elementwise step with a weight-derived operand between two movement chains: run
    on the first chain's root, the chain made again (folded) after it."""
    plans = _plans(func)
    if not plans:
        return func
    return relax.analysis.remove_all_unused(_Hoister(plans).visit_expr(func))


HoistChainSteps = relax_function_pass("HoistChainSteps")(hoist_chain_steps)

__all__ = ["HoistChainSteps", "constant_at_root", "hoist_chain_steps"]
