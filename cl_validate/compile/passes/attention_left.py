"""Softmaxes between two matmuls that RaiseAttention left as they are, and why: what the
kernel list says about attention-like code the pass did not raise."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tvm import relax

from cl_validate.ir import op_name

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
