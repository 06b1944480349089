"""Named compile pipelines: the Relax stages between the import and the build.

A pipeline is a function ``(ctx: PipelineContext) -> list[Stage]`` registered by name
(`register_pipeline`), or named in a case file as ``pipeline = "module:function"``. The front
(export, import) and the back (build) are the same for every pipeline; what a pipeline chooses
are the Relax stages in between. Write your own from `standard_stages`::

    from cl_validate.compile.pipeline import PipelineContext, Stage, standard_stages

    def my_pipeline(ctx: PipelineContext) -> list[Stage]:
        return standard_stages(ctx, layout=[Stage("convert_layout", ...)])
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import tvm
from tvm import relax

from cl_validate.compile.context import PipelineContext, Stage
from cl_validate.compile.cpu_chains import inline_chains
from cl_validate.compile.factory import ensure_on_path
from cl_validate.compile.fold import fold_params
from cl_validate.compile.integer_chunks import chunk_integer_sums
from cl_validate.compile.legalize import legalize
from cl_validate.compile.passes import (
    BoolArithmetic,
    ComputeInLayout,
    ConstantFills,
    DropIdentities,
    FoldFlattenIntoLinear,
    FoldPermuteIntoColumns,
    FoldScaleShift,
    IntegerCompute,
    MergeFilterChannels,
    NormalizeAxes,
    PermuteBeforeGather,
    PermuteIntoGather,
    PermuteToReshape,
    PerSampleInstanceNorm,
    RaiseAttention,
    SinkViews,
    StridedProducts,
    UnfoldChannelFilters,
    UnmergeGroupedMaps,
    cleanup_passes,
    lower_conv_transpose,
)
from cl_validate.compile.passes._util import Cost, collect_notes, note, runtime_cost
from cl_validate.compile.passes.product_chains import accept_for, cost_after_products
from cl_validate.compile.passes.sink_rounds import splits_first
from cl_validate.compile.schedule import schedule_gpu
from cl_validate.errors import CaseFileError
from cl_validate.paths import display_path
from cl_validate.spec import CaseSpec
from cl_validate.spec.layouts import converted_layouts

__all__ = ["PipelineContext", "Stage", "pipeline_names", "register_pipeline",
           "resolve_pipeline", "standard_stages"]

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
    ensure_on_path(case)
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


def standard_stages(ctx: PipelineContext, *, layout: Sequence[Stage],
                    inline_steps: bool = True) -> list[Stage]:
    """The stages every pipeline shares: `layout` stages, then bind, fold, legalize, fuse.

    `inline_steps`: on a CPU, each fused kernel's elementwise steps become one loop nest
    (`cl_validate.compile.cpu_chains`); TVM's own CPU backend leaves them apart (and so
    does the `nhwc-plain` baseline). Inlined, a kernel that only moves data can turn out a
    view (two transposes that undo each other), which TVM then drops."""
    target = ctx.target

    def fold(mod: tvm.IRModule) -> tvm.IRModule:
        return fold_params(mod, ctx.params)

    def fuse_tir(mod: tvm.IRModule) -> tvm.IRModule:
        mod = relax.transform.FuseTIR()(mod)
        if "gpu" in target.keys:  # dlight, as TVM's cuda backend; each rule noted
            mod = schedule_gpu(mod, target)
        elif inline_steps:  # a kernel's elementwise steps in one loop nest; integer window
            mod = chunk_integer_sums(inline_chains(mod), target)  # sums in chunks
        return relax.transform.RewriteDataflowReshape()(mod)

    return [
        *layout,
        # BatchNorm etc. into elementwise ops, so they fold and fuse into the convolutions;
        # arithmetic on masks onto integers (llvm cannot emit it on booleans).
        Stage("decompose", tvm.transform.Sequential([
            relax.transform.DecomposeOpsForInference(), BoolArithmetic()])),
        # Weights bound as constants, with everything computed from them precomputed.
        Stage("fold_params", fold),
        # The BatchNorm arithmetic now constant per channel: into the conv weights + one bias;
        # a gather whose index is now known to pick everything in order (a pad of nothing).
        Stage("fold_scale_shift", tvm.transform.Sequential([FoldScaleShift(),
                                                            DropIdentities()])),
        Stage("legalize", legalize(ctx)),
        Stage("fuse", relax.transform.FuseOps()),
        Stage("fuse_tir", fuse_tir),
    ]


def _convert_layout(ctx: PipelineContext) -> Stage:
    """ConvertLayout to the case's [layout]; [layout_overrides] pins single modules' ops, and
    the context's `keep_layouts` ops TVM cannot lower in another layout.

    An override is matched through the op's weight parameter, which the importer names after
    the module (``layer1.0.conv1`` → ``p_layer1_0_conv1_weight``).
    """
    desired = converted_layouts(ctx.case.layout)
    desired.update(ctx.keep_layouts)
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


def _unfold_filters(convert: Stage, cleanup: Stage) -> Stage:
    """Batch-folded channel filters as depthwise convolutions (`UnfoldChannelFilters`), then
    depthwise filters over a permuted tensor as convolutions of its merged channels
    (`MergeFilterChannels`), each where the layout stages then leave fewer run-time
    transforms: a filter between the graph's input and output, with no converted op around
    it, is cheaper folded."""

    rewrites = (UnfoldChannelFilters(), MergeFilterChannels())

    def cost(mod: tvm.IRModule) -> Cost:
        with collect_notes():  # a trial's notes are not the program's
            return runtime_cost(cleanup.run(convert.run(mod))["main"])

    def run(mod: tvm.IRModule) -> tvm.IRModule:
        kept: Cost | None = None  # `mod`'s cost, once measured
        for rewrite in rewrites:
            trial = rewrite(mod)
            if trial["main"].same_as(mod["main"]):
                continue
            kept = cost(mod) if kept is None else kept
            after = cost(trial)
            if after < kept:
                mod, kept = trial, after
        return mod

    return Stage("unfold_filters", run)


def _cleanup(ctx: PipelineContext) -> Stage:
    """The cleanup passes; where SinkPermutes met a ``relax.split`` whose parts end in one
    transpose, compiled again with its rounds started from that transpose shared before the
    split (`splits_first`), and that program kept if it leaves fewer run-time transposes
    after StridedProducts (HaloNet's keys and values: one transpose of the windows for both,
    not one each); a tie keeps the first. Each program's notes stay with it."""
    passes = tvm.transform.Sequential(list(cleanup_passes(ctx.target)))
    accept = accept_for(ctx.target)

    def run(mod: tvm.IRModule) -> tvm.IRModule:
        with collect_notes() as said, splits_first(False) as trial:
            plain = passes(mod)
        kept, kept_notes = plain, said
        if trial.found:
            with collect_notes() as other_said, splits_first(True):
                other = passes(mod)
            if cost_after_products(other["main"], accept)[0] < \
                    cost_after_products(plain["main"], accept)[0]:
                kept, kept_notes = other, other_said
        for line in kept_notes:
            note(line)
        return kept

    return Stage("cleanup", run)


@register_pipeline("nhwc-plain")
def nhwc_plain(ctx: PipelineContext) -> list[Stage]:
    """TVM's own ConvertLayout and nothing else: the baseline our passes are measured against
    (its CPU kernels left as TVM's backend leaves them, one loop nest per step)."""
    return standard_stages(ctx, layout=[_convert_layout(ctx)], inline_steps=False)


@register_pipeline("nhwc")
def nhwc(ctx: PipelineContext) -> list[Stage]:
    """ConvertLayout followed by our cleanup passes (cl_validate.compile.passes), with negative
    axes spelled out first (TVM 0.27's layout rules crash on some of them), a flatten's
    transpose moved into the Linear weight after it, and transposed convolutions that
    ConvertLayout carried into a layout TVM cannot lower rewritten as convolutions there; a
    quantized network's convolutions and matmuls computed in integers (unless the case says
    ``integer_compute = false``)."""
    cleanup = _cleanup(ctx)
    convert = _convert_layout(ctx)
    return standard_stages(ctx, layout=[
        # the import's spelling, made readable for ConvertLayout: gathers that change
        # nothing, axes, batch-folded norms, an unfold's permute moved onto its
        # gather's index or data, group statistics over merged axes
        Stage("normalize_axes", tvm.transform.Sequential([DropIdentities(), ConstantFills(),
                                                          NormalizeAxes(),
                                                          PerSampleInstanceNorm(),
                                                          PermuteIntoGather(),
                                                          PermuteBeforeGather(),
                                                          UnmergeGroupedMaps()])),
        Stage("raise_attention", RaiseAttention()),
        _unfold_filters(convert, cleanup),
        convert,
        cleanup,
        # permutations moved into weights: a flatten's rows, a computed kernel's columns, a
        # kernel computed elementwise from a weight
        Stage("fold_flatten", tvm.transform.Sequential([FoldFlattenIntoLinear(),
                                                        FoldPermuteIntoColumns(),
                                                        ComputeInLayout()])),
        Stage("conv_transpose", lower_conv_transpose(ctx.case.layout)),
        # after the layouts are final: the integer products keep them
        *([Stage("integer_compute", IntegerCompute())] if ctx.case.integer_compute else []),
        # a matmul reads and writes through the permutes the layouts left around it
        Stage("strided_products", StridedProducts(ctx.target)),
        # a view between a kernel and its elementwise steps moved below them, so they fuse
        # into the kernel (a view of a view then made one)
        Stage("sink_views", tvm.transform.Sequential([SinkViews(), PermuteToReshape()])),
    ])
