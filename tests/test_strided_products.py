"""Matmuls that read and write through the transposes around them (`StridedProducts`).

A matmul that is not attention (talking heads, cross-covariance attention, a raise that
declined) is surrounded by the model's head splits and merges; each was a transpose kernel
of its own. The product now reads its operands and writes its result through them: the
transposes are gone, the value is the matmul's, and on a GPU dlight's Matmul rule schedules
the product (checked statically: the rule is decided when compiling).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from torch import nn
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from cl_validate.compile.passes.product_index import STRIDED_DEPTH
from cl_validate.compile.passes.strided_products import (
    PRODUCT_ATTR,
    declined,
    find,
    strided_products,
)
from cl_validate.ir import count_permutes
from tests.conftest import benchmark_module
from tests.data.tiny_models import TalkingHeads

LLVM = tvm.target.Target({"kind": "llvm"})
CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})


def _case(tmp_path, shape: tuple[int, ...], pipeline: str = "nhwc"):
    from cl_validate.spec import load_case

    path = tmp_path / f"c_{pipeline.replace(':', '_')}.toml"
    path.write_text(f'model = "x:y"\npipeline = "{pipeline}"\n[[inputs]]\nname = "x"\n'
                    f'shape = {list(shape)}\n[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n')
    return load_case(path)


def without_strided_products(ctx):  # a pipeline: `nhwc` without the stage under test
    import tvm

    from cl_validate.compile.context import Stage
    from cl_validate.compile.passes import cleanup_passes
    from cl_validate.compile.pipeline import nhwc

    # and without SinkPermutes counting on it (no target: every transpose costs)
    return [Stage("cleanup", tvm.transform.Sequential(cleanup_passes())) if s.name == "cleanup"
            else s for s in nhwc(ctx) if s.name != "strided_products"]


def _compiled(model: nn.Module, shape: tuple[int, ...], tmp_path, target: str = "llvm",
              pipeline: str = "nhwc"):
    """(kernel list, outputs of the llvm program, PyTorch's) of `model` as a case."""
    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.execute import run_torch, run_tvm
    from cl_validate.session.inputs import make_inputs, torch_inputs

    case = _case(tmp_path, shape, pipeline)
    torch.manual_seed(0)
    model = model.eval()
    arrays = make_inputs(case)
    tensors = torch_inputs(case, arrays)
    front = export_and_import(model, case, tensors)
    compiled = compile_case(front, case, target, build=target == "llvm")
    got = run_tvm(compiled.executable, case, arrays, tvm.cpu()) if target == "llvm" else None
    return read_kernel_list(compiled), got, run_torch(model, tensors)


@pytest.mark.compile
def test_talking_heads_lose_every_transpose_and_compute_the_same(tmp_path):
    """Five transposes around CaiT's matmuls before: q, k and v into heads (one, shared by
    the three), the scores heads-last for each Linear and back, the output's heads merged.
    None after: the qkv Linear writes its result (bias added) heads-first, the products
    read and write the scores in the order each Linear wants, the output is read merged.
    The program computes what PyTorch does, exactly as it did with the transposes."""
    model = TalkingHeads()
    kernels, got, want = _compiled(model, (1, 5, 8), tmp_path)
    before, got_before, _ = _compiled(model, (1, 5, 8), tmp_path, pipeline=(
        "tests.test_strided_products:without_strided_products"))
    assert len(before.runtime_transforms) == 5, before.render()
    assert kernels.runtime_transforms == [], kernels.render()
    for g, b, w in zip(got, got_before, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(g, b)  # the same products summed in the same order


@pytest.mark.compile
def test_on_a_gpu_dlights_matmul_rule_schedules_every_product(tmp_path):
    """Decided when compiling, so a CPU runner sees it: each product is a Matmul kernel (a
    product dlight would leave to Fallback keeps its transposes instead)."""
    kernels, _, _ = _compiled(TalkingHeads(), (1, 5, 8), tmp_path, target="cuda")
    products = [k for k in kernels.kernels if "matmul" in k.name]
    assert len(products) == 6, kernels.render()  # qkv, q·kᵀ, proj_l, proj_w, ·v, proj
    assert {k.schedule for k in products} == {"Matmul"}, kernels.render()
    assert kernels.runtime_transforms == [], kernels.render()


class _Patches(nn.Module):
    """MobileViT's unfold and fold around a transformer: a pointwise convolution, the map cut
    into 2x2 patches (pixels of one patch position as a sequence of tokens), a LayerNorm
    over the channels, the patches folded back, a pointwise convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(8, 8, 1), nn.Conv2d(8, 8, 1)
        self.stem, self.norm = nn.Conv2d(3, 8, 3, padding=1), nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c1(self.stem(x))
        b, c, h, w = y.shape
        p = y.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 3, 5, 2, 4, 1)
        p = self.norm(p.reshape(b, 4, h * w // 4, c))
        y = p.reshape(b, 2, 2, h // 2, w // 2, c).permute(0, 5, 3, 1, 4, 2).reshape(b, c, h, w)
        return self.c2(y)


@pytest.mark.compile
@pytest.mark.parametrize("target", ["llvm", "cuda"])
def test_a_pointwise_convolution_reads_the_folded_patches_in_place(tmp_path, target):
    """A 1x1 convolution on NHWC data is a Linear over the channels: the last one reads the
    folded patches in place, the first writes the unfolded ones (SinkPermutes leaves the
    unfold where that write takes it). What stays is what it would write down its columns
    (slower on llvm than the transpose): the NCHW output; and the input. On a GPU the
    products are Matmul kernels."""
    model = _Patches()
    kernels, got, want = _compiled(model, (1, 3, 8, 8), tmp_path, target=target)
    sources = [t.attribution.source or "" for t in kernels.runtime_transforms]
    assert len(sources) == 2, kernels.render()
    convs = [k for k in kernels.kernels if k.name.startswith(("conv2d", "fused_conv2d"))]
    assert len(convs) == 3, kernels.render()  # the stem, c1 and c2 (the product)
    if target == "cuda":
        assert {k.schedule for k in convs} == {"Matmul"}, kernels.render()
        return
    before, _, _ = _compiled(model, (1, 3, 8, 8), tmp_path, pipeline=(
        "tests.test_strided_products:without_strided_products"))
    assert len(before.runtime_transforms) == 4, before.render()
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


class _Columns(nn.Module):
    """Axial-DeepLab's attention along the columns, its projection alone: the map viewed as
    ``(N·W, C, H)`` (``permute(0, 3, 1, 2)``), a pointwise ``Conv1d`` over the channels, the
    result viewed back as a map."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.out = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 1)
        self.qkv = nn.Conv1d(8, 8, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        n, c, h, w = y.shape
        t = self.qkv(y.permute(0, 3, 1, 2).reshape(n * w, c, h))
        return self.out(t.reshape(n, w, c, h).permute(0, 2, 3, 1))


@pytest.mark.compile
@pytest.mark.parametrize("target", ["llvm", "cuda"])
def test_a_pointwise_conv1d_reads_and_writes_the_columns_in_place(tmp_path, target):
    """A 1-wide Conv1d on NWC data is a Linear over the channels too: it reads the map's
    columns where the NHWC convolution wrote them and writes its result back as the map;
    only the NCHW input's and output's transforms stay (without StridedProducts the
    columns' view is a transpose of its own)."""
    model = _Columns()
    kernels, got, want = _compiled(model, (1, 3, 8, 8), tmp_path, target=target)
    assert len(kernels.runtime_transforms) == 2, kernels.render()
    products = [k for k in kernels.kernels if k.name.startswith(("conv1d", "fused_conv1d"))]
    assert len(products) == 1, kernels.render()
    if target == "cuda":
        assert products[0].schedule == "Matmul", kernels.render()
        return
    before, _, _ = _compiled(model, (1, 3, 8, 8), tmp_path, pipeline=(
        "tests.test_strided_products:without_strided_products"))
    assert len(before.runtime_transforms) == 3, before.render()
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_a_depth_a_view_merged_from_two_axes_is_read_as_before():
    """XCiT's projection: heads merged into the Linear's input channels after a transpose.
    Read in place, the summed depth would jump every head (``k // 4``, ``k % 4``): slower
    on a CPU than the transpose it saves, so that operand keeps its transpose."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((4, 2, 6), "float32"), w: R.Tensor((8, 3), "float32")
                 ) -> R.Tensor((6, 3), "float32"):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                t = R.permute_dims(x, axes=[2, 1, 0])
                a = R.reshape(t, R.shape([6, 8]))
                y = R.matmul(a, w)
                R.output(y)
            return y

    assert find(Before["main"]) == []
    tvm.ir.assert_structural_equal(strided_products(Before, LLVM), Before)
    # the transpose stays as what it is: it reorders the summed axis itself (a channel
    # shuffle before a pointwise convolution is the model's data movement, at its floor),
    # which any kernel pays, so it is not said to be kept by this pass
    assert declined(Before["main"]) == {}


def test_a_depth_of_axes_next_to_each_other_in_memory_is_read_in_place():
    """Restormer's v: a head's share of the channels summed (``h * 4 + k``), or a map's H and
    W merged into tokens (``k // 4``, ``k % 4`` of axes next to each other in NHWC): one
    stride through memory either way, so the matmuls read them in place."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 4, 4, 8), "float32"), p: R.Tensor((2, 4, 4), "float32"),
                 w: R.Tensor((16, 3), "float32")):
            R.func_attr({"num_input": 2})
            with R.dataflow():
                t = R.permute_dims(x, axes=[0, 3, 1, 2])  # (1, 8, 4, 4): NCHW
                heads = R.reshape(t, R.shape([2, 4, 16]))  # (heads, channels, tokens)
                o = R.matmul(p, heads)  # sums a head's 4 channels
                t2 = R.permute_dims(x, axes=[0, 3, 1, 2])
                tokens = R.reshape(t2, R.shape([8, 16]))
                y = R.matmul(tokens, w)  # sums the 16 pixels (H and W merged)
                out = (o, y)
                R.output(out)
            return out

    x = np.random.default_rng(0).standard_normal((1, 4, 4, 8)).astype("float32")
    p = np.random.default_rng(1).standard_normal((2, 4, 4)).astype("float32")
    w = np.random.default_rng(2).standard_normal((16, 3)).astype("float32")
    assert len(find(Before["main"])) == 2  # both read x in place
    after = strided_products(Before, LLVM)
    assert count_permutes(after) == 0, after
    for g, r in zip(_run_all(after, [x, p, w]), _run_all(Before, [x, p, w]), strict=True):
        np.testing.assert_array_equal(g, r)


def _q_times_k(tokens: int) -> tvm.IRModule:
    """Restormer's ``q @ kᵀ`` summed over channels-last tokens, as
    benchmarks/strided_depth.py times it: q (heads, depth, tokens) and kᵀ (heads, tokens,
    depth), both permuted from (tokens, heads, depth) computed at run time."""
    return benchmark_module("strided_depth").q_times_k(tokens)


@pytest.mark.parametrize("tokens", [STRIDED_DEPTH, 8 * STRIDED_DEPTH])
def test_a_long_sum_strided_through_both_operands_keeps_one_transpose(tokens):
    """Read in place, both operands step a whole token (heads x depth floats) per term of the
    sum: two new cache lines a term, where the matmul reads its rows' operand contiguously.
    A short sum's lines stay in cache from one column to the next and both are read in
    place; a long one (Restormer's 16384 tokens: 20.4 ms against 13.2 + 0.65 ms) keeps q's
    transpose, and k is read in place."""
    mod = _q_times_k(tokens)
    (product,) = find(mod["main"])
    long = tokens > STRIDED_DEPTH
    assert bool(product.reads[0]) is not long and product.reads[1], product
    after = strided_products(mod, LLVM)
    assert count_permutes(after) == int(long), after
    whys = list(declined(mod["main"]).values())
    assert whys == ([f"its sum over {tokens} (> {STRIDED_DEPTH}) would read both operands "
                     "strided, neither contiguous"] if long else []), whys
    a = np.random.default_rng(0).standard_normal((1, tokens, 16)).astype("float32")
    np.testing.assert_array_equal(_run(after, [a]), _run(mod, [a]))


def test_a_result_written_down_its_rows_when_their_operand_is_the_smaller():
    """XCiT's probabilities times v, written back to tokens: the result's innermost axis
    is the matmul's rows. Each column then sweeps the rows' operand again, which is cheap
    when it is the smaller one ((2, 4, 4) against (2, 4, 16)); a large one (a pointwise
    convolution's input against its weight) keeps its transpose."""

    def module(rows: int, cols: int) -> tvm.IRModule:
        bb = relax.BlockBuilder()
        a = relax.Var("a", relax.TensorType([2, rows, 4], "float32"))
        b = relax.Var("b", relax.TensorType([2, 4, cols], "float32"))
        with bb.function("main", [a, b], attrs={"num_input": 2}):
            with bb.dataflow():
                o = bb.emit(relax.op.matmul(a, b))
                out = bb.emit_output(relax.op.permute_dims(o, [2, 0, 1]))
            bb.emit_func_output(out)
        return bb.get()

    small, large = module(4, 16), module(16, 4)
    assert len(find(small["main"])) == 1 and find(large["main"]) == []
    assert declined(small["main"]) == {}
    assert list(declined(large["main"]).values()) == [
        "it would write its result down its rows, sweeping the larger (rows') operand again "
        "for each column"]
    a = np.random.default_rng(0).standard_normal((2, 4, 4)).astype("float32")
    b = np.random.default_rng(1).standard_normal((2, 4, 16)).astype("float32")
    np.testing.assert_array_equal(_run(strided_products(small, LLVM), [a, b]),
                                  _run(small, [a, b]))


def _run_all(mod: tvm.IRModule, args: list[np.ndarray]) -> list[np.ndarray]:
    ex = tvm.compile(relax.transform.LegalizeOps()(mod), target=LLVM)
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*map(tvm.runtime.tensor, args))
    return [o.numpy() for o in out]


def test_a_transpose_read_elsewhere_too_stays():
    """The transposed k is also an output: the transpose runs anyway, the matmul reads it."""

    @I.ir_module
    class Before:
        @R.function
        def main(q: R.Tensor((2, 5, 4), "float32"), k: R.Tensor((2, 5, 4), "float32")):
            R.func_attr({"num_input": 2})
            with R.dataflow():
                kt = R.permute_dims(k, axes=[0, 2, 1])
                s = R.matmul(q, kt)
                out = (s, kt)
                R.output(out)
            return out

    assert find(Before["main"]) == []
    assert declined(Before["main"]) == {}  # not this pass's to take: no decline to name


class _ColumnsBack(nn.Module):
    """CCNet's columns without a softmax: each column's values (B·W, C, H) times a run-time
    (H, H) matrix, the result viewed and permuted back to the map. C is larger than H, so
    writing the map from the product would sweep the values again for each column."""

    def __init__(self) -> None:
        super().__init__()
        self.value, self.query = nn.Conv2d(32, 32, 1), nn.Conv2d(32, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        v = self.value(x).permute(0, 3, 1, 2).reshape(b * w, c, h)
        q = self.query(x).permute(0, 3, 2, 1).reshape(b * w, h, 2)
        mix = torch.sigmoid(q @ q.transpose(1, 2))
        out = torch.bmm(v, mix.permute(0, 2, 1)).view(b, w, c, h).permute(0, 2, 3, 1)
        return out + x


@pytest.mark.compile
def test_a_transpose_the_pass_declined_says_so_and_why_in_the_kernel_list(tmp_path):
    """Issue 42, item 3: the write-back transpose stays because StridedProducts declined it,
    not because the model permutes: its label names the pass and the reason, and keeps the
    model's line; the program still computes what PyTorch does."""
    from cl_validate.checks.layout_transforms import next_step
    from cl_validate.measurements.attribution import Reason

    kernels, got, want = _compiled(_ColumnsBack(), (1, 32, 8, 8), tmp_path)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    kept = [t.attribution for t in kernels.runtime_transforms
            if t.attribution.reason is Reason.DECLINED]
    assert len(kept) == 1, kernels.render()
    assert kept[0].relax_op == "StridedProducts" and "permute" in (kept[0].source or "")
    assert kept[0].describe().startswith(
        "kept by StridedProducts, which declined it: it would write its result down its "
        "rows"), kept[0].describe()
    # and the verdict's next step says so, ahead of "the model permutes itself"
    step = next_step(_case(tmp_path, (1, 32, 8, 8)), "llvm", kernels)
    assert step.startswith("1 transform(s) kept by StridedProducts, which declined them: it "
                           "would write"), step


def _run(mod: tvm.IRModule, args: list[np.ndarray]) -> np.ndarray:
    ex = tvm.compile(relax.transform.LegalizeOps()(mod), target=LLVM)
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*map(tvm.runtime.tensor, args))
    return out.numpy()


@st.composite
def _products(draw):  # type: ignore[no-untyped-def]
    """A matmul between head-split operands: each operand's (batch, tokens, heads, depth)
    permuted into (batch, heads, rows, cols) by a random order of the batch-like axes, k
    transposed or not, a broadcast of one batch, the result merged back or not."""
    b, h = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 3]))
    m, n, d = (draw(st.integers(1, 5)) for _ in range(3))
    a_perm = draw(st.sampled_from([(0, 2, 1, 3), (2, 0, 1, 3)]))
    b_transposed = draw(st.booleans())
    b_batch = draw(st.sampled_from([b, 1]))
    merge = draw(st.booleans())
    # an epilogue before the merge: op, the constant first or not, its broadcast shape
    epilogue = draw(st.sampled_from([None, "add", "subtract", "multiply", "divide"]))
    const_first = draw(st.booleans())
    const_shape = draw(st.sampled_from([(n,), (h, 1, n), (1, 1, m, 1), (b, h, m, n)]))
    return (b, h, m, n, d, a_perm, b_transposed, b_batch, merge,
            (epilogue, const_first, const_shape))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_products())
# a constant divided by a product near 0: float32's rounding of the product, amplified (CI)
@example((2, 3, 4, 3, 4, (0, 2, 1, 3), True, 2, False, ("divide", True, (3,))))
def test_every_product_it_takes_is_the_matmul(drawn):
    """Against numpy's matmul in float64 on the same operands: exact to float32 rounding for
    every permutation, transposed operand, batch broadcast, epilogue with a constant (a
    bias, a scale) and merged output drawn; and every transpose of the chains is gone."""
    b, h, m, n, d, a_perm, b_transposed, b_batch, merge, (op, const_first, cshape) = drawn
    a_src = (b, m, h, d) if a_perm == (0, 2, 1, 3) else (h, b, m, d)
    a_axes = [0, 2, 1, 3] if a_perm == (0, 2, 1, 3) else [1, 0, 2, 3]
    b_src = (b_batch, n, h, d) if b_transposed else (b_batch, d, h, n)
    b_axes = [0, 2, 3, 1] if b_transposed else [0, 2, 1, 3]
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(a_src, "float32"))
    y = relax.Var("y", relax.TensorType(b_src, "float32"))
    with bb.function("main", [x, y], {"num_input": 2}):
        with bb.dataflow():
            qa = bb.emit(relax.op.permute_dims(x, a_axes))
            kb = bb.emit(relax.op.permute_dims(y, b_axes))
            out = bb.emit(relax.op.matmul(qa, kb))
            const = np.random.default_rng(1).uniform(0.5, 2.0, cshape).astype("float32")
            if op is not None:
                pair = (relax.const(const), out) if const_first else (out, relax.const(const))
                out = bb.emit(getattr(relax.op, op)(*pair))
            if merge:
                out = bb.emit(relax.op.reshape(relax.op.permute_dims(out, [0, 2, 1, 3]),
                                               (b, m, h * n)))
            bb.emit_output(out)
        bb.emit_func_output(out)
    mod = bb.get()
    new = strided_products(mod, LLVM)
    assert count_permutes(new) == 0, new
    assert all(PRODUCT_ATTR in f.attrs for gv, f in new.functions_items()
               if isinstance(f, tvm.tirx.PrimFunc))
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype("float32") for s in (a_src, b_src)]
    want = np.transpose(args[0], a_axes).astype(np.float64) @ np.transpose(args[1], b_axes)
    if op is not None:
        want = getattr(np, op)(*((const, want) if const_first else (want, const)))
    if merge:
        want = want.transpose(0, 2, 1, 3).reshape(b, m, h * n)
    got = _run(new, args).astype(np.float64)
    if merge:  # back to the product's own axes
        got = got.reshape(b, m, h, n).transpose(0, 2, 1, 3)
        want = want.reshape(b, m, h, n).transpose(0, 2, 1, 3)
    if op == "divide" and const_first:  # c / p: p's float32 rounding, amplified near p = 0
        got, want = const / got, const / want
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(_run(new, args), _run(mod, args))
