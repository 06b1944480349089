"""CancelPermutes: fold chains of ``permute_dims`` and drop the ones that cancel.

ConvertLayout wraps every op it cannot convert in a transpose pair, so after it (and after our
own layout sinking) the IR is full of ``permute_dims(permute_dims(x, p), inverse(p))``. TVM's
OptimizeLayoutTransform only looks at ``layout_transform``, so nothing else removes these, and
every one of them is a real kernel at run time.

The rewrite is local to the consumer: ``permute_dims(t, q)`` where ``t = permute_dims(x, p)``
becomes ``permute_dims(x, p∘q)`` (or just ``x`` when ``p∘q`` is the identity). The intermediate
``t`` is left alone; it disappears only if nothing else reads it. So a shared intermediate is
never recomputed and a consumer never does more than the one permute it did before.
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import Perm, compose, relax_function_pass
from cl_validate.ir import is_identity, mark_origin, merge_origins, origin_tag, permute_axes


def _rebind(builder: relax.BlockBuilder, var: relax.Var, value: relax.Expr) -> None:
    """Bind ``var`` again, to a new value of the same type (keeps names and output vars)."""
    builder.emit_normalized(relax.VarBinding(var, builder.normalize(value)))


@mutator
class _PermuteFolder(PyExprMutator):  # type: ignore[misc]
    """Forward walk: every permute is folded onto the root of its permute chain as it is
    re-emitted, so one look-up through the builder is always enough. A permute equal to one
    already emitted in scope (same root, same axes: ConvertLayout emits one per consumer of a
    graph input) is replaced by that one."""

    def __init__(self) -> None:
        super().__init__()
        self.emitted: dict[tuple[relax.Expr, Perm], relax.Var] = {}
        self.block_vars: set[relax.Var] = set()  # the dataflow vars in scope

    def _enter_block(self) -> None:
        # Dataflow vars of an earlier block are out of scope from here on.
        self.block_vars = set()
        self.emitted = {k: v for k, v in self.emitted.items()
                        if not isinstance(v, relax.DataflowVar)
                        and not isinstance(k[0], relax.DataflowVar)}

    def visit_dataflow_block_(self, block: relax.DataflowBlock) -> relax.BindingBlock:
        self._enter_block()
        return super().visit_dataflow_block_(block)

    def visit_binding_block_(self, block: relax.BindingBlock) -> relax.BindingBlock:
        self._enter_block()
        return super().visit_binding_block_(block)

    def _in_scope(self, expr: relax.Expr) -> bool:
        return not isinstance(expr, relax.DataflowVar) or expr in self.block_vars

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        self.block_vars.add(binding.var)
        axes = permute_axes(binding.value)
        if axes is None:
            super().visit_var_binding_(binding)
            return
        root = self.visit_expr(binding.value.args[0])
        perm = axes
        origin = origin_tag(binding.value)  # the folded permute: marked by all its parts
        while isinstance(root, relax.Var):
            inner = self.lookup_binding(root)
            inner_axes = permute_axes(inner)
            if inner_axes is None or not self._in_scope(inner.args[0]):
                break
            perm = compose(inner_axes, perm)
            origin = merge_origins(origin, origin_tag(inner))
            root = inner.args[0]
        same = self.emitted.get((root, perm))
        if is_identity(perm) or same is not None:
            target = root if same is None else same
            if isinstance(binding.var, relax.DataflowVar):
                self.set_var_remap(binding.var, target)
            else:  # an output var must stay defined, even if only as an alias
                _rebind(self.builder_, binding.var, target)
            return
        if perm == axes and root.same_as(binding.value.args[0]):
            super().visit_var_binding_(binding)
        else:
            _rebind(self.builder_, binding.var,
                    mark_origin(relax.op.permute_dims(root, list(perm)), origin))
        self.emitted[(root, perm)] = self.visit_expr(binding.var)  # as re-emitted


def fold_permutes(func: relax.Function) -> relax.Function:
    """Permute chains folded to one permute each, identities removed, dead bindings dropped."""
    new = _PermuteFolder().visit_expr(func)
    if new.same_as(func):
        return func
    return relax.analysis.remove_all_unused(new)


CancelPermutes = relax_function_pass("CancelPermutes")(fold_permutes)
CancelPermutes.__doc__ = """A pass: ``permute_dims`` of a ``permute_dims`` becomes one permute of
the chain's root, and an identity permute (including an inverse pair) becomes its input."""

__all__ = ["CancelPermutes", "fold_permutes"]
