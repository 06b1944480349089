"""FoldPermuteIntoColumns: a transpose of a product's columns moves into the weight's columns.

Dynamic convolutions compute their kernel at run time from a constant bank: CondConv and
DynamicConv mix K experts per sample (``(routing @ bank).view(B·O, C, k, k)``), hypernetworks
and ODConv likewise. In NHWC the convolution wants that kernel as OHWI, so ConvertLayout puts
``permute_dims(w, [0, 2, 3, 1])`` on the computed kernel: a run-time transform on every call.
But the product's columns are the bank's columns: their order is only which column of the
bank meets which output element. Permuting the bank's columns once (a constant, folded by
``fold_params``) and viewing the product in the new order computes the same values.

Matched, all of it checked (else the IR is left as it was)::

    m = matmul(A, W)          # W (K, N) derived from weights only; A computed at run time
    v = reshape(m, S)         # views only, each read only by the next
    t = permute_dims(v, p)    # p keeps the leading axes of S in place, those that hold every
                              # row of m (and maybe the columns' outermost factor G)

becomes ``reshape(matmul(A, W'), shape(t))`` with ``W'`` the columns of ``W`` viewed as
``(G, S[j:])``, permuted by ``p`` and flattened again. Exact: every output element is the same
dot product; only where it is stored changes.
"""

from __future__ import annotations

import math

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import relax_function_pass
from cl_validate.ir import (
    bindings,
    is_identity,
    is_weight_derived,
    known_shape,
    ndim,
    op_name,
    permute_axes,
    use_sites,
    weight_derived,
)

_VIEWS = ("relax.reshape", "relax.squeeze", "relax.expand_dims")


def _kept(p: tuple[int, ...], shape: tuple[int, ...], rows: int) -> int | None:
    """The most leading axes `p` keeps in place whose sizes multiply to a multiple of `rows`
    (the rows, then a factor of the columns); None when the moved axes would take rows."""
    found = None
    for j in range(len(p) + 1):
        if j and p[j - 1] != j - 1:
            break
        if math.prod(shape[:j]) % rows == 0:
            found = j
    return found


#: permute var -> (the matmul, the axes kept, the column factor G)
Found = dict[relax.Var, tuple[relax.Call, int, int]]


def _find(func: relax.Function) -> Found:
    values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    uses = use_sites(func)
    derived = weight_derived(func)
    found: Found = {}
    for t, value in values.items():
        p = permute_axes(value)
        if p is None or is_identity(p) or not isinstance(value.args[0], relax.Var):
            continue
        v = value.args[0]
        shape = known_shape(v)
        m: relax.Expr = v
        while isinstance(m, relax.Var) and op_name(values.get(m)) in _VIEWS and len(
                uses.get(m, [])) == 1:
            m = values[m].args[0]  # type: ignore[union-attr]
        mv = values.get(m) if isinstance(m, relax.Var) else None
        if (shape is None or op_name(mv) != "relax.matmul" or len(uses.get(m, [])) != 1
                or len(uses.get(v, [])) != 1):
            continue
        a, w = mv.args  # type: ignore[union-attr]
        m_shape = known_shape(m)
        if (m_shape is None or ndim(w) != 2 or not is_weight_derived(w, derived)
                or is_weight_derived(a, derived)):
            continue
        rows = math.prod(m_shape[:-1])
        j = _kept(p, shape, rows)
        if j is None or j == len(p):
            continue
        found[t] = (mv, j, math.prod(shape[:j]) // rows)  # type: ignore[assignment]
    return found


@mutator
class _Folder(PyExprMutator):  # type: ignore[misc]
    def __init__(self, found: Found) -> None:
        super().__init__()
        self.found = found

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if binding.var not in self.found:
            super().visit_var_binding_(binding)
            return
        value, j, g = self.found[binding.var]
        p = permute_axes(binding.value)
        shape = known_shape(binding.value.args[0])
        assert p is not None and shape is not None
        w = value.args[1]
        k, n = known_shape(w)  # type: ignore[misc]
        # the weight's columns as (G, S[j:]), moved as p moves S[j:], flattened again
        cols = relax.op.reshape(self.visit_expr(w), [k, g, *shape[j:]])
        order = [0, 1, *[2 + p[i] - j for i in range(j, len(p))]]
        moved = relax.op.reshape(relax.op.permute_dims(cols, order), [k, n])
        product = self.builder_.emit(relax.Call(value.op, [self.visit_expr(value.args[0]),
                                                           moved], value.attrs,
                                                value.ty_args))
        new = relax.op.reshape(product, list(known_shape(binding.var) or ()))
        self.builder_.emit_normalized(relax.VarBinding(binding.var,
                                                       self.builder_.normalize(new)))


def fold_permute_into_columns(func: relax.Function) -> relax.Function:
    """Every qualifying permute of a product's columns is a permute of its weight's columns
    (see the module docstring)."""
    found = _find(func)
    if not found:
        return func
    return relax.analysis.remove_all_unused(_Folder(found).visit_expr(func))


FoldPermuteIntoColumns = relax_function_pass("FoldPermuteIntoColumns")(
    fold_permute_into_columns)

__all__ = ["FoldPermuteIntoColumns", "fold_permute_into_columns"]
