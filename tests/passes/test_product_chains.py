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

from typing import Any

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
    from cl_validate.compile.passes.product_chains import written_seeds
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


class LinearAttention(nn.Module):
    """EfficientViT's ReLU linear attention on a conv map: a 1x1 projection and its
    multi-scale aggregate (a depthwise 3x3) concatenated, transposed to (groups, tokens,
    3 * dim), q, k and v split from it, a ReLU on q and k and a pad on v between them and
    their matmuls, the heads merged back for a 1x1 projection; pooled (no output boundary)."""

    def __init__(self, dim: int = 4, heads: int = 2) -> None:
        super().__init__()
        self.dim = dim
        self.stem = nn.Conv2d(3, heads * dim, 3, 2, 1)
        self.qkv = nn.Conv2d(heads * dim, 3 * heads * dim, 1, bias=False)
        self.aggreg = nn.Conv2d(3 * heads * dim, 3 * heads * dim, 3, padding=1,
                                groups=3 * heads * dim, bias=False)
        self.proj = nn.Conv2d(2 * heads * dim, heads * dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.stem(x)
        b, _, h, w = t.shape
        qkv = self.qkv(t)
        qkv = torch.cat([qkv, self.aggreg(qkv)], dim=1)
        qkv = qkv.reshape(b, -1, 3 * self.dim, h * w).transpose(-1, -2)
        q, k, v = qkv.split(self.dim, dim=-1)
        q, k = torch.relu(q), torch.relu(k)
        v = torch.nn.functional.pad(v, (0, 1), mode="constant", value=1.0)
        out = q @ (k.transpose(-1, -2) @ v)
        out = out[..., :-1] / (out[..., -1:] + 1e-15)
        return (t + self.proj(out.transpose(-1, -2).reshape(b, -1, h, w))).mean((2, 3))


def test_linear_attention_reads_and_writes_through_its_transposes(tmp_path) -> None:
    """The transpose after the projection, carried past the ReLUs and the pad, is the three
    matmuls' reads; the heads' way back, carried up past the output's slices and division,
    is the last matmul's write: no transform is left (2 before)."""
    kernels = compile_nhwc_case(tmp_path, LinearAttention, (1, 3, 16, 16), rtol=1e-4,
                                atol=1e-5)
    assert kernels.runtime_transforms == [], kernels.render()


def _q_k_v_function() -> Any:
    """LinearAttention's q, k, v in Relax as the cleanup stage sees them (NHWC map)."""
    from tvm import relax

    x = relax.Var("x", relax.TensorType((1, 8, 8, 24), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            heads = bb.emit(relax.op.reshape(x, (64, 2, 12)))
            t = bb.emit(relax.op.permute_dims(heads, [1, 0, 2]))
            q, k, v = (bb.emit(relax.op.strided_slice(t, [2], [b], [b + 4]))
                       for b in (0, 4, 8))
            q, k = bb.emit(relax.op.nn.relu(q)), bb.emit(relax.op.nn.relu(k))
            v = bb.emit(relax.op.nn.pad(v, [0, 0, 0, 0, 0, 1], pad_value=1.0))
            kt = bb.emit(relax.op.permute_dims(k, [0, 2, 1]))
            vk = bb.emit(relax.op.matmul(kt, v))
            out = bb.emit_output(bb.emit(relax.op.matmul(q, vk)))
        bb.emit_func_output(out)
    return bb.get()["main"]


def test_reads_count_only_where_the_products_take_them() -> None:
    """Counted free, the matmuls' reads pay for carrying the transpose past the ReLUs and
    the pad; where StridedProducts takes no product (a GPU rule refusing them) the round
    that relied on them is tried again without them: never more transposes than before."""
    from cl_validate.compile.passes._util import runtime_cost
    from cl_validate.compile.passes.product_chains import cost_after_products
    from cl_validate.compile.passes.sink_rounds import sink_permutes

    func = _q_k_v_function()

    def every(_p: Any) -> bool:
        return True

    def none(_p: Any) -> bool:
        return False

    assert cost_after_products(func, every)[0] == 1  # the projection's transpose
    assert cost_after_products(sink_permutes(func, every), every)[0] == 0
    # refused, k's transpose counts too; carried down, q, k and v would be three
    assert cost_after_products(func, none)[0] == 2
    assert cost_after_products(sink_permutes(func, none), none)[0] == 2
    assert runtime_cost(sink_permutes(func, none)) == runtime_cost(sink_permutes(func))


def _normalized_output() -> Any:
    """A matmul's (groups, tokens, dim + 1) result divided by its last column, its groups
    moved after the tokens: EfficientViT's output, in Relax."""
    from tvm import relax

    a = relax.Var("a", relax.TensorType((2, 16, 4), "float32"))
    b = relax.Var("b", relax.TensorType((2, 4, 5), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [a, b]):
        with bb.dataflow():
            out = bb.emit(relax.op.matmul(a, b))
            num = bb.emit(relax.op.strided_slice(out, [2], [0], [4]))
            den = bb.emit(relax.op.strided_slice(out, [2], [4], [5]))
            den = bb.emit(relax.op.add(den, relax.const(1e-15, "float32")))
            ratio = bb.emit(relax.op.divide(num, den))
            res = bb.emit_output(bb.emit(relax.op.permute_dims(ratio, [1, 0, 2])))
        bb.emit_func_output(res)
    return bb.get()["main"]


def test_a_transpose_below_a_matmul_becomes_its_write_only_where_it_takes_it() -> None:
    """Carried up past the slices and the division, the transpose is the matmul's write
    (StridedProducts); where it takes no product, nothing moves. The values never change."""
    import numpy as np
    import tvm
    from tvm import relax

    from cl_validate.compile.passes._util import runtime_cost
    from cl_validate.compile.passes.product_chains import cost_after_products
    from cl_validate.compile.passes.sink_rounds import sink_permutes

    func = _normalized_output()
    assert cost_after_products(func, lambda _p: True)[0] == 1
    written = sink_permutes(func, lambda _p: True)
    assert cost_after_products(written, lambda _p: True)[0] == 0
    assert runtime_cost(sink_permutes(func, lambda _p: False)) == runtime_cost(func)

    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.random(shape, dtype="float32"))
            for shape in ((2, 16, 4), (2, 4, 5))]
    results = []
    for f in (func, written):
        exe = tvm.compile(tvm.IRModule({"main": f}), target="llvm")
        results.append(relax.VirtualMachine(exe, tvm.cpu())["main"](*args).numpy())
    np.testing.assert_array_equal(results[0], results[1])
