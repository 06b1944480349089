"""Named compile pipelines: torch.export → Relax import → layout stages → build.

A pipeline is a function ``(ctx: PipelineContext) -> list[Stage]`` registered by name
(`register_pipeline`), or named in a case file as ``pipeline = "module:function"``. The front
(export, import) and the back (build) are the same for every pipeline; what a pipeline chooses
are the Relax stages in between. The IR after every stage is kept for ``cl-validate show`` and
for the per-stage transform counts.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cl_validate.errors import CaseFileError, CompileStageError, UsageError
from cl_validate.spec import CaseSpec, display_path

if TYPE_CHECKING:
    import torch
    import tvm

#: Attribute our legalization puts on the PrimFunc of every layout transform, so the analysis
#: can find transforms again after fusion without guessing from names.
TRANSFORM_ATTR = "cl_validate.transform"
AXES_ATTR = "cl_validate.axes"
SOURCE_ATTR = "cl_validate.source"
DEFAULT_CUDA_ARCH = "sm_90"


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
    own_permutes: set[str] = field(default_factory=set)  # binding names of the model's permutes


@dataclass
class StageIR:
    name: str
    mod: tvm.IRModule
    seconds: float


@dataclass
class Frontend:
    """The target-independent part: the exported program and the imported Relax module."""

    exported: torch.export.ExportedProgram
    mod: tvm.IRModule  # weights as parameters of main beyond num_input
    params: dict[str, Any]
    export_seconds: float
    import_seconds: float
    sources: dict[str, str] = field(default_factory=dict)  # binding name → PyTorch source


@dataclass
class Compiled:
    target_name: str
    stages: list[StageIR] = field(default_factory=list)
    executable: Any = None
    build_seconds: float = 0.0

    def stage(self, name: str) -> StageIR:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def final(self) -> tvm.IRModule:
        return self.stages[-1].mod


PipelineFactory = Callable[[PipelineContext], Sequence[Stage]]
_REGISTRY: dict[str, PipelineFactory] = {}


def register_pipeline(name: str) -> Callable[[PipelineFactory], PipelineFactory]:
    """Decorator: make a pipeline selectable by ``pipeline = "<name>"`` in case files."""

    def deco(fn: PipelineFactory) -> PipelineFactory:
        _REGISTRY[name] = fn
        return fn

    return deco


def pipeline_names() -> list[str]:
    return sorted(_REGISTRY)


def resolve_pipeline(case: CaseSpec) -> PipelineFactory:
    """A registered name, or ``module:function`` importable like the case's model."""
    name = case.pipeline
    if name in _REGISTRY:
        return _REGISTRY[name]
    file, line = display_path(case.path), case.line_of("pipeline")
    if ":" not in name:
        raise CaseFileError(f"unknown pipeline '{name}'", file=file, line=line,
                            hint="registered: " + ", ".join(pipeline_names()))
    from cl_validate.factory import _ensure_on_path

    _ensure_on_path(case)
    mod_name, _, attr = name.partition(":")
    try:
        fn: Any = importlib.import_module(mod_name)
        for part in attr.split("."):
            fn = getattr(fn, part)
    except (ImportError, AttributeError) as exc:
        raise CaseFileError(f"cannot load pipeline '{name}': {exc}", file=file,
                            line=line) from None
    if not callable(fn):
        raise CaseFileError(f"pipeline '{name}' is not callable", file=file, line=line)
    return fn  # type: ignore[no-any-return]


# --------------------------------------------------------------------------------------------
# Targets
# --------------------------------------------------------------------------------------------
def make_target(name: str) -> tvm.target.Target:
    """TVM 0.27 targets are dicts; cuda gets the local GPU's arch, else a fixed default."""
    import tvm

    if name == "llvm":
        return tvm.target.Target({"kind": "llvm"})
    if name == "cuda":
        arch = DEFAULT_CUDA_ARCH
        dev = tvm.cuda(0)
        if dev.exist:
            arch = "sm_" + dev.compute_version.replace(".", "")
        return tvm.target.Target({"kind": "cuda", "arch": arch}, host={"kind": "llvm"})
    raise UsageError(f"unknown target '{name}'", hint="use llvm or cuda")


def device_for(name: str) -> Any:
    import tvm

    return tvm.cpu(0) if name == "llvm" else tvm.cuda(0)


def device_available(name: str) -> bool:
    return bool(device_for(name).exist)


# --------------------------------------------------------------------------------------------
# Front end: export + import (shared by every target of a case)
# --------------------------------------------------------------------------------------------
def channels_last_wrapper(model: torch.nn.Module, case: CaseSpec) -> torch.nn.Module:
    """Wrap `model` so the exported program takes/returns NHWC where the case says so.

    Exactly the declared inputs and outputs are permuted; nothing is inferred. The permutes
    added here are what ConvertLayout's boundary transforms cancel against.
    """
    import torch

    in_nhwc = [i.layout == "NHWC" for i in case.inputs]
    out_nhwc = [o.layout == "NHWC" for o in case.outputs]
    if not any(in_nhwc) and not any(out_nhwc):
        return model

    class ChannelsLastIO(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: torch.Tensor) -> Any:
            args = tuple(a.permute(0, 3, 1, 2) if nhwc else a
                         for a, nhwc in zip(args, in_nhwc, strict=True))
            out = self.inner(*args)
            single = isinstance(out, torch.Tensor)
            outs = [out] if single else list(out)
            for i, nhwc in enumerate(out_nhwc):
                if nhwc and i < len(outs):
                    outs[i] = outs[i].permute(0, 2, 3, 1)
            return outs[0] if single else tuple(outs)

    return ChannelsLastIO(model).eval()


def export_and_import(model: torch.nn.Module, case: CaseSpec,
                      example_inputs: Sequence[torch.Tensor]) -> Frontend:
    """torch.export the (wrapped) model and import it into Relax with weights as params."""
    import torch
    from tvm import relax
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

    from cl_validate.attribution import sources_by_binding
    from cl_validate.converters import custom_convert_map
    from cl_validate.errors import ClValidateError

    wrapped = channels_last_wrapper(model, case)
    args = tuple(
        x.permute(0, 2, 3, 1).contiguous() if spec.layout == "NHWC" else x
        for x, spec in zip(example_inputs, case.inputs, strict=True)
    )
    t0 = time.perf_counter()
    try:
        with torch.no_grad():
            exported = torch.export.export(wrapped, args)
    except Exception as exc:
        raise CompileStageError("export", exc) from exc
    t1 = time.perf_counter()
    try:
        # The importer itself (not the from_exported_program wrapper), to keep its map from
        # FX nodes to Relax bindings: that is how transforms are traced back to PyTorch code.
        importer = ExportedProgramImporter()
        mod = importer.from_exported_program(exported.run_decompositions(), True, True, False,
                                             custom_convert_map())
        sources = sources_by_binding(mod, importer.env)
        mod, params = relax.frontend.detach_params(mod)
    except ClValidateError:
        raise
    except Exception as exc:
        raise CompileStageError("import", exc, _unsupported_ops_summary(exc)) from exc
    t2 = time.perf_counter()
    main = mod["main"]
    n_in = int(main.attrs["num_input"]) if main.attrs and "num_input" in main.attrs else len(
        case.inputs)
    named = {p.name: v for p, v in zip(main.params[n_in:], params.get("main", []), strict=True)}
    return Frontend(exported, mod, named, t1 - t0, t2 - t1, sources)


def _unsupported_ops_summary(exc: BaseException) -> str | None:
    """TVM's importer asserts ``Unsupported function types [...]`` listing the ops it has no
    converter for, in set order (it varies between runs). Sorted, the verdict reads the same
    every time, and says what to do."""
    import ast

    text = str(exc).strip()
    prefix = "Unsupported function types "
    if not isinstance(exc, AssertionError) or not text.startswith(prefix):
        return None
    try:
        ops = sorted(str(op) for op in ast.literal_eval(text[len(prefix):].splitlines()[0]))
    except (ValueError, SyntaxError, TypeError):
        return None
    return (f"Unsupported function types: TVM's PyTorch importer has no converter for "
            f"{', '.join(ops)} (hint: express the model without "
            f"{'it' if len(ops) == 1 else 'them'}, or add a converter to "
            "cl_validate/converters.py)")


# --------------------------------------------------------------------------------------------
# Middle: the registered pipelines
# --------------------------------------------------------------------------------------------
def _legalize_transforms_tagged() -> dict[str, Callable[..., Any]]:
    """Legalizations of the transform ops that tag their PrimFunc with `TRANSFORM_ATTR`."""
    import tvm

    def tag(op_name: str) -> Callable[..., Any]:
        default = tvm.ir.Op.get(op_name).get_attr("FLegalize")

        def legalize(bb: Any, call: Any) -> Any:
            out = default(bb, call)
            gvar = out.args[0]
            func = bb.get()[gvar].with_attr(TRANSFORM_ATTR, op_name.split(".")[-1])
            if call.span is not None:  # the attribution annotate_transforms put there
                func = func.with_attr(SOURCE_ATTR, str(call.span.source_name.name))
            if op_name == "relax.permute_dims" and call.attrs.axes is not None:
                func = func.with_attr(AXES_ATTR, [int(a) for a in call.attrs.axes])
            bb.update_func(gvar, func)
            return out

        return legalize

    return {name: tag(name) for name in ("relax.permute_dims", "relax.layout_transform")}


def standard_stages(ctx: PipelineContext, *, layout: Sequence[Stage]) -> list[Stage]:
    """The stages every pipeline shares: `layout` stages, then bind, fold, legalize, fuse."""
    import tvm
    from tvm import relax

    from cl_validate.passes import FoldScaleShift

    target = ctx.target

    def fold(mod: tvm.IRModule) -> tvm.IRModule:
        from cl_validate.fold import fold_params

        return fold_params(mod, ctx.params)

    def legalize(mod: tvm.IRModule) -> tvm.IRModule:
        from cl_validate.attribution import annotate_transforms

        mod = annotate_transforms(mod, ctx.sources, ctx.own_permutes,
                                  ctx.case.layout_overrides)
        with target:
            return tvm.transform.Sequential([
                relax.backend.DispatchSampling(),
                relax.backend.DispatchSortScan(),
                relax.transform.LegalizeOps(customize_legalize_map=_legalize_transforms_tagged()),
                relax.transform.AnnotateTIROpPattern(),
                relax.transform.FoldConstant(),
            ])(mod)

    def fuse_tir(mod: tvm.IRModule) -> tvm.IRModule:
        mod = relax.transform.FuseTIR()(mod)
        if "gpu" in target.keys:
            from tvm.s_tir import dlight as dl

            with target:
                mod = dl.ApplyDefaultSchedule(
                    dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                    dl.gpu.GeneralReduction(), dl.gpu.Fallback(),
                )(mod)
        return relax.transform.RewriteDataflowReshape()(mod)

    return [
        *layout,
        # BatchNorm etc. into elementwise ops, so they fold and fuse into the convolutions.
        Stage("decompose", relax.transform.DecomposeOpsForInference()),
        # Weights bound as constants, with everything computed from them precomputed.
        Stage("fold_params", fold),
        # The BatchNorm arithmetic now constant per channel: into the conv weights + one bias.
        Stage("fold_scale_shift", FoldScaleShift()),
        Stage("legalize", legalize),
        Stage("fuse", relax.transform.FuseOps()),
        Stage("fuse_tir", fuse_tir),
    ]


def _convert_layout(ctx: PipelineContext) -> Stage:
    """ConvertLayout to the case's [layout]; [layout_overrides] pins single modules' ops.

    An override is matched through the op's weight parameter, which the importer names after
    the module (``layer1.0.conv1`` → ``p_layer1_0_conv1_weight``).
    """
    from tvm import relax

    desired = {op: list(lay) for op, lay in ctx.case.layout.items()}
    overrides = ctx.case.layout_overrides
    if not overrides:
        return Stage("convert_layout", relax.transform.ConvertLayout(desired))
    by_weight = {f"p_{path.replace('.', '_')}_weight": list(lay)
                 for path, lay in overrides.items()}

    def layout_cb(call: Any) -> dict[str, list[str]]:
        op = getattr(call.op, "name", None)
        if op in desired and len(call.args) > 1 and isinstance(call.args[1], relax.Var):
            pinned = by_weight.get(call.args[1].name)
            if pinned is not None:
                return {**desired, op: pinned}
        return desired

    return Stage("convert_layout", relax.transform.ConvertLayout(desired, layout_cb))


@register_pipeline("nhwc-plain")
def nhwc_plain(ctx: PipelineContext) -> list[Stage]:
    """TVM's own ConvertLayout and nothing else: the baseline our passes are measured against."""
    return standard_stages(ctx, layout=[_convert_layout(ctx)])


@register_pipeline("nhwc")
def nhwc(ctx: PipelineContext) -> list[Stage]:
    """ConvertLayout followed by our cleanup passes (cl_validate.passes)."""
    import tvm

    from cl_validate.passes import cleanup_passes

    cleanup = Stage("cleanup", tvm.transform.Sequential(list(cleanup_passes())))
    return standard_stages(ctx, layout=[_convert_layout(ctx), cleanup])


# --------------------------------------------------------------------------------------------
# Running a pipeline
# --------------------------------------------------------------------------------------------
def compile_case(front: Frontend, case: CaseSpec, target_name: str, *,
                 build: bool = True) -> Compiled:
    """Run the case's pipeline for one target, keeping the IR after every stage."""
    import tvm

    target = make_target(target_name)
    from cl_validate.attribution import own_permute_names

    ctx = PipelineContext(case, target_name, target, front.params, front.sources,
                          own_permute_names(front.mod))
    factory = resolve_pipeline(case)
    compiled = Compiled(target_name)
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
        if target_name == "cuda":
            from tvm.relax.backend.cuda import pipeline as backend
        else:
            from tvm.relax.backend.cpu_generic import pipeline as backend  # type: ignore[no-redef]
        lower = tvm.transform.Sequential(
            backend.dataflow_lower_passes(target) + backend.finalize_passes(target))
        t0 = time.perf_counter()
        try:
            compiled.executable = tvm.compile(mod, target=target, relax_pipeline=lower)
        except Exception as exc:
            raise CompileStageError("build", exc) from exc
        compiled.build_seconds = time.perf_counter() - t0
    return compiled
