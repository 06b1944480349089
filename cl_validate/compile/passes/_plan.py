"""What a layout-carrying rewrite of one binding is: the `Plan` SinkPermutes applies.

Shared by the handlers in `_layout_ops` (elementwise ops, reductions, pooling, ...) and
`_movement_ops` (reshape, squeeze, broadcast, pad, matmul): each answers, for one call, how
it runs on its operands' permuted forms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import tvm
from tvm import relax

from cl_validate.compile.passes._util import FREE, Cost, Perm

#: perm_of(expr): the permutation p with ``expr == permute_dims(w, p)`` for an available ``w``.
PermOf = Callable[[relax.Expr], Perm | None]


@dataclass(frozen=True)
class Operand:
    """A tensor operand the rewritten call reads, and the layout it must be read in."""

    expr: relax.Expr
    perm: Perm


@dataclass(frozen=True)
class Plan:
    """How to compute a binding in a permuted layout: the result ``w`` satisfies
    ``original == permute_dims(w, out_perm)`` (for a tuple: every field does)."""

    out_perm: Perm
    operands: tuple[Operand, ...]
    rebuild: Callable[[Sequence[relax.Expr]], relax.Expr]
    is_tuple: bool = False  # a tuple result is never materialized in the old layout
    cost: Cost = FREE  # run-time transforms the rebuilt expression itself contains
    replaces: Cost = FREE  # run-time transforms that die with the old binding
    internal: tuple[relax.Var, ...] = ()  # bindings that die with it (read by it alone)


def with_fields(attrs: tvm.ir.Attrs, **changes: object) -> tvm.ir.Attrs:
    """A copy of an attrs node with some fields replaced (attrs nodes are immutable)."""
    info = type(attrs).__tvm_ffi_type_info__
    fields = {f.name: getattr(attrs, f.name) for f in info.fields}
    fields.update(changes)
    return tvm.ir.make_node(info.type_key, **fields)


def remake(call: relax.Call, args: Sequence[relax.Expr],
           attrs: tvm.ir.Attrs | None = None) -> relax.Call:
    """The same op on new arguments (and attributes, if given)."""
    return relax.Call(call.op, list(args), call.attrs if attrs is None else attrs,
                      call.ty_args)
