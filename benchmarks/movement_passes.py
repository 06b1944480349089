"""One of our movement passes against the same program without it, on llvm or
(``--target cuda``) a GPU, in one process.

Per model, the ``nhwc`` pipeline compiles twice through the case session: as it is, and with
the pass left out (a pipeline registered here). For each program: the runtime transforms, the
kernels, the median run time (the two programs' timings interleaved, as in
``strided_products.py``) and the largest difference from PyTorch's output.

``ShareChainLayouts`` (a movement read by several chains made once):

- ``cswin_64``: the zoo's reduced CSWin Transformer at 64x64 (``benchmarks/wild_zoo``);
- ``cswin_t_224``: the same code at CSWin-T's first three stages' widths, heads and stripe
  widths at 224x224 (dims 64/128/256, heads 2/4/8, stripes 1/2/7);
- ``window_values_56``: one window-attention block whose values are read as a map by a
  depthwise conv and as heads, q/k/v selected from one projection (the pattern alone), on a
  56x56 map of 64 channels with 7x7 windows.

``PermuteIntoGather`` (an unfold's permute folded into its gather's index):

- ``rednet_64``: the zoo's reduced RedNet (involution, ``nn.Unfold``) at 64x64;
- ``involution_56``: one involution (64 channels, 7x7 kernel, groups of 16) on a 56x56 map.

``PermuteBeforeGather`` (an unfold's permute that also moves the heads, moved onto its
gather's data) and ``SinkPads`` (the pad before it moved after that permute, which then
folds with the model's permute before the pad):

- ``volo_outlooker_64``: the zoo's reduced VOLO outlooker (16 channels, 2 heads) at 64x64;
- ``volo_outlooker_d1``: the same code at VOLO-D1's outlooker width (192 channels, 6 heads,
  3x3 neighbourhoods) on 28x28 tokens.

``ComputeInLayout`` (a kernel computed elementwise from a weight, computed in OHWI):

- ``stylegan2_64``: the zoo's reduced StyleGAN2 generator (modulated convolutions) at 64x64;
- ``modconv_512_8``: one modulated 3x3 convolution of 512 channels on an 8x8 map (StyleGAN2's
  8x8 layer: a 9.4 MB kernel computed per sample).

``SinkQuantizePairs`` (a per-tensor quantize-dequantize pair moved out of a movement chain):

- ``q_shufflenet_v2_224``: ShuffleNetV2 x1.0 (``model_cases/zoo/shufflenet.py``) quantized by
  PT2E's x86 quantizer, at 224x224 (its pairs on the concats stand inside the shuffles);
- ``q_shuffle_unit_16``: one quantized downsampling unit (``tests/data/quant_models.py``).

``UnfoldChannelFilters`` (channels folded into the batch for a one-channel filter, as a
depthwise convolution):

- ``stylegan2_64``: the zoo's reduced StyleGAN2 generator at 64x64 (``upfirdn2d`` blurs and
  upsamplings);
- ``blur_64_128``: one blur (``upfirdn2d``, a 4x4 kernel) between two 1x1 convolutions of 64
  channels on a 128x128 map;
- ``upsample_64_64``: one 2x ``upfirdn2d`` upsampling (zero-stuffing, 4x4 kernel) between two
  1x1 convolutions of 64 channels, 64x64 to 128x128.

``HoistChainSteps`` (a step with a weight between two movement chains run before the first):

- ``tnt_32``: the zoo's reduced TNT at 32x32 (pixel position added between the unfold's
  movement and the tokens');
- ``tnt_s_224``: the same code at TNT-S's widths (pixels of 24 channels, 4x4 per 16x16
  patch, 384-wide patches, 4 and 6 heads; two blocks of the twelve) at 224x224.

``DropIdentities`` (a gather of its whole axis in order, a reshape to its own shape, dropped):

- ``swinir_32``: the zoo's reduced SwinIR at 32x32 (a reflect pad of nothing to a multiple
  of its 8x8 windows, upscaled 2x);
- ``swinir_light_64``: the same code at lightweight SwinIR's width (60 channels, 6 heads,
  8x8 windows; two of its four groups) at 64x64.

Rules, not passes (the ``nhwc`` pipeline with the rule patched out while it compiles):

- ``flip-rule`` (``flip``'s axis follows the data): ``loftr_32`` (the zoo's reduced LoFTR,
  the image and its mirror) and ``vim_64`` (the zoo's reduced Vision Mamba, its backward
  scan on ``flip(-1)`` of the tokens);
- ``heads-order`` (several batch axes grouped by where q's data lies): ``nest_32`` (the
  zoo's reduced NesT) and ``nest_t_224`` (the same code at NesT-T's first two levels' widths
  and heads, 96/192 channels, 3/6 heads, 14x14 blocks of 4x4 patches, at 224x224);
- ``lift-permutes`` (a transpose after an elementwise join lifted onto its differently
  transposed operands): ``ccnet_32`` (the zoo's reduced CCNet head) and ``ccnet_head_256``
  (the same code with CCNet's head widths scaled down to 256/64 channels, on a 64x64 map);
- ``channel-heads`` (heads cut from a map's channels into the batch raised as B batches of
  those heads): ``botnet_32`` (the zoo's reduced BoTNet) and ``botnet_c5_56`` (the same code
  at BoTNet-50's c5 attention width, 512 channels, 4 heads, on a 14x14 map);
- ``conv1d-products`` (a pointwise ``Conv1d`` on NWC data read and written by
  StridedProducts as a Linear over the channels): ``axial_32`` (the zoo's reduced
  Axial-DeepLab) and ``axial_s_112`` (the same code at Axial-DeepLab-S's first axial width,
  128 channels in 8 groups, spanning a 56x56 map);
- ``window-gathers`` (a gather with a k-D index, ``Tensor.unfold``'s windows, follows the
  data): ``halonet_32`` (the zoo's reduced HaloNet: 4x4 blocks, a halo of 1) and
  ``halonet_b8_64`` (the same code with halonet26t's 8x8 blocks and halo of 2, 128
  channels, on a 32x32 map);
- ``split-hoist`` (the cleanup also compiled with SinkPermutes' rounds started from a
  ``relax.split``'s parts' one transpose shared before it, kept for fewer transposes:
  HaloNet's k and v share one transpose of the windows): the same two HaloNets.

    python benchmarks/movement_passes.py PASS [--target llvm|cuda] [--repeat N]
        [--layout NCHW|NHWC]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))

import strided_products
from strided_products import MODULE, compare, register_without_pass


def _shared_chains() -> dict[str, tuple[Any, list[int]]]:
    from wild_zoo.idioms2 import CSWin

    from tests.passes.test_shared_chains import WindowValues

    return {
        "cswin_64": (CSWin, [1, 3, 64, 64]),
        "cswin_t_224": (lambda: CSWin(224, (64, 128, 256), (2, 4, 8), (1, 2, 7)),
                        [1, 3, 224, 224]),
        "window_values_56": (lambda: WindowValues(7, 7, dim=64, heads=2), [1, 3, 56, 56]),
    }


def _gather_order() -> dict[str, tuple[Any, list[int]]]:
    from torch import nn
    from wild_zoo.idioms2 import Involution, RedNet

    return {
        "rednet_64": (RedNet, [1, 3, 64, 64]),
        "involution_56": (lambda: nn.Sequential(nn.Conv2d(3, 64, 1), Involution(64, 7, 1),
                                                nn.Conv2d(64, 64, 1)), [1, 3, 56, 56]),
    }


def _gather_data() -> dict[str, tuple[Any, list[int]]]:
    from wild_zoo.heads import Outlooker

    return {
        "volo_outlooker_64": (Outlooker, [1, 3, 64, 64]),
        "volo_outlooker_d1": (lambda: Outlooker(192, 6), [1, 3, 112, 112]),
    }


def _computed_weights() -> dict[str, tuple[Any, list[int]]]:
    from wild_zoo.idioms2 import MODELS

    from tests.passes.test_computed_weights import ModulatedConv

    return {
        "stylegan2_64": (MODELS["stylegan2_modconv"], [1, 3, 64, 64]),
        "modconv_512_8": (lambda: ModulatedConv(512, 512), [1, 3, 8, 8]),
    }


def _quantize_pairs() -> dict[str, tuple[Any, list[int]]]:
    import torch
    from zoo.quant import _x86, pt2e_quantize
    from zoo.shufflenet import shufflenet_v2

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "data"))
    from quant_models import shuffle_unit

    def quantized(factory: Callable[[], Any], shape: list[int]) -> Callable[[], Any]:
        def build() -> Any:
            torch.manual_seed(0)
            return pt2e_quantize(factory().eval(), torch.randn(*shape), _x86())
        return build

    return {
        "q_shufflenet_v2_224": (quantized(shufflenet_v2, [1, 3, 224, 224]), [1, 3, 224, 224]),
        "q_shuffle_unit_16": (shuffle_unit, [1, 3, 16, 16]),
    }


def _channel_filters() -> dict[str, tuple[Any, list[int]]]:
    from torch import nn
    from wild_zoo.idioms2 import MODELS, Blur, Upsample

    def around(filt: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
        return lambda: nn.Sequential(nn.Conv2d(3, 64, 1), filt(), nn.Conv2d(64, 64, 1))

    return {
        "stylegan2_64": (MODELS["stylegan2_modconv"], [1, 3, 64, 64]),
        "blur_64_128": (around(lambda: Blur([1, 3, 3, 1], (2, 1))), [1, 3, 128, 128]),
        "upsample_64_64": (around(lambda: Upsample([1, 3, 3, 1])), [1, 3, 64, 64]),
    }


def _chain_steps() -> dict[str, tuple[Any, list[int]]]:
    from wild_zoo.attention3 import TNT

    return {
        "tnt_32": (TNT, [1, 3, 32, 32]),
        "tnt_s_224": (lambda: TNT(384, 24, 224, 16, 4, 4, 6), [1, 3, 224, 224]),
    }


def _identities() -> dict[str, tuple[Any, list[int]]]:
    from wild_zoo.attention5 import SwinIR

    return {
        "swinir_32": (SwinIR, [1, 3, 32, 32]),
        "swinir_light_64": (lambda: SwinIR(60, 6, 8, 64), [1, 3, 64, 64]),
    }


def _flips() -> dict[str, tuple[Any, list[int]]]:
    from wild_zoo.attention5 import MODELS as ATTENTION5
    from wild_zoo.idioms2 import MODELS as IDIOMS2

    return {
        "loftr_32": (ATTENTION5["loftr_linear_attn"], [1, 3, 32, 32]),
        "vim_64": (IDIOMS2["vim_selective_scan"], [1, 3, 64, 64]),
    }


def _heads_order() -> dict[str, tuple[Any, list[int]]]:
    from wild_zoo.attention5 import Nest

    return {
        "nest_32": (Nest, [1, 3, 32, 32]),
        "nest_t_224": (lambda: Nest((96, 192), (3, 6), 224, 14), [1, 3, 224, 224]),
    }


def _lifts() -> dict[str, tuple[Any, list[int]]]:
    from wild_zoo.attention6 import RCCAModule

    return {
        "ccnet_32": (RCCAModule, [1, 3, 32, 32]),
        "ccnet_head_256": (lambda: RCCAModule(256, 64), [1, 3, 256, 256]),
    }


def _channel_heads() -> dict[str, tuple[Any, list[int]]]:
    from wild_zoo.attention6 import BoTNet

    return {
        "botnet_32": (BoTNet, [1, 3, 32, 32]),
        "botnet_c5_56": (lambda: BoTNet(512, 56), [1, 3, 56, 56]),
    }


def _conv1d_products() -> dict[str, tuple[Any, list[int]]]:
    from wild_zoo.attention6 import AxialDeepLab

    return {
        "axial_32": (AxialDeepLab, [1, 3, 32, 32]),
        "axial_s_112": (lambda: AxialDeepLab(128, 8, 112), [1, 3, 112, 112]),
    }


def _windows() -> dict[str, tuple[Any, list[int]]]:
    from wild_zoo.attention6 import HaloNet

    return {
        "halonet_32": (HaloNet, [1, 3, 32, 32]),
        "halonet_b8_64": (lambda: HaloNet(128, 8, 2), [1, 3, 64, 64]),
    }


@contextlib.contextmanager
def _no_window_rule() -> Iterator[None]:
    from cl_validate.compile.passes import _layout_ops, _movement_ops

    def one_axis_take(call: Any, perm_of: Any) -> Any:
        return None if len(call.args[1].struct_info.shape) > 1 else take(call, perm_of)

    take = _layout_ops._HANDLERS["relax.take"]
    assert take is _movement_ops._take
    _layout_ops._HANDLERS["relax.take"] = one_axis_take  # no plan through a k-D index
    try:
        yield
    finally:
        _layout_ops._HANDLERS["relax.take"] = take


@contextlib.contextmanager
def _no_conv1d_products() -> Iterator[None]:
    from cl_validate.compile.passes.strided_products import POINTWISE

    layouts = POINTWISE.pop("relax.nn.conv1d")  # a Conv1d is no product
    try:
        yield
    finally:
        POINTWISE["relax.nn.conv1d"] = layouts


@contextlib.contextmanager
def _no_splits_first() -> Iterator[None]:
    from cl_validate.compile import pipeline

    trial = pipeline.splits_first

    @contextlib.contextmanager
    def never(on: bool) -> Iterator[Any]:  # the cleanup never sees a reason to run again
        with trial(False) as t:
            yield t
            t.found = False

    pipeline.splits_first = never  # type: ignore[assignment]
    try:
        yield
    finally:
        pipeline.splits_first = trial


@contextlib.contextmanager
def _no_flip_rule() -> Iterator[None]:
    from cl_validate.compile.passes import _layout_ops

    handler = _layout_ops._HANDLERS.pop("relax.flip")  # no plan through a flip
    try:
        yield
    finally:
        _layout_ops._HANDLERS["relax.flip"] = handler


@contextlib.contextmanager
def _finding_nothing(module: str, name: str) -> Iterator[None]:
    """`name` of ``cl_validate.compile.passes.<module>`` answering None (nothing found)."""
    import importlib

    mod = importlib.import_module(f"cl_validate.compile.passes.{module}")
    original = getattr(mod, name)
    setattr(mod, name, lambda *args: None)
    try:
        yield
    finally:
        setattr(mod, name, original)


#: rules (not passes): what patches each out while a program compiles
RULES: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "flip-rule": _no_flip_rule,
    # several batch axes in the default grouping
    "heads-order": lambda: _finding_nothing("raise_attention", "_heads_order"),
    # no transpose lifted onto a join's operands
    "lift-permutes": lambda: _finding_nothing("sink_rounds", "_lifted"),
    # heads cut from channels raised as B·heads batches of one head
    "channel-heads": lambda: _finding_nothing("raise_attention", "channel_heads"),
    "conv1d-products": _no_conv1d_products,
    "window-gathers": _no_window_rule,
    # the rounds only from the function as it is, splits shared only where a round is
    "split-hoist": _no_splits_first,
}


def register_without_rule(rule: str) -> str:
    """``module:function`` of the ``nhwc`` pipeline whose every stage runs with `rule`
    patched out (a pipeline registered in this process)."""
    from cl_validate.compile import pipeline
    from cl_validate.compile.pipeline import PipelineContext, Stage

    def wrapped(stage: Stage) -> Stage:
        def run(mod: Any) -> Any:
            with RULES[rule]():
                return stage.run(mod)
        return Stage(stage.name, run)

    def without(ctx: PipelineContext) -> list[Stage]:
        return [wrapped(stage) for stage in pipeline.nhwc(ctx)]

    attr = f"without_{rule.replace('-', '_')}"
    setattr(sys.modules.setdefault(MODULE, types.ModuleType(MODULE)), attr, without)
    return f"{MODULE}:{attr}"


PASSES: dict[str, Callable[[], dict[str, tuple[Any, list[int]]]]] = {
    "ShareChainLayouts": _shared_chains,
    "PermuteIntoGather": _gather_order,
    "PermuteBeforeGather": _gather_data,
    "SinkPads": _gather_data,
    "ComputeInLayout": _computed_weights,
    "SinkQuantizePairs": _quantize_pairs,
    "UnfoldChannelFilters": _channel_filters,
    "HoistChainSteps": _chain_steps,
    "DropIdentities": _identities,
    "flip-rule": _flips,
    "heads-order": _heads_order,
    "lift-permutes": _lifts,
    "channel-heads": _channel_heads,
    "conv1d-products": _conv1d_products,
    "window-gathers": _windows,
    "split-hoist": _windows,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", choices=sorted(PASSES), metavar="PASS", help=", ".join(PASSES))
    ap.add_argument("--target", choices=("llvm", "cuda"), default="llvm")
    ap.add_argument("--repeat", type=int, default=10, help="timings of each, interleaved")
    ap.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW",
                    help="the input's declared layout")
    args = ap.parse_args()
    strided_products.INPUT_LAYOUT = args.layout
    print("| model | program | runtime transforms | kernels | run (median) | vs without "
          "| max abs diff vs PyTorch |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    without = register_without_rule(args.name) if args.name in RULES else \
        register_without_pass(args.name)
    compare(PASSES[args.name](), ((f"without {args.name}", without),
                                  (f"with {args.name}", "nhwc")), args.target, args.repeat)


if __name__ == "__main__":
    main()
