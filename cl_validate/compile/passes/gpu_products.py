"""Whether a GPU target's dlight schedules a strided product as the matmul it replaces
(`gpu_schedules`): StridedProducts takes a product on a GPU only then, and SinkPermutes, which
counts on StridedProducts, asks the same question, round after round (so the answers are
kept per product: its kind, shapes, chains and inputs decide it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tvm

from cl_validate.ir import known_shape, tensor_type


def gpu_schedules(target: tvm.target.Target) -> Callable[[Any], bool]:
    """Whether dlight's Matmul rule schedules a product for `target` (True on a CPU)."""
    if "gpu" not in target.keys:
        return lambda _p: True
    from tvm.s_tir import dlight as dl  # lazy: dlight only for GPU targets

    memo: dict[Any, bool] = {}

    def accept(p: Any) -> bool:
        key = (p.name, p.out_shape, p.reads, p.writes, p.shapes, p.dtype,
               tuple((known_shape(x), str(getattr(tensor_type(x), "dtype", "")))
                     for x in p.inputs()))
        if key not in memo:
            with target:
                memo[key] = dl.gpu.Matmul().apply(p.prim_func(), target, False) is not None
        return memo[key]

    return accept


__all__ = ["gpu_schedules"]
