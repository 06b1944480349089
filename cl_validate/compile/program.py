"""A case's compiled program for one target: `compile_case` runs its pipeline, keeping the IR
after every stage (`Compiled`), then builds the executable."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import tvm

from cl_validate.compile.context import PipelineContext
from cl_validate.compile.frontend import Frontend
from cl_validate.compile.pipeline import resolve_pipeline
from cl_validate.compile.tvm_targets import backend, build_unavailable, make_target
from cl_validate.errors import CompileStageError
from cl_validate.spec import CaseSpec


@dataclass
class StageIR:
    name: str
    mod: tvm.IRModule
    seconds: float


@dataclass
class Compiled:
    target_name: str
    stages: list[StageIR] = field(default_factory=list)
    executable: Any = None
    build_seconds: float = 0.0
    target: Any = None  # the tvm.target.Target it was compiled for
    #: why the build was not run although asked for (this TVM or machine cannot build for
    #: the target); the IR stages, and so the static checks, are all there
    build_skipped: str | None = None

    def stage(self, name: str) -> StageIR:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def final(self) -> tvm.IRModule:
        return self.stages[-1].mod


def compile_case(front: Frontend, case: CaseSpec, target_name: str, *,
                 build: bool = True, tvm_target: tvm.target.Target | None = None
                 ) -> Compiled:
    """Run the case's pipeline for one target, keeping the IR after every stage; `tvm_target`
    is the TVM target of `target_name` when the caller made it already. A target TVM refuses
    raises `CaseFileError` (at its declaration)."""
    target = tvm_target if tvm_target is not None else make_target(
        case.target_def(target_name))
    ctx = PipelineContext(case, target_name, target, front.params, front.sources)
    factory = resolve_pipeline(case)
    compiled = Compiled(target_name, target=target)
    compiled.stages.append(StageIR("import", front.mod, front.import_seconds))
    try:
        stages = list(factory(ctx))
    except Exception as exc:
        raise CompileStageError("pipeline setup", exc) from exc
    mod = front.mod
    for stage in stages:
        t0 = time.perf_counter()
        try:
            mod = stage.run(mod)
        except Exception as exc:
            raise CompileStageError(stage.name, exc) from exc
        compiled.stages.append(StageIR(stage.name, mod, time.perf_counter() - t0))
    if build:
        compiled.build_skipped = build_unavailable(target)
    if build and compiled.build_skipped is None:
        lowering = backend(target)
        lower = tvm.transform.Sequential(
            lowering.dataflow_lower_passes(target) + lowering.finalize_passes(target))
        t0 = time.perf_counter()
        try:
            compiled.executable = tvm.compile(mod, target=target, relax_pipeline=lower)
        except Exception as exc:
            raise CompileStageError("build", exc) from exc
        compiled.build_seconds = time.perf_counter() - t0
    return compiled
