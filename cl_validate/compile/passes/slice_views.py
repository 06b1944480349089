"""ReadSlicesAtSource: a transpose that undoes the transposes before a slice reads the source.

Attention inside conv nets (YOLOv10/11's PSA, and any block that views a conv output into
heads) reads ``qkv(x).view(B, heads, parts, H·W).split(...)`` and views one part back into a
map for a positional conv, ``v.reshape(B, C, H, W)``. In NHWC the conv output is transposed to
NCHW for the view (the attention's batched matmuls need the heads ahead of the pixels), and
the part that goes back to a map is transposed back to NHWC: two transposes that cancel, but
with views and a slice between them that q and k share, so neither CancelPermutes nor
FoldMovementChains (single-use chains of reshapes and permutes) sees it.

The walk: from a run-time ``permute_dims`` back through reshapes, permutes and slices of one
axis (a ``split``'s part, a unit-stride ``strided_slice``), whatever else reads them, to a value
that is none of these (the root). The atom algebra of `movement_chains` tracks every axis as
atoms of the root; a slice of an axis in whole blocks of its inner atoms is a slice of its
outer atom, which is a slice of the root viewed as its atoms. When the chain then keeps the
root's atoms in their order, the transpose becomes ``reshape -> strided_slice -> reshape`` of
the root: one run-time transpose fewer and none added. The intermediates stay for their other
readers (q and k still need the heads ahead of the pixels). Pure data movement: exact.
"""

from __future__ import annotations

from collections.abc import Sequence

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._util import permute_cost, relax_function_pass
from cl_validate.compile.passes.movement_chains import (
    RESHAPE_OP,
    Atoms,
    MovementChains,
    group_atoms,
)
from cl_validate.ir import (
    bindings,
    is_identity,
    is_weight_derived,
    op_name,
    permute_axes,
    static_shape,
    strided_slice_args,
)

#: ("permute", perm), ("reshape", shape) or ("slice", (axis, begin, end)), in data-flow order.
Step = tuple[str, tuple[int, ...]]
#: One slice of the root viewed as its atoms: (atom shape, axis, begin, end).
Cut = tuple[tuple[int, ...], int, int, int]


def fold_sliced(root_shape: tuple[int, ...], steps: Sequence[Step]) -> list[Cut] | None:
    """The slices that compute `steps` from the root without a transpose, in order (each on
    the result of the one before, viewed as its atoms), or None when the chain needs a
    transpose or a step cannot be expressed on atoms."""
    if 0 in root_shape:
        return None
    atoms = Atoms(root_shape)
    cuts: list[Cut] = []
    for kind, arg in steps:
        if kind == "permute":
            atoms.permute(arg)
        elif kind == "reshape":
            if not atoms.reshape(arg):
                return None
        else:
            axis, begin, end = arg
            dim = atoms.dims[axis]
            if not dim:  # a size-1 axis: the only slice is all of it
                continue
            inner = 1
            for a in dim[1:]:
                inner *= atoms.size[a]
            outer = dim[0]
            if begin % inner or end % inner or end <= begin:
                return None
            lo, hi = begin // inner, end // inner
            if (lo, hi) == (0, atoms.size[outer]):
                continue
            order = [a for d in atoms.root for a in d]
            cuts.append((tuple(atoms.size[a] for a in order), order.index(outer), lo, hi))
            atoms.size[outer] = hi - lo
            if hi - lo == 1:  # a size-1 atom is no atom: drop it everywhere
                for dims in (atoms.root, atoms.dims):
                    for d in dims:
                        if outer in d:
                            d.remove(outer)
    if not cuts:
        return None  # nothing sliced: a plain chain, FoldMovementChains' business
    _, perm = group_atoms(atoms)
    return cuts if is_identity(perm) else None


class _Walk(MovementChains):
    """The movement and slice bindings of a function, walked backwards from a permute."""

    def step(self, value: relax.Expr) -> tuple[relax.Expr, list[Step]] | None:
        """What `value` reads and the steps from it to `value`; None if `value` is not one of
        the ops the walk goes through."""
        axes = permute_axes(value)
        if axes is not None:
            return value.args[0], [("permute", axes)]
        name = op_name(value)
        if name == RESHAPE_OP:
            out = static_shape(value)
            if out is None or None in out:
                return None
            return value.args[0], [("reshape", out)]  # type: ignore[list-item]
        if name == "relax.strided_slice":
            return self._strided_slice(value)
        if isinstance(value, relax.TupleGetItem) and isinstance(value.tuple_value, relax.Var):
            split = self.values.get(value.tuple_value)
            if op_name(split) == "relax.split":
                return self._split_part(split, int(value.index))  # type: ignore[arg-type]
        return None

    @staticmethod
    def _strided_slice(call: relax.Call) -> tuple[relax.Expr, list[Step]] | None:
        data = call.args[0]
        shape = static_shape(data)
        tuples = strided_slice_args(call)
        if shape is None or None in shape or tuples is None:
            return None
        try:
            axes, begin, end, *strides = ([int(v) for v in t] for t in tuples)
        except (TypeError, ValueError):
            return None
        if any(s != 1 for s in (strides[0] if strides else [])):
            return None
        steps: list[Step] = []
        for axis, b, e in zip(axes, begin, end, strict=True):
            extent = shape[axis]
            assert extent is not None
            b = min(max(b + extent if b < 0 else b, 0), extent)
            e = min(max(e + extent if e < 0 else e, 0), extent)
            steps.append(("slice", (axis % len(shape), b, e)))
        return data, steps

    @staticmethod
    def _split_part(call: relax.Call, index: int) -> tuple[relax.Expr, list[Step]] | None:
        data = call.args[0]
        shape = static_shape(data)
        if shape is None or None in shape:
            return None
        axis = int(call.attrs.axis) % len(shape)
        extent = shape[axis]
        assert extent is not None
        sections = call.attrs.indices_or_sections
        if isinstance(sections, Sequence) or hasattr(sections, "__len__"):
            bounds = [0, *(int(i) for i in sections), extent]  # type: ignore[union-attr]
        else:
            n = int(sections)
            if n <= 0 or extent % n:
                return None
            bounds = [extent // n * i for i in range(n + 1)]
        if not 0 <= index < len(bounds) - 1:
            return None
        return data, [("slice", (axis, bounds[index], min(bounds[index + 1], extent)))]

    def roots(self, permute: relax.Var) -> list[tuple[relax.Expr, list[Step]]]:
        """Every value the walk passes from `permute` back, furthest first, each with the
        steps from it to `permute` (in data-flow order)."""
        out: list[tuple[relax.Expr, list[Step]]] = []
        steps: list[Step] = []
        value = self.values[permute]
        home = self.block[permute]
        while True:
            got = self.step(value)
            if got is None:
                break
            src, more = got
            steps = more + steps
            out.append((src, list(steps)))
            if not isinstance(src, relax.Var) or self.block.get(src) != home:
                break  # a parameter, or bound in another block: a root, not walked through
            value = self.values[src]
        return out[::-1]


@mutator
class _SliceReader(PyExprMutator):  # type: ignore[misc]
    def __init__(self, walk: _Walk) -> None:
        super().__init__()
        self.walk = walk

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        axes = permute_axes(binding.value)
        src = binding.value.args[0] if axes is not None else None
        shape = static_shape(src)
        if axes is None or shape is None or None in shape or permute_cost(shape, axes) != (1, 1) \
                or is_weight_derived(src, self.walk.weights):
            super().visit_var_binding_(binding)
            return
        for root, steps in self.walk.roots(binding.var):
            root_shape = static_shape(root)
            if root_shape is None or None in root_shape:
                continue
            cuts = fold_sliced(root_shape, steps)  # type: ignore[arg-type]
            if cuts is None:
                continue
            expr = self.visit_expr(root)
            for atom_shape, axis, lo, hi in cuts:
                if tuple(static_shape(expr) or ()) != atom_shape:
                    expr = self.builder_.emit(relax.op.reshape(expr, list(atom_shape)))
                expr = self.builder_.emit(relax.op.strided_slice(expr, [axis], [lo], [hi]))
            value = self.builder_.normalize(relax.op.reshape(expr, list(static_shape(
                binding.var))))  # type: ignore[arg-type]
            self.builder_.emit_normalized(relax.VarBinding(binding.var, value))
            return
        super().visit_var_binding_(binding)


def read_slices_at_source(func: relax.Function) -> relax.Function:
    """Every run-time transpose whose chain of views and slices back to some value keeps that
    value's order becomes a slice of it (see the module docstring)."""
    if not any(permute_axes(b.value) is not None for b in bindings(func)):
        return func
    new = _SliceReader(_Walk(func)).visit_expr(func)
    return func if new.same_as(func) else relax.analysis.remove_all_unused(new)


ReadSlicesAtSource = relax_function_pass("ReadSlicesAtSource")(read_slices_at_source)

__all__ = ["ReadSlicesAtSource", "fold_sliced", "read_slices_at_source"]
