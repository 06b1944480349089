"""Which transposes a pointwise convolution will write its result through: SinkPermutes'
view of StridedProducts, a later stage.

A pointwise (1x1) convolution followed (through a bias, a scale or a view) by a transpose
writes its result through that transpose in one kernel (StridedProducts): the transpose
costs nothing where it stands. SinkPermutes, which moves transposes down the ops
that have no layout of their own, must count it so, or it carries the layout away from the
product and leaves a real transpose further down (YOLOv5's detect head: a 1x1 convolution,
its output viewed as (batch, anchors, outputs, y, x) and permuted, the boxes decoded, the
levels concatenated: one transpose per level fused into the concat, where none was needed).

Quantized products (an operand dequantized) are not StridedProducts': IntegerCompute
computes them in integers, and their transposes stay transposes. Matmuls are left out: on
the held-out architectures counting their transposes free changed nothing in float, and in
a PT2E-quantized DaViT (its channel attention's float products) it left 10 transforms where
moving them left 7 (the products did not write through them in the end; not understood yet).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tvm import relax

from cl_validate.compile.passes.strided_products import READS, find
from cl_validate.ir import op_name

_PRODUCTS = ("relax.nn.conv2d",)
#: ops between a product and the transpose after it: a bias or a scale and a view
_HOPS = 3


def written_seeds(func: relax.Function, sources: Mapping[relax.Var, relax.Expr],
                  values: Mapping[Any, Any], uses: Mapping[Any, list[Any]]) -> set[relax.Var]:
    """The transposes in `sources` (each bound to ``permute_dims`` of its source) that a float
    product writes through; `values` binds every var of `func`, `uses` says who reads it."""

    def dequantized(expr: Any) -> bool:
        value: Any = values.get(expr)
        while op_name(value) in READS:  # views, permutes, broadcasts
            value = values.get(value.args[0])
        return op_name(value) == "relax.dequantize"

    def product_before(cur: Any) -> Any:
        for _ in range(_HOPS):
            value: Any = values.get(cur)
            if op_name(value) in _PRODUCTS:
                return None if any(map(dequantized, value.args)) else cur
            if value is None or len(uses.get(cur, [])) != 1:
                return None
            cur = next((a for a in getattr(value, "args", ()) if a in values), None)
        return None

    near = {t: p for t, src in sources.items() if (p := product_before(src)) is not None}
    written: set[relax.Var] = set()
    for product in find(func, only=set(near.values())) if near else ():
        mine = {*product.absorbed, product.final}
        written |= {t for t, p in near.items() if t in mine and p in mine}
    return written


__all__ = ["written_seeds"]
