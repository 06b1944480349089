"""Softmaxes between two matmuls that RaiseAttention left as they are, and why: what the
kernel list says about attention-like code the pass did not raise."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tvm import relax

from cl_validate.ir import known_shape, op_name

_MATMUL, _SOFTMAX = "relax.matmul", "relax.nn.softmax"
_LINEAR = "a Linear on the scores"


@dataclass
class Left:
    """A softmax between two matmuls that stayed as it is, and why."""

    source: str  # the softmax's binding name
    why: str


def unmatched_softmaxes(values: dict[relax.Var, relax.Expr], taken: set[relax.Var],
                        reported: set[str], weights: set[relax.Var] | None = None
                        ) -> list[Left]:
    """Softmaxes between two matmuls (within a few ops) that no match took, each with what
    stands between it and the matmuls: ops that are not attention's computation
    (EfficientFormerV2's talking heads: a conv on the heads), a Linear on the scores (CaiT's
    talking heads: the matmul next to the softmax multiplies by a weight), or, when neither,
    that the chain does not read as attention. Computations on weights alone (SwinV2's
    ``logit_scale.exp()``) are not named: they are the model's constants, not in between."""
    weights = weights or set()
    users: dict[relax.Var, list[relax.Var]] = {}
    for var, value in values.items():
        for arg in getattr(value, "args", []):
            if isinstance(arg, relax.Var):
                users.setdefault(arg, []).append(var)

    def path(start: relax.Var, step: Callable[[relax.Var], list[relax.Var]]
             ) -> list[str] | None:
        """The ops between `start` and the nearest matmul of two run-time values (a Linear,
        a matmul by a weight, is one of the ops: CaiT's talking heads); None when no such
        matmul is near."""
        seen: list[str] = []
        frontier = [start]
        for _ in range(_NEAR):
            frontier = [n for v in frontier for n in step(v) if n not in weights]
            for v in frontier:
                name = op_name(values.get(v)) or ""
                if name == _MATMUL and any(isinstance(a, relax.Var) and a in weights
                                           for a in values[v].args):  # type: ignore[attr-defined]
                    seen.append(_LINEAR)
                elif name == _MATMUL:
                    return seen
                elif name and name not in _QUIET:
                    seen.append(name)
        return None

    def up(v: relax.Var) -> list[relax.Var]:
        return [a for a in getattr(values.get(v), "args", []) if isinstance(a, relax.Var)]

    out = []
    for var, value in values.items():
        if op_name(value) != _SOFTMAX or var in taken or var.name in reported:
            continue
        before, after = path(var, up), path(var, lambda v: users.get(v, []))
        if before is None or after is None:
            continue  # not between two matmuls of run-time values: not attention
        ops = sorted({o.removeprefix("relax.") for o in before + after})
        if ops:
            out.append(Left(var.name, f"{', '.join(ops)} between the matmuls and the softmax "
                                      "(not attention's computation: talking heads?)"))
        else:
            out.append(Left(var.name, "the matmuls and the softmax do not read as "
                                      "softmax(q·kᵀ·scale + bias)·v (a scale that is not one "
                                      "number or one per head, or kᵀ that is not k's "
                                      "transpose?)"))
    return out


#: How many bindings away a matmul may be for a softmax to count as attention's
#: (a Linear on the scores with the views its import adds is five)
_NEAR = 12
#: Ops that do not change what a chain computes (views, casts): not named as in between
_QUIET = frozenset({"relax.reshape", "relax.broadcast_to", "relax.permute_dims",
                    "relax.astype", "relax.multiply", "relax.divide", "relax.add",
                    "relax.squeeze", "relax.expand_dims", "relax.nn.softmax", "relax.take"})

#: The reason a chain whose scores sum over a feature map's H·W is left as matmuls
OVER_THE_MAP = ("the scores sum over a feature map's H·W (channel attention, Restormer- or "
                "DANet-style): left as matmuls, which read the channels-last map in place, "
                "where the attention op would transpose q, k and v")
#: Shape-keeping ops an operand may pass through after the view (F.normalize, a scale)
_ELEMENTWISE = frozenset({"relax.multiply", "relax.divide", "relax.add", "relax.subtract",
                          "relax.astype"})


def sums_over_map(value_of: Callable[[relax.Expr], relax.Expr | None], e: relax.Expr,
                  peel: Callable[[relax.Expr], relax.Expr]) -> bool:
    """`e`, a score product's left operand ``(..., L, E)``, sums over a convolution's
    spatial axes: it is ``reshape(X, (..., H·W))`` of an ``(N, C, H, W)`` X that a
    convolution computed (through ops that keep its shape, a split of its channels), the
    leading axes splitting N and C (heads, channels); through shape-keeping elementwise ops
    (F.normalize, a scale) and the views `peel` sees through. Attention over channels:
    raised, each of q, k and v would be a transpose of the whole map (the head dimension
    H·W innermost), which the matmuls read in place."""
    for _ in range(_NEAR):
        e = peel(e)
        value = value_of(e)
        name = op_name(value)
        if name in _ELEMENTWISE:
            shape = known_shape(e)
            same = [a for a in value.args if known_shape(a) == shape]  # type: ignore[union-attr]
            if not same:
                return False
            e = same[0]
            continue
        if name != "relax.reshape":
            return False
        x = value.args[0]  # type: ignore[union-attr]
        src, out = known_shape(x), known_shape(e)
        if src is None or out is None or len(src) != 4 or len(out) < 3:
            return False
        spatial = src[2] * src[3]
        return spatial > 1 and out[-1] == spatial and \
            int(np.prod(out[:-1])) == src[0] * src[1] and _convolved(value_of, x)
    return False


def _convolved(value_of: Callable[[relax.Expr], relax.Expr | None], x: relax.Expr) -> bool:
    """`x` (N, C, H, W) is a convolution's output, through ops that keep its H and W (a
    split of the channels, elementwise ops, norms)."""
    hw = (known_shape(x) or (0, 0, 0, 0))[2:]
    for _ in range(_NEAR):
        value = value_of(x) if isinstance(x, relax.Var) else x
        if isinstance(value, relax.TupleGetItem):
            x = value.tuple_value
            continue
        name = op_name(value) or ""
        if name.startswith("relax.nn.conv2d"):
            return True
        ins = [a for a in getattr(value, "args", ()) if isinstance(a, relax.Expr)
               and len(known_shape(a) or ()) == 4 and known_shape(a)[2:] == hw]  # type: ignore[index]
        if not ins:
            return False
        x = ins[0]
    return False
