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

from cl_validate.compile.passes._util import Cost, add_costs, permute_cost
from cl_validate.compile.passes.strided_products import READS, find, gpu_schedules
from cl_validate.ir import is_weight_derived, op_name, permute_axes, static_shape, weight_derived

_PRODUCTS = ("relax.nn.conv2d",)
#: ops between a product and the transpose after it: a bias or a scale and a view
_HOPS = 3
#: views between a transpose and the matmul that reads it (a broadcast, a batch reshape)
_READ_HOPS = 4

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
            if op_name(value) in _PRODUCTS:
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
    taken: set[relax.Var] = set()
    for product in find(func, accept):
        taken |= {*product.absorbed, product.final}
    weights = weight_derived(func)
    costs = []
    for block in func.body.blocks:
        for b in block.bindings:
            axes = permute_axes(b.value)
            if axes is not None and b.var not in taken and \
                    not is_weight_derived(b.value.args[0], weights):
                costs.append(permute_cost(static_shape(b.value.args[0]), axes))
    return add_costs(costs)


__all__ = ["accept_for", "cost_after_products", "read_by_product", "written_seeds"]
