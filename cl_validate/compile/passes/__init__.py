"""Our Relax passes around TVM's ConvertLayout.

ConvertLayout wraps every op without a layout rule in a transpose pair and never cancels the
pairs it creates; the cleanup passes (run right after it) remove every transform that is not
needed, so what remains is what the model's layout really demands (typically the graph's
input and output boundary, and the model's own permutes):

* ``SinkQuantizePairs`` moves a per-tensor quantize-dequantize pair that cuts a movement (a
  concat or a permute, then reshapes and permutes) past the movement after it, so the other
  passes see one chain (exact: per tensor, the same codes wherever the values stand);
* ``ElideBroadcasts`` permutes the small tensor rather than its explicit broadcast, and lets
  elementwise ops broadcast it themselves;
* ``HoistChainSteps`` runs an elementwise step with a weight operand that stands between two
  reshape/permute chains before the first, the weight moved back through it (TNT's pixel
  position), so the two chains become one;
* ``SinkPermutes`` recomputes ops without a rule (elementwise, clip, where, reductions,
  scans and sorts, concat, pooling, pad, views, broadcast_to, take, strided_slice, matmul,
  ...) in the layout their operands already have, so transposes meet;
* ``CancelPermutes`` folds permute chains and drops inverse pairs and identities;
* ``HoistPermutes`` moves a transpose after a concat of single-channel parts onto the parts;
* ``ShareChainLayouts`` makes a movement result read by several reshape/permute chains once,
  in the layout one chain ends in, where every other chain is then a reshape of it (CSWin's
  values: one map read by a conv and by the attention heads);
* ``SinkPads`` runs a pad between two movements after the second (a reshape/permute chain
  that keeps the padded axes whole: VOLO's values, padded for an unfold and read
  heads-first), so the two fold into one transpose;
* ``FoldMovementChains`` turns reshape/permute chains (PixelShuffle, channel shuffle, patch
  unfold/fold) into at most one transpose;
* ``InterleaveConcats`` lets a concat whose transpose interleaves its parts (a channel
  shuffle after a concat, as in ShuffleNet) write them interleaved, without the transpose;
* ``ReadSlicesAtSource`` lets a transpose that undoes the transposes before a view and a
  slice (a conv output viewed into attention heads, one part viewed back into a map) read
  the slice from the source instead;
* ``PermuteToReshape`` turns permutes that only move size-1 axes into free reshapes.

All are pure data-movement rewrites: numerics are bit-identical (property-tested in
``tests/passes/test_properties.py``), with one exception: a GroupNorm / InstanceNorm that
SinkPermutes moves onto an NHWC stream sums its statistics in another order (exactly what
TVM's own group_norm layout rule does under ConvertLayout). They work whether the weights
are still parameters of ``main`` (beyond ``num_input``) or already bound constants.

More passes run at other stages: ``NormalizeAxes`` before ConvertLayout (negative axes crash
some of TVM's layout rules), with ``PerSampleInstanceNorm`` (an instance norm on a batch of
more than one, which PyTorch folds into the channels, as the per-channel norm it is; exact)
``PermuteIntoGather`` (an unfold's permute of the gathered positions folded into the
gather's constant index; exact), ``PermuteBeforeGather`` (one that also moves the other axes,
VOLO's heads, moved onto the gather's data where that is no larger than what is picked;
exact) and ``UnmergeGroupedMaps`` (statistics over a map viewed
``(B, G, C/G·H·W)``, a manual GroupNorm or EvoNorm, with the channel split kept apart from
the pixels; the same elements reduced); ``SpelledSoftmax`` and ``FoldProductViews``, which
RaiseAttention runs first (a max-subtracted softmax written out as the one op it is, the
same steps; an einsum's unit-axis views around a product folded, pure data movement);
``UnfoldChannelFilters`` after RaiseAttention, in a stage
of its own (a filter run on every channel by folding the channels into the batch,
``upfirdn2d``-style, as the depthwise convolution it is) and ``MergeFilterChannels`` (a
depthwise filter along one axis over a permuted tensor, Nyströmformer's convolution of its
values, as the depthwise convolution of the tensor's merged channels where it lies), each
kept only where the layout stages then leave fewer transforms (the same sums of the same
products); ``FoldFlattenIntoLinear``
after the cleanup (a flatten's transpose into the Linear's weight: the dot products sum in
another order), with ``FoldPermuteIntoColumns`` (a computed kernel's transpose into its
constant bank's columns, CondConv-style dynamic convolutions; exact) and ``ComputeInLayout``
(a kernel computed elementwise from a weight and per-channel factors, StyleGAN2's
modulation, computed in the layout the convolution wants; exact);
``lower_conv_transpose`` after it (a transposed convolution ConvertLayout carried into a
layout TVM cannot lower becomes a convolution of the zero-stuffed input there); and, once the
weights are bound, ``FoldScaleShift`` moves the per-channel scale and shift a BatchNorm leaves
after a convolution into the convolution's weights plus one bias add (float rounding differs,
nothing else), and ``DropIdentities`` (also first, in ``nhwc``) drops a gather whose index
picks its whole axis in order, with the import's reshape after it (a reflect pad of
nothing; exact), and ``ConstantFills`` (first, in ``nhwc``) makes a fill shaped like a
tensor (``zeros_like``) of a static shape a constant ``full`` (exact); ``BoolArithmetic``,
with the decomposition, computes arithmetic, comparisons and min/max on boolean masks on
int32 (llvm cannot emit them on booleans; exact).
``IntegerCompute`` follows the layout stages: a quantized network's
convolutions and matmuls read their int8/uint8 codes and accumulate in int32, in the layout
they have. ``StridedProducts`` follows: a float matmul reads its operands and writes its
result through the transposes still around it (the same sums in the same order).
``SinkViews`` ends them: a view between a kernel and the elementwise steps after it moves
below the steps, so FuseOps fuses them into the kernel (exact).
"""

from __future__ import annotations

import tvm
from tvm import relax

from cl_validate.compile.passes.bool_arithmetic import BoolArithmetic
from cl_validate.compile.passes.broadcasts import ElideBroadcasts
from cl_validate.compile.passes.cancel_permutes import CancelPermutes
from cl_validate.compile.passes.casts import DropRoundTrips, NarrowMovements
from cl_validate.compile.passes.chain_steps import HoistChainSteps
from cl_validate.compile.passes.channel_filters import (
    UnfoldChannelFilters,
    unfold_channel_filters,
)
from cl_validate.compile.passes.computed_weights import ComputeInLayout
from cl_validate.compile.passes.conv_transpose import lower_conv_transpose
from cl_validate.compile.passes.fills import ConstantFills
from cl_validate.compile.passes.flatten_linear import FoldFlattenIntoLinear
from cl_validate.compile.passes.fold_scale_shift import FoldScaleShift
from cl_validate.compile.passes.gather_order import PermuteBeforeGather, PermuteIntoGather
from cl_validate.compile.passes.grouped_maps import UnmergeGroupedMaps
from cl_validate.compile.passes.hoist_permutes import HoistPermutes, InterleaveConcats
from cl_validate.compile.passes.identities import DropIdentities
from cl_validate.compile.passes.instance_norm import PerSampleInstanceNorm
from cl_validate.compile.passes.integer_compute import IntegerCompute
from cl_validate.compile.passes.layout_agnostic import LAYOUT_AGNOSTIC_OPS
from cl_validate.compile.passes.layout_rules import RULELESS_UNARY_OPS, extra_layout_rules
from cl_validate.compile.passes.merged_channels import MergeFilterChannels
from cl_validate.compile.passes.movement_chains import FoldMovementChains
from cl_validate.compile.passes.normalize_axes import NormalizeAxes
from cl_validate.compile.passes.pad_chains import SinkPads
from cl_validate.compile.passes.permute_to_reshape import PermuteToReshape
from cl_validate.compile.passes.product_views import FoldProductViews
from cl_validate.compile.passes.quantize_pairs import SinkQuantizePairs
from cl_validate.compile.passes.raise_attention import RaiseAttention
from cl_validate.compile.passes.shared_chains import ShareChainLayouts
from cl_validate.compile.passes.sink_rounds import SinkPermutes
from cl_validate.compile.passes.sink_views import SinkViews
from cl_validate.compile.passes.slice_views import ReadSlicesAtSource
from cl_validate.compile.passes.spelled_softmax import SpelledSoftmax
from cl_validate.compile.passes.strided_products import StridedProducts
from cl_validate.compile.passes.weight_columns import FoldPermuteIntoColumns


def cleanup_passes(target: tvm.target.Target | None = None) -> list[tvm.transform.Pass]:
    """The passes to run after ConvertLayout, in order (for `target`: SinkPermutes counts the
    transposes StridedProducts takes there as free; without one, every transpose counts).

    Quantize-dequantize pairs first, out of the movement chains; broadcasts next, so the
    permutes ConvertLayout put on them move onto the small tensor; cancel next so the chains
    are folded, then a step with a weight between two chains runs before the first (so
    they become one); SinkPermutes then sees chains already folded (it also folds between
    its own rounds, to a fixpoint); a half-precision model's roundings then: hoisted above
    the movements before them, and a widening cast rounded straight back dropped (both
    between permutes that would fold) — after SinkPermutes, which carries the layout through
    the casts where they stand (moved first, they kept a channel filter's fold in its
    transposes: the bundled FIR filters in float16 6 transforms, float32's 2); what
    SinkPermutes leaves after a concat is hoisted onto its parts; a pad moves after the chain
    that reads it, so that chain folds with the one before the pad; movement chains are
    folded once the permutes around them have settled, and a concat's interleaving permute
    then joins the concat; size-1 permutes become reshapes last, because until then they are
    still permutes that can cancel against each other; CanonicalizeBindings removes the
    ``gv = lv`` aliases a cancelled output permute leaves behind.
    """
    return [
        SinkQuantizePairs(),
        ElideBroadcasts(),
        CancelPermutes(),
        HoistChainSteps(),
        SinkPermutes(target),
        NarrowMovements(),
        DropRoundTrips(),
        HoistPermutes(),
        ShareChainLayouts(),
        SinkPads(),
        FoldMovementChains(),
        InterleaveConcats(),
        ReadSlicesAtSource(),
        PermuteToReshape(),
        relax.transform.CanonicalizeBindings(),
    ]


__all__ = [
    "LAYOUT_AGNOSTIC_OPS",
    "RULELESS_UNARY_OPS",
    "BoolArithmetic",
    "CancelPermutes",
    "ComputeInLayout",
    "ConstantFills",
    "DropIdentities",
    "DropRoundTrips",
    "ElideBroadcasts",
    "FoldFlattenIntoLinear",
    "FoldMovementChains",
    "FoldPermuteIntoColumns",
    "FoldProductViews",
    "FoldScaleShift",
    "HoistChainSteps",
    "HoistPermutes",
    "IntegerCompute",
    "InterleaveConcats",
    "MergeFilterChannels",
    "NarrowMovements",
    "NormalizeAxes",
    "PerSampleInstanceNorm",
    "PermuteBeforeGather",
    "PermuteIntoGather",
    "PermuteToReshape",
    "RaiseAttention",
    "ReadSlicesAtSource",
    "ShareChainLayouts",
    "SinkPads",
    "SinkPermutes",
    "SinkQuantizePairs",
    "SinkViews",
    "SpelledSoftmax",
    "StridedProducts",
    "UnfoldChannelFilters",
    "UnmergeGroupedMaps",
    "cleanup_passes",
    "extra_layout_rules",
    "lower_conv_transpose",
    "unfold_channel_filters",
]
