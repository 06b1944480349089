"""A transpose a product writes through stays where the product is.

A detection head (YOLOv5's Detect) views a 1x1 convolution's output as (batch, anchors,
outputs, y, x) and permutes the outputs last, then decodes boxes elementwise and in place
(``slice_scatter``) before flattening and concatenating the levels. ConvertLayout's
NHWC -> NCHW transpose and the model's permute fold into one transpose right after the
convolution, which StridedProducts takes into the convolution's write: no transform is left.
SinkPermutes must not carry that layout down the decoding to the concat (one transpose per
level, fused into the concat's kernel): a permute the product writes through costs nothing
where it stands, so moving it is no gain."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.passes.conftest import compile_nhwc_case

pytestmark = pytest.mark.compile


class DetectHead(nn.Module):
    def __init__(self, levels: int) -> None:
        super().__init__()
        self.na, self.no = 2, 6
        self.stem = nn.Conv2d(3, 8, 3, 2, 1)
        self.down = nn.Conv2d(8, 8, 3, 2, 1)
        self.m = nn.ModuleList(nn.Conv2d(8, self.na * self.no, 1) for _ in range(levels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = [self.stem(x)]
        feats.append(self.down(feats[0]))
        outs = []
        for conv, feat in zip(self.m, feats, strict=False):
            t = conv(feat)
            bs, _, ny, nx = t.shape
            y = t.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).sigmoid()
            y[..., 0:2] = y[..., 0:2] * 2 - 0.5
            y[..., 2:4] = (y[..., 2:4] * 2) ** 2
            outs.append(y.reshape(bs, -1, self.no))
        return torch.cat(outs, 1)


@pytest.mark.parametrize("levels", [1, 2])
def test_a_detect_heads_permute_stays_in_the_convolutions_write(tmp_path, levels) -> None:
    kernels = compile_nhwc_case(tmp_path, lambda: DetectHead(levels), (1, 3, 16, 16),
                                rtol=1e-5, atol=1e-6)
    assert kernels.runtime_transforms == [], kernels.render()


def _seeds_after_conv(quantized: bool, second_reader: bool) -> set[str]:
    """A detection head's 1x1 convolution (NHWC) and bias, its channels split into
    (anchors, outputs) and the anchors moved ahead of the map: the names of the transposes
    `written_seeds` finds (dequantized data makes the convolution a quantized one;
    `second_reader` reads the sum elsewhere too)."""
    import numpy as np
    from tvm import relax

    from cl_validate.compile.passes.movement_chains import MovementChains
    from cl_validate.compile.passes.product_writes import written_seeds
    from cl_validate.ir import bindings, permute_axes

    rng = np.random.default_rng(0)
    x = relax.Var("x", relax.TensorType((1, 4, 4, 8), "int8" if quantized else "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            data: relax.Expr = x
            if quantized:
                data = bb.emit(relax.op.dequantize(x, relax.const(0.05, "float32"),
                                                   relax.const(0, "int32"), axis=-1))
            y = bb.emit(relax.op.nn.conv2d(
                data, relax.const(rng.normal(size=(6, 1, 1, 8)), "float32"),
                data_layout="NHWC", kernel_layout="OHWI"))
            y = bb.emit(relax.op.add(y, relax.const(rng.normal(size=(1, 1, 1, 6)), "float32")))
            anchors = bb.emit(relax.op.reshape(y, (1, 4, 4, 2, 3)))
            t = bb.emit(relax.op.permute_dims(anchors, [0, 3, 1, 2, 4]), name_hint="t")
            out = bb.emit_output(relax.Tuple([t, y]) if second_reader else t)
        bb.emit_func_output(out)
    func = bb.get()["main"]
    chains = MovementChains(func)
    sources = {b.var: b.value.args[0] for b in bindings(func)
               if permute_axes(b.value) is not None}
    return {str(v.name) for v in written_seeds(func, sources, chains.values, chains.uses)}


def test_a_float_convolutions_transpose_is_written_through_a_quantized_ones_is_not() -> None:
    assert _seeds_after_conv(quantized=False, second_reader=False) == {"t"}
    # IntegerCompute computes it in integers: StridedProducts never takes it
    assert _seeds_after_conv(quantized=True, second_reader=False) == set()
    # read before the transpose too: the product's result must exist as it is
    assert _seeds_after_conv(quantized=False, second_reader=True) == set()
