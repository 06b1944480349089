"""Our Relax passes that clean up after TVM's ConvertLayout (run right after it).

ConvertLayout wraps every op without a layout rule in a transpose pair and never cancels the
pairs it creates; these passes remove every transform that is not needed, so what remains is
what the model's layout really demands (typically the graph's input and output boundary):

* ``SinkPermutes`` recomputes layout-agnostic ops (clip, where, elementwise, reductions,
  concat, pooling, ...) in the layout their operands already have, so transposes meet;
* ``CancelPermutes`` folds permute chains and drops inverse pairs and identities;
* ``FoldMovementChains`` turns reshape/permute chains (PixelShuffle, channel shuffle) into at
  most one transpose;
* ``PermuteToReshape`` turns permutes that only move size-1 axes into free reshapes.

All are pure data-movement rewrites: numerics are bit-identical. They work whether the
weights are still parameters of ``main`` (beyond ``num_input``) or already bound constants.

One more pass here is arithmetic, and runs later, once the weights are bound:
``FoldScaleShift`` moves the per-channel scale and shift a BatchNorm leaves after a convolution
into the convolution's weights plus one bias add (float rounding differs, nothing else).
"""

from __future__ import annotations

import tvm
from tvm import relax

from cl_validate.compile.passes.broadcasts import ElideBroadcasts
from cl_validate.compile.passes.cancel_permutes import CancelPermutes
from cl_validate.compile.passes.flatten_linear import FoldFlattenIntoLinear
from cl_validate.compile.passes.fold_scale_shift import FoldScaleShift
from cl_validate.compile.passes.layout_agnostic import LAYOUT_AGNOSTIC_OPS, SinkPermutes
from cl_validate.compile.passes.layout_rules import RULELESS_UNARY_OPS, extra_layout_rules
from cl_validate.compile.passes.movement_chains import FoldMovementChains
from cl_validate.compile.passes.normalize_axes import NormalizeAxes
from cl_validate.compile.passes.permute_to_reshape import PermuteToReshape


def cleanup_passes() -> list[tvm.transform.Pass]:
    """The passes to run after ConvertLayout, in order.

    Cancel first so SinkPermutes sees chains already folded (it also folds between its own
    rounds, to a fixpoint); movement chains are folded once the permutes around them have
    settled; size-1 permutes become reshapes last, because until then they are still permutes
    that can cancel against each other; CanonicalizeBindings removes the ``gv = lv`` aliases a
    cancelled output permute leaves behind.
    """
    return [
        ElideBroadcasts(),
        CancelPermutes(),
        SinkPermutes(),
        FoldMovementChains(),
        PermuteToReshape(),
        relax.transform.CanonicalizeBindings(),
    ]


__all__ = [
    "LAYOUT_AGNOSTIC_OPS",
    "RULELESS_UNARY_OPS",
    "CancelPermutes",
    "ElideBroadcasts",
    "FoldFlattenIntoLinear",
    "FoldMovementChains",
    "FoldScaleShift",
    "NormalizeAxes",
    "PermuteToReshape",
    "SinkPermutes",
    "cleanup_passes",
    "extra_layout_rules",
]
