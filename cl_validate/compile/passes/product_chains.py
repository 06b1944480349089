"""Which transposes StridedProducts (a later stage) will read or write through: SinkPermutes'
view of it.

A float product reads its operands through the transposes and views before it, and a
pointwise convolution writes its result through the transpose after it, in one kernel
(StridedProducts): such a transpose costs nothing where it stands. SinkPermutes, which moves
transposes down the ops that have no layout of their own, must count them so:

* *written*: moved away from a product that writes through it, a transpose becomes a real
  one further down (YOLOv5's detect head: a 1x1 convolution, its output viewed as (batch,
  anchors, outputs, y, x) and permuted, the boxes decoded, the levels concatenated: one
  transpose per level fused into the concat, where none was needed).
* *read*: a transpose carried down to a matmul's operand is read by the matmul, so the
  region that carries it there gains the transpose it removes (EfficientViT's linear
  attention: q, k and v split from one transposed projection, a ReLU and a pad between them
  and their matmuls; carried past those, the three transposes are the matmuls' reads).

`read_by_product` is the estimate a region is chosen by; `cost_after_products` is exact
(StridedProducts' own `find`, with the target's acceptance): a round of SinkPermutes is kept
only if it lowers that cost.

Quantized products (an operand dequantized) are not StridedProducts': IntegerCompute
computes them in integers, and their transposes stay transposes. A matmul's *write* is left
out: on the held-out architectures counting those transposes free changed nothing in float,
and in a PT2E-quantized DaViT (its channel attention's float products) it left 10 transforms
where moving them left 7 (the products did not write through them in the end).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import tvm
from tvm import relax

from cl_validate.compile.passes._layout_ops import LAYOUT_AGNOSTIC_OPS
from cl_validate.compile.passes._util import Cost, Perm, inverse, rebind, runtime_cost
from cl_validate.compile.passes.gpu_products import gpu_schedules
from cl_validate.compile.passes.strided_products import POINTWISE, READS, VIEWS, find
from cl_validate.ir import (
    bindings,
    float_typed,
    is_identity,
    is_weight_derived,
    mark_origin,
    ndim,
    op_name,
    origin_tag,
    permute_axes,
    static_shape,
    tensor_type,
    use_sites,
    weight_derived,
)

#: ops between a product and the transpose after it: a bias or a scale and a view
_HOPS = 3
#: views between a transpose and the matmul that reads it (a broadcast, a batch reshape)
_READ_HOPS = 4
#: layout-agnostic ops between a matmul and a transpose it could write through
_WRITE_HOPS = 6

Accept = Callable[[Any], bool]


def accept_for(target: tvm.target.Target | None) -> Accept:
    """The products StridedProducts takes on `target` (every one `find` finds without one)."""
    return (lambda _p: True) if target is None else gpu_schedules(target)


def _dequantized(expr: Any, values: Mapping[Any, Any]) -> bool:
    value: Any = values.get(expr)
    while op_name(value) in READS:  # views, permutes, broadcasts
        value = values.get(value.args[0])
    return op_name(value) == "relax.dequantize"


def written_seeds(func: relax.Function, sources: Mapping[relax.Var, relax.Expr],
                  values: Mapping[Any, Any], uses: Mapping[Any, list[Any]],
                  accept: Accept = lambda _p: True) -> set[relax.Var]:
    """The transposes in `sources` (each bound to ``permute_dims`` of its source) that a float
    product writes through; `values` binds every var of `func`, `uses` says who reads it."""

    def product_before(cur: Any) -> Any:
        for _ in range(_HOPS):
            value: Any = values.get(cur)
            if op_name(value) in POINTWISE:
                return None if any(_dequantized(a, values) for a in value.args) else cur
            if value is None or len(uses.get(cur, [])) != 1:
                return None
            cur = next((a for a in getattr(value, "args", ()) if a in values), None)
        return None

    near = {t: p for t, src in sources.items() if (p := product_before(src)) is not None}
    written: set[relax.Var] = set()
    for product in find(func, accept, only=set(near.values())) if near else ():
        mine = {*product.absorbed, product.final}
        written |= {t for t, p in near.items() if t in mine and p in mine}
    return written


def read_by_product(var: Any, values: Mapping[Any, Any], uses: Mapping[Any, list[Any]]) -> bool:
    """`var`, put into another layout, would be read by a float matmul through that transpose
    (`var`'s one reader a chain of views and broadcasts, each read once, ending in the
    matmul): the transpose would be the matmul's read, not a kernel. An estimate: the round
    that relies on it is kept only if `cost_after_products` agrees."""
    cur = var
    for _ in range(_READ_HOPS):
        readers = uses.get(cur, [])
        if len(readers) != 1 or readers[0] is None:
            return False
        value: Any = values.get(readers[0])
        if op_name(value) == "relax.matmul":
            return not any(_dequantized(a, values) for a in value.args)
        if op_name(value) not in READS:
            return False
        cur = readers[0]
    return False


def cost_after_products(func: relax.Function, accept: Accept) -> Cost:
    """What `func`'s run-time permutes cost once StridedProducts has taken those it reads or
    writes through (permutes of weights fold away)."""
    return runtime_cost(func, _taken(func, accept))


def _taken(func: relax.Function, accept: Accept) -> set[relax.Var]:
    """The bindings StridedProducts replaces in `func` (its products' chains)."""
    taken: set[relax.Var] = set()
    for product in find(func, accept):
        taken |= {*product.absorbed, product.final}
    return taken


def write_sites(func: relax.Function, accept: Accept) -> list[tuple[relax.Var, Perm, str | None]]:
    """Where a float matmul could write its result through a transpose that SinkPermutes
    would then carry down to a transpose of the model's, still a kernel (StridedProducts
    takes no product's chain through it), a few layout-agnostic ops below: EfficientViT's
    ``out[..., :-1] / out[..., -1:]`` between its matmul and ``transpose(-1, -2)``. Each:
    the matmul's result (or its one view and rounding, `_written_value`), a layout to try,
    the transpose's origin mark."""
    values = {b.var: b.value for b in bindings(func)}
    uses = use_sites(func)
    taken, weights = _taken(func, accept), weight_derived(func)
    sites: list[tuple[relax.Var, Perm, str | None]] = []
    swaps: list[tuple[relax.Var, Perm, str | None]] = []
    for var, value in values.items():
        if op_name(value) != "relax.matmul" or any(_dequantized(a, values) for a in value.args) \
                or not str(getattr(tensor_type(var), "dtype", "")).startswith("float"):
            continue
        out = _written_value(var, values, uses)
        below = _transpose_below(out, values, uses, taken, weights)
        rank = ndim(out)
        if below is None or rank is None or static_shape(out) is None:
            continue
        axes, origin = below
        shape, lead = static_shape(out) or (), rank - len(axes)
        if lead >= 0 and all(d == 1 for d in shape[:lead]):  # the same, or under unit axes
            sites.append((out, (*range(lead), *(lead + a for a in axes)), origin))
        else:  # a view between regroups them: each swap of two axes, after every exact one
            swaps.extend((out, tuple(j if a == i else i if a == j else a for a in range(rank)),
                          origin) for i in range(rank) for j in range(i + 1, rank))
    return sites + swaps


def _written_value(var: relax.Var, values: Mapping[Any, Any],
                   uses: Mapping[Any, list[Any]]) -> relax.Var:
    """What a matmul's result `var` is written as: through its one view, and in a half model
    through its one rounding to the model's dtype too (StridedProducts takes both into the
    product: the rounding in its epilogue), in either order; `var` if neither follows."""
    out, seen = var, set()
    while True:
        readers = uses.get(out, [])
        if len(readers) != 1 or readers[0] is None:
            return out
        value = values.get(readers[0])
        kind = "view" if op_name(value) in VIEWS else \
            "cast" if op_name(value) == "relax.astype" and float_typed(out) and \
            float_typed(readers[0]) else None
        if kind is None or kind in seen:
            return out
        seen.add(kind)
        out = readers[0]


def _transpose_below(var: relax.Var, values: Mapping[Any, Any], uses: Mapping[Any, list[Any]],
                     taken: set[relax.Var], weights: set[relax.Var]
                     ) -> tuple[Perm, str | None] | None:
    """The first transpose, still a kernel, that `var` reaches through layout-agnostic ops
    (at most `_WRITE_HOPS` of them): its axes and origin mark."""
    frontier, seen = [var], {var}
    for _ in range(_WRITE_HOPS):
        nxt = []
        for cur in frontier:
            for user in uses.get(cur, []):
                if user is None or user in seen:
                    continue
                seen.add(user)
                value: Any = values.get(user)
                axes = permute_axes(value)
                if axes is not None:
                    if user not in taken and not is_identity(axes) and \
                            not is_weight_derived(value.args[0], weights):
                        return tuple(axes), origin_tag(value)
                elif isinstance(value, relax.TupleGetItem) or \
                        op_name(value) in LAYOUT_AGNOSTIC_OPS:
                    nxt.append(user)
        frontier = nxt
    return None


def with_pairs(func: relax.Function, perms: Mapping[relax.Var, Perm],
               origin: str | None) -> relax.Function:
    """`func` with each var of `perms` read through ``permute_dims(permute_dims(var, p),
    p⁻¹)``: the same values; the inner transpose joins what the var is (a product's write,
    or a transpose it already is), the outer one is a seed for SinkPermutes to carry down
    (both marked with the origin of the transpose they stand for)."""
    values = {b.var: b.value for b in bindings(func)}

    def rebuild(mut: Any, p: Perm, var: relax.Var) -> relax.Expr:
        inner = mut.builder_.emit(mut.visit_expr(values[var]))
        moved = mut.builder_.emit(mark_origin(relax.op.permute_dims(inner, list(p)), origin))
        return mark_origin(relax.op.permute_dims(moved, list(inverse(p))), origin)

    return rebind(func, dict(perms), rebuild)


def with_write_pair(func: relax.Function, var: relax.Var, perm: Perm,
                    origin: str | None) -> relax.Function:
    """`with_pairs` for a matmul's result `var`: the inner transpose is the product's
    write."""
    return with_pairs(func, {var: perm}, origin)


__all__ = ["accept_for", "cost_after_products", "read_by_product", "with_pairs", "with_write_pair",
           "write_sites", "written_seeds"]
