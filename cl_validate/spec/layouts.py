"""Layouts a case implies without naming them: its 1-D convolutions in the layout it declares
for ``relax.nn.conv2d``.

A case that asks for channels-last convolutions asks it of the model's ``Conv1d`` too: a
Conformer's conv module reads the ``(B, T, C)`` tokens through ``transpose(1, 2)`` into an
NCW ``Conv1d`` and back, wav2vec2's positional conv likewise. Left out of ConvertLayout's
desired layouts they stay in the import layout, with a transpose before and after each,
where ``NWC`` lets the model's own transposes cancel: tokens are channels-last already. The
spatial axes are renamed, the channel placement kept (``NHWC``/``OHWI`` gives
``NWC``/``OWI``). A case that names ``relax.nn.conv1d`` itself keeps what it names.
``Conv3d`` is not implied: a clip built from NCHW images (``torch.stack`` of frames) costs
a transpose into ``NDHWC`` that the layout passes do not carry yet, where NCDHW costs none;
a case asks for it by naming ``relax.nn.conv3d``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: op → the spatial axes its layouts spell where conv2d's spell ``HW``
_SPATIAL = {"relax.nn.conv1d": "W"}
#: Ops TVM 0.27 lowers in one data layout only (its TOPI compute asserts it: a grid sample
#: of an NHWC map does not compile): the layout check expects them in it, unless the case
#: declares a layout for them itself.
SINGLE_LAYOUT_OPS = {"relax.image.grid_sample": "NCHW"}


def implied_layouts(declared: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """The conv1d layouts `declared` implies (none where it names them itself, or
    declares no plain ``HW`` layout for conv2d)."""
    conv = declared.get("relax.nn.conv2d")
    if not conv or not all("HW" in lay and lay.isalpha() and lay.isupper() for lay in conv):
        return {}
    return {op: [lay.replace("HW", spatial) for lay in conv]
            for op, spatial in _SPATIAL.items() if op not in declared}


def converted_layouts(declared: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Every op's layout the pipeline's ConvertLayout asks for: the declared ones, the
    conv1d layouts they imply (`implied_layouts`) and ``conv2d_transpose`` in the data
    layout declared for ``conv2d`` where the case does not say: left to its rule, it follows
    its input, which is the import layout when a dequantize stands before it (a quantized
    ConvTranspose2d stayed NCHW between two transposes, where the float model's follows the
    NHWC convolution before it). ``conv3d`` stays in its import layout where the case does
    not say: left to its rule, it follows its input, and an NHWC map made 5-D
    (``unsqueeze``) gave it the data layout ``NCHWD`` beside the kernel's ``OIDHW``, which
    TVM 0.27 legalizes into a wrong program. The `layout` check expects the same."""
    desired = {op: list(lay) for op, lay in declared.items()}
    desired.setdefault("relax.nn.conv3d", ["NCDHW", "OIDHW"])
    conv = desired.get("relax.nn.conv2d")
    if conv and conv[0] == "NHWC" and "relax.nn.conv2d_transpose" not in desired:
        desired["relax.nn.conv2d_transpose"] = ["NHWC", "IHWO"]
    desired.update(implied_layouts(desired))
    return desired


def moves_only_unit_axes(in_shape: Sequence[Any], perm: Sequence[int]) -> bool:
    """True if ``perm`` keeps the relative order of every axis whose extent is not 1.

    Such a permute copies every element to the same linear offset: it is a reshape (and data
    in one of the two orders lies in memory as in the other). A symbolic extent counts as
    "not 1", so the answer is never wrong, only sometimes conservative.
    """
    kept = [p for p in perm if in_shape[p] != 1]
    return kept == sorted(kept)
