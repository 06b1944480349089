"""A case's compiled program for one target: `compile_case` runs its pipeline, keeping the IR
after every stage (`Compiled`), then builds the executable."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import tvm
from tvm import relax

from cl_validate.compile.context import PipelineContext
from cl_validate.compile.culprit import culprit, failing_kernel
from cl_validate.compile.frontend import Frontend
from cl_validate.compile.legalize import import_layouts, unlowered_ops
from cl_validate.compile.passes._util import collect_notes
from cl_validate.compile.passes.integer_compute import report as integer_report
from cl_validate.compile.passes.raise_attention import find as find_attention
from cl_validate.compile.pipeline import PipelineFactory, resolve_pipeline
from cl_validate.compile.tvm_targets import backend, build_unavailable, make_target
from cl_validate.errors import CompileStageError
from cl_validate.ir import LOWERED_CALL_OPS, bindings, op_name
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
    target: Any = None  # the tvm.target.Target it was compiled for
    #: why the build was not run although asked for (this TVM or machine cannot build for
    #: the target); the IR stages, and so the static checks, are all there
    build_skipped: str | None = None
    #: ops kept in their import layout because TVM cannot lower them where the pipeline
    #: put them, one line each ("relax.nn.conv1d_transpose kept in NCW/IOW: ...")
    kept_layouts: list[str] = field(default_factory=list)
    #: attention written out (matmul, softmax, matmul) that stayed so, and why, one line each
    #: ("attention at blocks.0.attn (softmax) left as matmuls: its scores are ...")
    attention_left: list[str] = field(default_factory=list)
    #: quantized products the integer_compute stage left in float, and why (one line each)
    float_left: list[str] = field(default_factory=list)
    #: passes that stopped at a cap with work left, per stage ("cleanup: SinkPermutes stopped
    #: at its cap of 8 rounds ..."), one line each
    capped: list[str] = field(default_factory=list)

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
    factory = resolve_pipeline(case)
    compiled = Compiled(target_name, target=target)
    ctx = PipelineContext(case, target_name, target, front.params, front.sources)
    mod = _run_stages(compiled, front, factory, ctx)
    left = unlowered_ops(_legalized(compiled))
    # Ops TVM cannot lower where the pipeline put them: compile again with each kept in the
    # layout it was imported in (which TVM lowers), so what is shown is what builds.
    keep = import_layouts(front.mod, left)
    if keep:
        refused = left
        ctx.keep_layouts = keep
        mod = _run_stages(compiled, front, factory, ctx)
        left = unlowered_ops(_legalized(compiled))
        compiled.kept_layouts = [
            f"{op} kept in {'/'.join(lay)}: TVM cannot lower it in "
            f"{'/'.join(refused[op][:2]) or 'the layout the pipeline chose'}"
            for op, lay in keep.items()]
    if left:
        op, lay = next(iter(left.items()))
        what = f"TVM cannot lower {op} in {'/'.join(lay)}"
        raise CompileStageError("legalize", RuntimeError(what), summary=(
            f"{what} (hint: pin it in the case's [layout] to a layout TVM lowers, e.g. "
            f"\"{op}\" = [\"NCHW\", ...], or lower it in a pipeline of your own)"))
    compiled.attention_left = _attention_left(compiled, front.sources)
    compiled.float_left = _float_left(compiled, front.sources)
    if build:
        compiled.build_skipped = build_unavailable(target)
    if build and compiled.build_skipped is None:
        lowering = backend(target)
        lower = tvm.transform.Sequential(
            lowering.dataflow_lower_passes(target) + lowering.finalize_passes(target))
        try:
            # under the target: TVM's nvcc callback takes the arch from the current target,
            # else asks the GPU, which a process that forks must not (and cannot) see
            with target:
                compiled.executable = tvm.compile(mod, target=target, relax_pipeline=lower)
        except Exception as exc:
            # TVM compiles CUDA with NVRTC's Python binding unless told to use nvcc
            hint = ("pip install cuda-bindings for this machine's CUDA, or set "
                    "TVM_CUDA_COMPILE_MODE=nvcc with nvcc on the PATH"
                    if "cuda-bindings" in str(exc) else None)
            where = None if hint else failing_kernel(mod, target, exc)
            raise CompileStageError("build", exc, hint=hint, at=where) from exc
    return compiled


def _run_stages(compiled: Compiled, front: Frontend, factory: PipelineFactory,
                ctx: PipelineContext) -> tvm.IRModule:
    """Run the pipeline's stages from the import, recording each stage's IR in `compiled`."""
    compiled.stages = [StageIR("import", front.mod, front.import_seconds)]
    compiled.capped = []
    try:
        stages = list(factory(ctx))
    except Exception as exc:
        raise CompileStageError("pipeline setup", exc) from exc
    mod = front.mod
    for stage in stages:
        t0 = time.perf_counter()
        try:
            with collect_notes() as notes:
                mod = stage.run(mod)
        except Exception as exc:
            where = culprit(stage.run, mod, front.sources, exc)
            raise CompileStageError(stage.name, exc, at=where) from exc
        compiled.stages.append(StageIR(stage.name, mod, time.perf_counter() - t0))
        compiled.capped += [f"{stage.name}: {n}" for n in notes]
    return mod


def _attention_left(compiled: Compiled, sources: dict[str, str]) -> list[str]:
    """What RaiseAttention could not raise, as the report says it (none when the pipeline
    has no raise_attention stage)."""
    try:
        before = compiled.stages[[s.name for s in compiled.stages].index("raise_attention") - 1]
    except ValueError:
        return []
    _, left = find_attention(before.mod["main"])
    lines = Counter(f"attention at {sources.get(x.source, x.source)} left as matmuls: {x.why}"
                    for x in left)  # softmaxes of one module, for one reason: one line
    return [line + (f" ({n} softmaxes)" if n > 1 else "") for line, n in lines.items()]


def _float_left(compiled: Compiled, sources: dict[str, str]) -> list[str]:
    """What IntegerCompute left in float (none when the pipeline has no integer_compute
    stage)."""
    names = [s.name for s in compiled.stages]
    if "integer_compute" not in names:
        return []
    before = compiled.stages[names.index("integer_compute") - 1]
    return integer_report(before.mod["main"], sources)


def _legalized(compiled: Compiled) -> tvm.IRModule:
    """The IR right after legalization (the last stage in a pipeline without one)."""
    try:
        return compiled.stage("legalize").mod
    except KeyError:
        return compiled.final


def op_level_stage(compiled: Compiled) -> str:
    """Name of the last stage before legalization: main calls Relax ops, not PrimFuncs."""
    best = compiled.stages[0].name
    for stage in compiled.stages:
        if any(isinstance(b.value, relax.Call) and op_name(b.value) in LOWERED_CALL_OPS
               for b in bindings(stage.mod["main"])):
            break
        best = stage.name
    return best
