"""FoldFlattenIntoLinear: the transpose before a flatten → Linear moves into the Linear's weight.

VGG-style classifiers flatten a spatial feature map straight into a Linear layer
(``torch.flatten(x, 1)`` on N×C×H×W with H·W > 1). The flatten orders features C-major, so in
NHWC the graph needs ``permute_dims(y, [0, 3, 1, 2])`` before the reshape: a run-time
transpose of the whole feature map, even when the model's input is already NHWC. But the order
of the features only decides which weight row meets which feature: flattening ``y`` as it is
and permuting the weight's rows the same way computes the same products. The weight is a
constant, so the row permute is folded once (``fold_params``) and costs nothing at run time.

Matched, all of it checked (else the IR is left as it was)::

    t = permute_dims(y, p)         # run time; read only by r
    r = reshape(t, (N, K))         # the flatten; read only by matmuls with weight operands
                                   # N: leading axes p keeps in place (a batch; a batch and
                                   # tokens, as a Conformer's ``(B, T, C·F)`` after its conv
                                   # subsampling), or 1; K: the others
    o = matmul(r, W)               # W (K, M) derived from weights only

becomes ``matmul(reshape(y, (N, K)), W')`` with ``W'`` the rows of ``W`` in ``y``'s order.
Between the flatten and the matmul a per-tensor quantize/dequantize pair may stand (a
quantized classifier's input edge): it maps each feature on its own, so it is the same in
either order.

Not bit-exact, and therefore a stage of its own rather than one of the (exact) cleanup passes:
the dot products sum the same products in another order, so results differ by float rounding
only, as with FoldScaleShift.
"""

from __future__ import annotations

import math

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import inverse, relax_function_pass
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

MATMUL = "relax.matmul"
RESHAPE = "relax.reshape"


#: flatten → (the data before the permute, the permute's axes, how many leading axes are rows)
Flattens = dict[relax.Var, tuple[relax.Expr, tuple[int, ...], int]]


def _flatten_source(func: relax.Function) -> tuple[Flattens, dict[relax.Var, relax.Var]]:
    """Each flatten ``r`` that qualifies, mapped to (``y``, ``p``) of the permute before it
    and its row axes; and each matmul that reads one, mapped to that flatten."""
    uses = use_sites(func)
    values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    derived = weight_derived(func)
    found: Flattens = {}
    matmuls: dict[relax.Var, relax.Var] = {}
    for r, value in values.items():
        if op_name(value) != RESHAPE or not isinstance(value.args[0], relax.Var):
            continue
        t = value.args[0]
        axes = permute_axes(values.get(t))
        t_shape, r_shape = known_shape(t), known_shape(r)
        if (axes is None or is_identity(axes) or t_shape is None or r_shape is None
                or len(r_shape) < 2 or uses.get(t) != [r]):
            continue
        lead = _row_axes(axes, t_shape, r_shape)
        if lead is None:
            continue
        y = values[t].args[0]
        if is_weight_derived(y, derived):
            continue
        readers = matmul_readers(r, uses, values, derived)
        if readers is None:
            continue
        found[r] = (y, axes, lead)
        matmuls.update((m, r) for m in readers)
    return found, matmuls


def _row_axes(p: tuple[int, ...], t_shape: tuple[int, ...], r_shape: tuple[int, ...]
              ) -> int | None:
    """How many leading axes of ``t`` make the flatten's rows: axes ``p`` keeps in place
    whose sizes multiply to the rows of ``r`` (all but its last axis: a batch, or a batch
    and tokens, ``(B, T, C·F)``), the rest merging into its features; None when no such
    split exists. Zero for a single row (batch 1, whatever the chain before merged)."""
    rows = math.prod(r_shape[:-1])
    found = None
    for m in range(len(p) + 1):
        if m and p[m - 1] != m - 1:
            break
        if math.prod(t_shape[:m]) == rows and math.prod(t_shape[m:]) == r_shape[-1]:
            found = m  # the last: a size-1 batch axis in place is a row axis, not a feature
    return found


_PER_TENSOR = ("relax.quantize", "relax.dequantize")


def _per_tensor(value: relax.Expr | None) -> bool:
    """A quantize/dequantize with one scale and zero point for the whole tensor."""
    return op_name(value) in _PER_TENSOR and all(
        (known_shape(a) or (1,)) in ((), (1,)) for a in value.args[1:])  # type: ignore[union-attr]


def matmul_readers(r: relax.Var, uses: dict[relax.Var, list[relax.Var | None]],
                    values: dict[relax.Var, relax.Expr], derived: set[relax.Var]
                    ) -> list[relax.Var] | None:
    """The matmuls by a weight that read `r`, directly or through per-tensor quantize and
    dequantize and reshapes of its rows; None when anything else reads it on the way."""
    found: list[relax.Var] = []
    frontier = [r]
    while frontier:
        v = frontier.pop()
        readers = uses.get(v, [])
        if not readers:
            return None
        for u in readers:
            if u is None:
                return None
            value = values.get(u)
            if _reads_as_lhs(value, v, derived):
                found.append(u)
            elif ((_per_tensor(value) or _rows_view(value, v))
                  and value.args[0].same_as(v)):  # type: ignore[union-attr]
                frontier.append(u)
            else:
                return None
    return found


def _rows_view(value: relax.Expr | None, v: relax.Var) -> bool:
    """A reshape of `v` that regroups its rows only (``(1, T, K)`` to ``(T, K)``, as the
    import writes a Linear on tokens): each row keeps its K features in their order."""
    if op_name(value) != RESHAPE:
        return False
    before, after = known_shape(v), known_shape(value)
    return (before is not None and after is not None and len(before) >= 2
            and len(after) >= 2 and before[-1] == after[-1])


def _reads_as_lhs(value: relax.Expr | None, r: relax.Var, derived: set[relax.Var]) -> bool:
    """``value`` is ``matmul(r, W)`` with a 2-D weight-derived ``W`` (and ``r`` not also W)."""
    if not isinstance(value, relax.Call) or op_name(value) != MATMUL:
        return False
    lhs, rhs = value.args[0], value.args[1]
    return (lhs.same_as(r) and not rhs.same_as(r) and ndim(rhs) == 2
            and is_weight_derived(rhs, derived))


@mutator
class _Folder(PyExprMutator):  # type: ignore[misc]
    def __init__(self, flattens: Flattens, matmuls: dict[relax.Var, relax.Var]) -> None:
        super().__init__()
        self.flattens = flattens
        self.matmuls = matmuls  # each matmul reading a flatten -> that flatten

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value, var = binding.value, binding.var
        if var in self.flattens:  # the flatten of the unpermuted data: same shape
            y, _, _ = self.flattens[var]
            new = relax.op.reshape(self.visit_expr(y), list(known_shape(var) or ()))
        elif var in self.matmuls:  # the weight's rows in that data's order
            y, p, lead = self.flattens[self.matmuls[var]]  # lead: row axes, no features
            r_shape = known_shape(self.matmuls[var])  # (rows..., K)
            y_shape = known_shape(y)
            assert r_shape is not None and y_shape is not None
            feature_shape = [y_shape[i] for i in p[lead:]]  # the flatten's axes, its order
            w = self.visit_expr(value.args[1])
            out = int(known_shape(w)[1])  # type: ignore[index]
            inv = inverse(p)
            rows = relax.op.reshape(w, [*feature_shape, out])
            # row axis j-lead of ``rows`` is y axis p[j]; put them in y's order
            order = [inv[k] - lead for k in range(lead, len(p))] + [len(p) - lead]
            moved = relax.op.reshape(relax.op.permute_dims(rows, order), [r_shape[-1], out])
            new = relax.Call(value.op, [self.visit_expr(value.args[0]), moved], value.attrs,
                             value.ty_args)
        else:
            super().visit_var_binding_(binding)
            return
        self.builder_.emit_normalized(relax.VarBinding(var, self.builder_.normalize(new)))


def fold_flatten_into_linear(func: relax.Function) -> relax.Function:
    """Every qualifying permute → flatten → matmul-by-weight reads the unpermuted data and a
    row-permuted weight (see the module docstring)."""
    flattens, matmuls = _flatten_source(func)
    if not flattens:
        return func
    return relax.analysis.remove_all_unused(_Folder(flattens, matmuls).visit_expr(func))


FoldFlattenIntoLinear = relax_function_pass("FoldFlattenIntoLinear")(fold_flatten_into_linear)

__all__ = ["FoldFlattenIntoLinear", "fold_flatten_into_linear", "matmul_readers"]
