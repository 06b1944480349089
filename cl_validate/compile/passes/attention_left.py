"""Softmaxes between two matmuls that RaiseAttention left as they are, and why: what the
kernel list says about attention-like code the pass did not raise."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tvm import relax

from cl_validate.ir import op_name

_MATMUL, _SOFTMAX = "relax.matmul", "relax.nn.softmax"


@dataclass
class Left:
    """A softmax between two matmuls that stayed as it is, and why."""

    source: str  # the softmax's binding name
    why: str


def unmatched_softmaxes(values: dict[relax.Var, relax.Expr], taken: set[relax.Var],
                        reported: set[str]) -> list[Left]:
    """Softmaxes between two matmuls (within a few ops) that no match took: what stands
    between them and the matmuls (EfficientFormerV2's talking heads: a conv on the heads)."""
    users: dict[relax.Var, list[relax.Var]] = {}
    for var, value in values.items():
        for arg in getattr(value, "args", []):
            if isinstance(arg, relax.Var):
                users.setdefault(arg, []).append(var)

    def path(start: relax.Var, step: Callable[[relax.Var], list[relax.Var]]) -> list[str]:
        seen: list[str] = []
        frontier = [start]
        for _ in range(_NEAR):
            frontier = [n for v in frontier for n in step(v)]
            names = [op_name(values.get(v)) or "" for v in frontier]
            if _MATMUL in names:
                return seen
            seen += [n for n in names if n and n not in _QUIET]
        return ["?"]

    def up(v: relax.Var) -> list[relax.Var]:
        return [a for a in getattr(values.get(v), "args", []) if isinstance(a, relax.Var)]

    out = []
    for var, value in values.items():
        if op_name(value) != _SOFTMAX or var in taken or var.name in reported:
            continue
        before, after = path(var, up), path(var, lambda v: users.get(v, []))
        if "?" in before or "?" in after:
            continue  # not between two matmuls: not attention
        ops = sorted({o.removeprefix("relax.") for o in before + after})
        if ops:
            out.append(Left(var.name, f"{', '.join(ops)} between the matmuls and the softmax "
                                      "(not attention's computation: talking heads?)"))
    return out


#: How many bindings away a matmul may be for a softmax to count as attention's
_NEAR = 8
#: Ops that do not change what a chain computes (views, casts): not named as in between
_QUIET = frozenset({"relax.reshape", "relax.broadcast_to", "relax.permute_dims",
                    "relax.astype", "relax.multiply", "relax.divide", "relax.add",
                    "relax.squeeze", "relax.expand_dims", "relax.nn.softmax", "relax.take"})
