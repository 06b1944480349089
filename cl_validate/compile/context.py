"""What a pipeline is made of: named stages, and the context a pipeline builds them from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tvm

from cl_validate.spec import CaseSpec


@dataclass(frozen=True)
class Stage:
    """One named step of a pipeline: an IRModule → IRModule function (or a tvm Pass)."""

    name: str
    run: Callable[[tvm.IRModule], tvm.IRModule]


@dataclass
class PipelineContext:
    """What a pipeline may depend on when it builds its stage list."""

    case: CaseSpec
    target_name: str
    target: tvm.target.Target
    params: dict[str, Any]  # parameter name → tvm.runtime.Tensor (weights of `main`)
    sources: dict[str, str] = field(default_factory=dict)  # binding name → PyTorch source
    #: ops to keep in the layout they were imported in (op → ConvertLayout desired entry),
    #: over the case's [layout]: set by `compile_case` for ops TVM cannot lower otherwise
    keep_layouts: dict[str, list[str]] = field(default_factory=dict)
