"""A transpose after an elementwise join of differently transposed operands, lifted onto them.

CCNet's criss-cross attention sums two branches that leave their matmuls transposed in two
different ways (``out_H.permute(0, 2, 3, 1)`` and ``out_W.permute(0, 2, 1, 3)``, both back
to NCHW), scales the sum and adds the NHWC input: ConvertLayout puts one transpose after the
sum, and each branch keeps its own. No single layout serves both branches' permutes, so
SinkPermutes, which runs an op in the layout its operands share, leaves all three.

Read from the transpose ``t = permute_dims(e, q)`` upwards: the ops between its operands'
sources and ``e`` are elementwise, so ``e`` permuted by ``q`` is the same ops on each
operand permuted by ``q``. Each operand ``x`` is rebound to ``permute_dims(permute_dims(x,
q), q⁻¹)`` (the same values): the inner transpose joins the operand's own (one transpose,
or none where the two undo each other, or a matmul's write that StridedProducts takes), and
all outer ones share ``q⁻¹``, so the rounds carry them down through the elementwise ops to
``t``, where they cancel.

`lift_sites` only finds them; SinkPermutes (`sink_rounds`) pairs each site's operands
(`product_chains.with_pairs`) and keeps the rewrite only where the rounds after it lower the
run-time transform cost. Pure data movement: exact.
"""

from __future__ import annotations

from tvm import relax

from cl_validate.compile.passes._layout_ops import BROADCAST_OPS, UNARY_OPS
from cl_validate.compile.passes._util import Perm
from cl_validate.ir import (
    bindings,
    is_identity,
    is_weight_derived,
    ndim,
    op_name,
    origin_tag,
    permute_axes,
    use_sites,
    weight_derived,
)

_ELEMENTWISE = UNARY_OPS | BROADCAST_OPS
#: Elementwise ops walked up from a transpose at most: a join, a scale, an activation
_HOPS = 8


def lift_sites(func: relax.Function) -> list[tuple[relax.Var, tuple[relax.Var, ...], Perm,
                                                   str | None]]:
    """Each transpose worth lifting: (its var, the operands to pair, its axes, its origin).
    The transpose is of a run-time value computed by elementwise ops read by nothing else;
    their run-time operands of the full rank are paired, at least two of them, one at least
    a transpose itself (else SinkPermutes' rounds find the layout alone)."""
    values = {b.var: b.value for b in bindings(func)}
    uses = use_sites(func)
    weights = weight_derived(func)
    sites = []
    for var, value in values.items():
        axes = permute_axes(value)
        if axes is None or is_identity(axes) or is_weight_derived(var, weights):
            continue
        top = value.args[0]  # type: ignore[union-attr]
        rank = ndim(top)
        leaves: list[relax.Var] = []
        frontier, region = [top], 0
        while frontier and region <= _HOPS:
            cur = frontier.pop()
            call = values.get(cur)
            region_op = op_name(call) in _ELEMENTWISE and ndim(cur) == rank and \
                len(uses.get(cur, [])) == 1
            if not region_op:
                if cur is top:
                    break
                if isinstance(cur, relax.Var) and cur in values and \
                        not is_weight_derived(cur, weights) and ndim(cur) == rank and \
                        all(not cur.same_as(x) for x in leaves):
                    leaves.append(cur)
                continue
            region += 1
            frontier.extend(a for a in call.args if isinstance(a, relax.Var))  # type: ignore[union-attr]
        if region and region <= _HOPS and len(leaves) >= 2 and any(
                permute_axes(values.get(x)) is not None for x in leaves):
            sites.append((var, tuple(leaves), tuple(int(a) for a in axes), origin_tag(value)))
    return sites


__all__ = ["lift_sites"]
