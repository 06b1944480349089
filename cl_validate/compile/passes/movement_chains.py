"""FoldMovementChains: a chain of reshapes and permutes becomes at most one real transpose.

PixelShuffle and ShuffleNet's channel shuffle import as ``reshape -> permute -> reshape`` in
NCHW. Under ConvertLayout that sits between a transpose to NCHW and one back to NHWC: three
data-moving kernels where the shuffle itself needs one. CancelPermutes cannot see through it
(the permutes are not adjacent). SinkPermutes folds such a chain when it starts at a value it
carries in another layout (using ``folded_movement`` below); this pass folds the rest, e.g. a
model's own NCHW/NHWC round trips or a chain whose result leaves the graph.

Any chain of reshapes and permutes is a permutation of "atoms": split every axis into the
factors that some reshape in the chain cuts it into, and the chain only reorders atoms. So it
equals ``reshape(root, atoms) -> permute(atoms) -> reshape(result)``, and after merging atoms
that stay adjacent (and dropping size-1 ones) the permute is often the identity (then the
chain is one reshape) and otherwise the one transpose the chain really needs.

Only chains of static shape are folded, and only through intermediates read by nothing else,
so the replaced chain dies entirely and the rewrite strictly lowers the transform count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import (
    FREE,
    Cost,
    Perm,
    add_costs,
    permute_cost,
    relax_function_pass,
)
from cl_validate.ir import (
    PERMUTE_OP,
    bindings,
    block_index,
    is_identity,
    is_weight_derived,
    mark_origin,
    merge_origins,
    op_name,
    origin_tag,
    permute_axes,
    static_shape,
    use_sites,
    weight_derived,
)

RESHAPE_OP = "relax.reshape"
#: One step of a chain: ("permute", perm) or ("reshape", new static shape).
Step = tuple[str, tuple[int, ...]]


class Atoms:
    """Tracks which atoms each axis of the current tensor is made of (row-major order)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.size: dict[int, int] = {}
        self.root = [self._new(d) for d in shape]
        self.dims = [list(a) for a in self.root]

    def _new(self, extent: int) -> list[int]:
        if extent == 1:
            return []
        self.size[len(self.size)] = extent
        return [len(self.size) - 1]

    def _split(self, atom: int, outer: int) -> tuple[int, int]:
        """Replace ``atom`` by (outer, inner) atoms everywhere it occurs."""
        hi, lo = self._new(outer)[0], self._new(self.size[atom] // outer)[0]
        for dims in (self.root, self.dims):
            for d in dims:
                if atom in d:
                    i = d.index(atom)
                    d[i:i + 1] = [hi, lo]
        return hi, lo

    def permute(self, perm: tuple[int, ...]) -> None:
        self.dims = [self.dims[p] for p in perm]

    def reshape(self, shape: tuple[int, ...]) -> bool:
        """Regroup the atoms into ``shape``, cutting atoms where an extent ends inside one."""
        flat = [a for d in self.dims for a in d]
        new: list[list[int]] = []
        i = 0
        for extent in shape:
            dim: list[int] = []
            have = 1
            while have < extent:
                need, rem = divmod(extent, have)
                if rem or i >= len(flat):
                    return False
                atom = flat[i]
                if self.size[atom] > need:
                    if self.size[atom] % need:
                        return False
                    flat[i:i + 1] = self._split(atom, need)
                    atom = flat[i]
                dim.append(atom)
                have *= self.size[atom]
                i += 1
            if have != extent:
                return False
            new.append(dim)
        if i != len(flat):
            return False
        self.dims = new
        return True


def chain_atoms(root_shape: tuple[int, ...], steps: list[Step]) -> Atoms | None:
    """The atoms of a root of `root_shape` after `steps`; None if some reshape cannot be
    expressed."""
    atoms = Atoms(root_shape)
    for kind, arg in steps:
        if kind == "permute":
            atoms.permute(arg)
        elif not atoms.reshape(arg):
            return None
    return atoms


def fold_chain(root_shape: tuple[int, ...], steps: list[Step]
               ) -> tuple[tuple[int, ...], Perm] | None:
    """The chain as ``(group shape, perm)``: reshape the root to ``group shape``, permute by
    ``perm``, reshape to the chain's result. None if some reshape cannot be expressed."""
    if 0 in root_shape:
        return None
    atoms = chain_atoms(root_shape, steps)
    return None if atoms is None else group_atoms(atoms)


def cut_group(group: tuple[int, ...], perm: tuple[int, ...], edge: int
              ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """`group` (extents in memory order) and `perm` with the group that spans the element
    offset `edge` (a product of the leading extents) cut in two there; None if it cannot be."""
    acc = 1
    for g, extent in enumerate(group):
        if acc < edge < acc * extent:
            if edge % acc or (acc * extent) % edge:
                return None
            cut = (*group[:g], edge // acc, acc * extent // edge, *group[g + 1:])
            renumber = [[i] if i < g else [i, i + 1] if i == g else [i + 1] for i in perm]
            return cut, tuple(i for r in renumber for i in r)
        acc *= extent
    return group, perm


def cut_axis(shape: tuple[int, ...], axis: int, group: tuple[int, ...], perm: tuple[int, ...]
             ) -> tuple[tuple[int, ...], tuple[int, ...], int, int] | None:
    """A chain's ``(group, perm)`` (`shape` viewed as `group`, permuted by `perm`) with its
    groups cut at the edges of `shape`'s `axis`, and the range ``[s, e)`` of the groups that
    make up that axis; None if they cannot be cut."""
    outer = math.prod(shape[:axis])
    for edge in (outer, outer * shape[axis]):
        found = cut_group(group, perm, edge)
        if found is None:
            return None
        group, perm = found
    bounds = [math.prod(group[:k]) for k in range(len(group) + 1)]
    if outer not in bounds or outer * shape[axis] not in bounds:
        return None
    s, e = bounds.index(outer), bounds.index(outer * shape[axis])
    return (group, perm, s, e) if s < e else None


def group_atoms(atoms: Atoms) -> tuple[tuple[int, ...], Perm]:
    """Where `atoms` stand now as ``(group shape, perm)``: the root viewed as `group shape`
    (atoms that stay adjacent merged into one axis), permuted by `perm`."""
    order = [a for d in atoms.root for a in d]  # atoms in memory order of the root
    final = [order.index(a) for d in atoms.dims for a in d]  # positions, in result order
    groups: list[list[int]] = []  # runs of atoms that stay adjacent: merged into one axis
    for pos in final:
        if groups and groups[-1][-1] + 1 == pos:
            groups[-1].append(pos)
        else:
            groups.append([pos])
    by_start = sorted(groups, key=lambda g: g[0])
    shape = tuple(_prod(atoms.size[order[p]] for p in g) for g in by_start)
    perm = tuple(by_start.index(g) for g in groups)
    return shape, perm


def _prod(values: Iterable[int]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def folded_movement(expr: relax.Expr, root_shape: tuple[int, ...], steps: list[Step],
                    out_shape: tuple[int, ...], origin: str | None = None,
                    emit: Callable[[relax.Expr], relax.Expr] | None = None
                    ) -> tuple[relax.Expr, Cost] | None:
    """``steps`` applied to ``expr`` as at most reshape -> permute -> reshape (nested calls;
    the block builder binds them), and the run-time cost of that one permute. `origin`: the
    merged marks of the steps' permutes (`cl_validate.ir.merge_origins`), which the one left
    carries; to keep that mark, `emit` binds the reshape before it (normalizing a call
    rebuilt around a nested argument drops its span)."""
    folded = fold_chain(root_shape, steps)
    if folded is None:
        return None
    shape, perm = folded
    if is_identity(perm):
        return relax.op.reshape(expr, list(out_shape)), FREE
    if shape != root_shape:
        expr = relax.op.reshape(expr, list(shape))
        if emit is not None:
            expr = emit(expr)
    expr = mark_origin(relax.op.permute_dims(expr, list(perm)), origin)
    if tuple(shape[p] for p in perm) != out_shape:
        expr = relax.op.reshape(expr, list(out_shape))
    return expr, (1, 1)


def is_movement(value: object) -> bool:
    return op_name(value) in (PERMUTE_OP, RESHAPE_OP)


@dataclass(frozen=True)
class Chain:
    """A single-use chain of movement ops ending at some var."""

    root: relax.Expr  # what the first op reads
    steps: list[Step]
    cost: Cost  # run-time cost of the chain's permutes as they are
    internal: tuple[relax.Var, ...]  # the intermediates, which die with the chain
    origin: str | None = None  # the merged marks of its permutes (model's, importer's)


class MovementChains:
    """The movement bindings of a function and who reads them."""

    #: The ops a chain walks through (a subclass may add views that are reshapes)
    MOVES: tuple[str, ...] = (PERMUTE_OP, RESHAPE_OP)

    def __init__(self, func: relax.Function) -> None:
        self.weights = weight_derived(func)
        self.uses = use_sites(func)
        self.values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
        self.block = block_index(func)

    def _single_use_movement(self, var: relax.Expr, block: int) -> bool:
        """Read once, by a movement op, and bound in ``block`` (so what it reads is in scope
        there too)."""
        if not isinstance(var, relax.Var) or self.block.get(var) != block:
            return False
        users = self.uses.get(var, [])
        return len(users) == 1 and users[0] is not None and \
            op_name(self.values[var]) in self.MOVES

    def is_chain_end(self, var: relax.Var) -> bool:
        """Not read by exactly one movement op (which would fold this one along)."""
        users = self.uses.get(var, [])
        return not (len(users) == 1 and users[0] is not None
                    and op_name(self.values.get(users[0])) in self.MOVES)

    def chain(self, end: relax.Var,
              stop: Callable[[relax.Expr], bool] | None = None) -> Chain | None:
        """Walk back from ``end`` through movement ops read only by the chain (and not at a
        var ``stop`` accepts); None if a shape on the way is not static."""
        steps: list[Step] = []
        cost: list[Cost] = []
        internal: list[relax.Var] = []
        value = self.values[end]
        origin: str | None = None
        while True:
            src = value.args[0]
            shape, out = static_shape(src), static_shape(value)
            if shape is None or out is None or None in shape or None in out:
                return None
            axes = permute_axes(value)
            if axes is not None:
                steps.append(("permute", axes))
                origin = merge_origins(origin, origin_tag(value))
                if not is_weight_derived(src, self.weights):
                    cost.append(permute_cost(shape, axes))
            else:
                steps.append(("reshape", out))  # type: ignore[arg-type]
            if not self._single_use_movement(src, self.block[end]) or (
                    stop is not None and stop(src)):
                return Chain(src, steps[::-1], add_costs(cost), tuple(internal), origin)
            internal.append(src)
            value = self.values[src]


@mutator
class _ChainFolder(PyExprMutator):  # type: ignore[misc]
    def __init__(self, chains: MovementChains) -> None:
        super().__init__()
        self.chains = chains

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        folded = self._fold(binding.var) if is_movement(binding.value) else None
        if folded is None:
            super().visit_var_binding_(binding)
            return
        value = self.builder_.normalize(folded)
        self.builder_.emit_normalized(relax.VarBinding(binding.var, value))

    def _fold(self, var: relax.Var) -> relax.Expr | None:
        if not self.chains.is_chain_end(var):
            return None  # the end of the chain folds this one along
        chain = self.chains.chain(var)
        if chain is None or len(chain.steps) < 2:
            return None
        root_shape, out_shape = static_shape(chain.root), static_shape(var)
        folded = folded_movement(self.visit_expr(chain.root), root_shape,  # type: ignore[arg-type]
                                 chain.steps, out_shape, chain.origin,  # type: ignore[arg-type]
                                 self.builder_.emit)
        if folded is None or not folded[1] < chain.cost:
            return None
        return folded[0]


def fold_movement_chains(func: relax.Function) -> relax.Function:
    """Each maximal single-use chain of reshapes and permutes that moves data more than once
    becomes one reshape or one reshape-transpose-reshape."""
    new = _ChainFolder(MovementChains(func)).visit_expr(func)
    return func if new.same_as(func) else relax.analysis.remove_all_unused(new)


FoldMovementChains = relax_function_pass("FoldMovementChains")(fold_movement_chains)

__all__ = ["Atoms", "Chain", "FoldMovementChains", "MovementChains", "chain_atoms", "cut_axis",
           "cut_group", "fold_chain", "fold_movement_chains", "folded_movement", "group_atoms",
           "is_movement"]
