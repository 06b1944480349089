"""FoldProductViews: the views in front of a batched product folded, so attention written
with ``einsum`` reaches RaiseAttention as attention written with ``@``.

``torch.einsum("bhid,bhjd->bhij", q, k)`` imports as one batched matmul whose operands reach
it through an ``expand_dims`` of a unit axis, two permutes over five axes and a reshape (the
probabilities reach the second product the same way): the unit axes are the einsum's
bookkeeping. Read as views (``expand_dims`` and ``squeeze`` are reshapes of static shape),
such a chain is one reshape of ``(B, H, L, E)``, or one transpose when the subscripts put the
heads elsewhere (``"bqhd,bkhd->bhqk"``). Folded: chains that read a matmul's result or end
in a matmul's operand and hold the einsum's bookkeeping (an ``expand_dims``, a ``squeeze``,
a permute of size-1 axes: a Linear's own reshapes around a head split are not), from their
first view that only inserts or drops unit axes on (a head split or merge the model wrote
with ``view`` and ``transpose`` stays as written, as RaiseAttention reads it), whose
intermediates nothing else reads, and only when the fold moves no more data than the chain.
The cleanup folds every chain later anyway.
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import moves_only_unit_axes, relax_function_pass
from cl_validate.compile.passes.movement_chains import MovementChains, folded_movement
from cl_validate.ir import op_name, permute_axes, static_shape

_UNIT_VIEWS = ("relax.expand_dims", "relax.squeeze")


def _unit_view(value: relax.Expr | None) -> bool:
    """An op that only inserts or drops size-1 axes (a reshape among them)."""
    if op_name(value) in _UNIT_VIEWS:
        return True
    if op_name(value) != "relax.reshape":
        return False
    src, out = static_shape(value.args[0]), static_shape(value)  # type: ignore[union-attr]
    return src is not None and out is not None and src != out and \
        [d for d in src if d != 1] == [d for d in out if d != 1]


def _bookkeeping(value: relax.Expr | None) -> bool:
    """An ``expand_dims``, a ``squeeze``, or a permute that moves only size-1 axes: what an
    einsum adds around its product, and no model's own head split or merge does."""
    axes = permute_axes(value)
    if axes is not None:
        shape = static_shape(value.args[0])  # type: ignore[union-attr]
        return shape is not None and None not in shape and \
            moves_only_unit_axes(shape, axes)  # type: ignore[arg-type]
    return op_name(value) in _UNIT_VIEWS


class _Views(MovementChains):
    """Movement chains that also walk through ``expand_dims`` and ``squeeze``."""

    MOVES = (*MovementChains.MOVES, *_UNIT_VIEWS)


@mutator
class _Folder(PyExprMutator):  # type: ignore[misc]
    def __init__(self, chains: _Views, read_by_product: set[relax.Var]) -> None:
        super().__init__()
        self.chains, self.read_by_product = chains, read_by_product
        self.folded = 0

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        folded = self._fold(binding.var) if op_name(binding.value) in _Views.MOVES and \
            self.chains.is_chain_end(binding.var) else None
        if folded is None:
            super().visit_var_binding_(binding)
            return
        self.folded += 1
        self.builder_.emit_normalized(relax.VarBinding(binding.var,
                                                       self.builder_.normalize(folded)))

    def _fold(self, var: relax.Var) -> relax.Expr | None:
        """The chain ending at `var` from its first unit view on, folded, when it reads a
        product's result or feeds a product's operand."""
        chain = self.chains.chain(var)
        if chain is None:
            return None
        views = [self.chains.values[v] for v in (var, *chain.internal)]
        if not any(_bookkeeping(v) for v in views):
            return None  # a head split or merge as the model wrote it: RaiseAttention reads it
        units = [v for v in (var, *chain.internal)
                 if _unit_view(self.chains.values[v]) or _bookkeeping(self.chains.values[v])]
        first = self.chains.values[units[-1]].args[0]  # type: ignore[attr-defined]
        chain = self.chains.chain(var, stop=lambda src: src.same_as(first))
        root_value = self.chains.values.get(chain.root) if chain is not None else None
        if chain is None or len(chain.steps) < 2 or not (
                var in self.read_by_product or op_name(root_value) == "relax.matmul"):
            return None
        root, out = static_shape(chain.root), static_shape(var)
        folded = folded_movement(self.visit_expr(chain.root), root, chain.steps,  # type: ignore[arg-type]
                                 out, chain.origin, self.builder_.emit)  # type: ignore[arg-type]
        if folded is None or chain.cost < folded[1]:
            return None
        return folded[0]


def fold_product_views(func: relax.Function) -> relax.Function:
    """Each chain of views from a unit-axis view on that reads a matmul's result or ends in
    a matmul's operand, as at most one reshape-transpose-reshape."""
    chains = _Views(func)
    read_by_product = {a for value in chains.values.values()
                       if op_name(value) == "relax.matmul"
                       for a in value.args if isinstance(a, relax.Var)}  # type: ignore[attr-defined]
    folder = _Folder(chains, read_by_product)
    new = folder.visit_expr(func)
    # nothing folded: the function as it was (dead bindings included: later passes see the
    # import's own program)
    return relax.analysis.remove_all_unused(new) if folder.folded else func


FoldProductViews = relax_function_pass("FoldProductViews")(fold_product_views)

__all__ = ["FoldProductViews", "fold_product_views"]
