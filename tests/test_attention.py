"""Attention at the floor: SDPA imported as one attention op, hand-written attention raised to
it (golden Before/Expected IR), the attention kernel's numerics and its GPU schedule, whole
attention blocks as libraries write them compiled to their boundaries only, and every
transform that is left named for what put it there."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import tvm
from torch import nn
from tvm import relax
from tvm.script import relax as R

from cl_validate.compile.attention import ATTENTION_ATTR, attention_legalizations, attention_te
from cl_validate.compile.passes.raise_attention import RaiseAttention, find
from cl_validate.compile.schedule import schedule_gpu
from cl_validate.compile.tvm_targets import make_target
from cl_validate.ir import SCHEDULE_ATTR, bindings, op_name, origin_parts
from cl_validate.measurements.attribution import Reason
from cl_validate.spec.targets import BUILTIN


# --------------------------------------------------------------------------------------------
# RaiseAttention: golden IR
# --------------------------------------------------------------------------------------------
def _passed(mod: tvm.IRModule) -> tvm.IRModule:
    return relax.transform.CanonicalizeBindings()(RaiseAttention()(mod))


def _ops(mod: tvm.IRModule) -> list[str]:
    return [op_name(b.value) or "" for b in bindings(mod["main"])]


def test_hand_written_attention_becomes_one_attention_op():
    """``softmax((q * s) @ kᵀ) @ v`` on (B, heads, L, E): one nn.attention in BSHD with the
    scale taken out of q; the head-major operands viewed as BSHD by permutes that the
    cleanup cancels against the model's own head split."""

    @tvm.script.ir_module
    class Before:
        @R.function
        def main(q: R.Tensor((1, 2, 5, 4), "float32"), k: R.Tensor((1, 2, 5, 4), "float32"),
                 v: R.Tensor((1, 2, 5, 3), "float32")) -> R.Tensor((1, 2, 5, 3), "float32"):
            with R.dataflow():
                qs = R.multiply(q, R.const(0.5, "float32"))
                kt = R.permute_dims(k, axes=[0, 1, 3, 2])
                s = R.matmul(qs, kt)
                p = R.nn.softmax(s, axis=3)
                o = R.matmul(p, v)
                R.output(o)
            return o

    @tvm.script.ir_module
    class Expected:
        @R.function
        def main(q: R.Tensor((1, 2, 5, 4), "float32"), k: R.Tensor((1, 2, 5, 4), "float32"),
                 v: R.Tensor((1, 2, 5, 3), "float32")) -> R.Tensor((1, 2, 5, 3), "float32"):
            with R.dataflow():
                kt = R.permute_dims(k, axes=[0, 1, 3, 2])
                q4 = R.permute_dims(q, axes=[0, 2, 1, 3])
                kk = R.permute_dims(kt, axes=[0, 1, 3, 2])
                k4 = R.permute_dims(kk, axes=[0, 2, 1, 3])
                v4 = R.permute_dims(v, axes=[0, 2, 1, 3])
                a = R.nn.attention(q4, k4, v4, scale=0.5)
                o = R.permute_dims(a, axes=[0, 2, 1, 3])
                R.output(o)
            return o

    after = _passed(Before)
    tvm.ir.assert_structural_equal(after, relax.transform.CanonicalizeBindings()(Expected),
                                   map_free_vars=True)
    # the permutes it inserted say who did
    marked = [b.value for b in bindings(after["main"]) if origin_parts(b.value)]
    assert marked and all(p.who == "cl_validate" for v in marked for p in origin_parts(v))


def test_channel_major_attention_and_additive_bias_are_raised():
    """YOLO11 PSA's ``(qᵀ @ k) * s → softmax → v @ attnᵀ`` (the output channel-major) with a
    bias added to the scores: the bias is the attention's, the output comes back transposed."""

    @tvm.script.ir_module
    class Before:
        @R.function
        def main(q: R.Tensor((1, 2, 4, 6), "float32"), k: R.Tensor((1, 2, 4, 6), "float32"),
                 v: R.Tensor((1, 2, 3, 6), "float32"), b: R.Tensor((1, 2, 6, 6), "float32")
                 ) -> R.Tensor((1, 2, 3, 6), "float32"):
            with R.dataflow():
                qt = R.permute_dims(q, axes=[0, 1, 3, 2])
                s = R.matmul(qt, k)
                s2 = R.multiply(s, R.const(0.25, "float32"))
                s3 = R.add(s2, b)
                p = R.nn.softmax(s3, axis=-1)
                pt = R.permute_dims(p, axes=[0, 1, 3, 2])
                o = R.matmul(v, pt)
                R.output(o)
            return o

    after = _passed(Before)
    ops = _ops(after)
    assert ops.count("relax.nn.attention_bias") == 1 and "relax.matmul" not in ops
    assert "relax.nn.softmax" not in ops
    att = next(b.value for b in bindings(after["main"]) if op_name(b.value) ==
               "relax.nn.attention_bias")
    assert len(att.args) == 4 and float(att.attrs.scale) == 0.25  # q, k, v and the bias
    _same_numbers(Before, after)


def test_three_d_heads_of_multihead_attention_read_sequence_major():
    """nn.MultiheadAttention's weights path: (L, N·heads, E) transposed to (N·heads, L, E),
    ``bmm``, softmax, ``bmm``: raised with the N·heads axis as the heads of one batch, so the
    model's transposes cancel against the attention's view."""

    @tvm.script.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((7, 4, 8), "float32")) -> R.Tensor((4, 7, 8), "float32"):
            with R.dataflow():
                q = R.permute_dims(x, axes=[1, 0, 2])
                kt = R.permute_dims(q, axes=[0, 2, 1])
                s = R.matmul(q, kt)
                p = R.nn.softmax(s, axis=2)
                o = R.matmul(p, q)
                R.output(o)
            return o

    after = relax.transform.CanonicalizeBindings()(_passed(Before))
    att = next(b for b in bindings(after["main"]) if op_name(b.value) == "relax.nn.attention")
    assert [int(d) for d in att.var.ty.shape] == [1, 7, 4, 8]  # one batch, 4 heads, BSHD
    _same_numbers(Before, after)


def test_attention_whose_probabilities_are_read_elsewhere_stays_and_says_why():
    @tvm.script.ir_module
    class Before:
        @R.function
        def main(q: R.Tensor((1, 2, 5, 4), "float32"), k: R.Tensor((1, 2, 4, 5), "float32"),
                 v: R.Tensor((1, 2, 5, 3), "float32")):
            with R.dataflow():
                s = R.matmul(q, k)
                p = R.nn.softmax(s, axis=3)
                o = R.matmul(p, v)
                w = R.mean(p, axis=[1])  # the attention weights, returned
                R.output(o, w)
            return (o, w)

    matches, left = find(Before["main"])
    assert not matches and len(left) == 1
    assert left[0].why == ("its attention probabilities are read by 2 ops (matmul, mean), "
                           "not by one product with v alone")
    tvm.ir.assert_structural_equal(RaiseAttention()(Before), Before)


def test_probabilities_returned_or_read_by_several_products_are_named_once():
    """The note says what reads the probabilities: the model's outputs (attention weights),
    or more products (Nyströmformer's pseudo-inverse reads its softmax six times): one note
    per softmax, not one per product that reads it."""

    @tvm.script.ir_module
    class Returned:
        @R.function
        def main(q: R.Tensor((1, 2, 5, 4), "float32"), k: R.Tensor((1, 2, 4, 5), "float32"),
                 v: R.Tensor((1, 2, 5, 3), "float32")):
            with R.dataflow():
                s = R.matmul(q, k)
                p = R.nn.softmax(s, axis=3)
                o = R.matmul(p, v)
                R.output(o, p)
            return (o, p)

    @tvm.script.ir_module
    class Iterated:
        @R.function
        def main(q: R.Tensor((1, 2, 5, 4), "float32"), k: R.Tensor((1, 2, 4, 5), "float32"),
                 v: R.Tensor((1, 2, 5, 5), "float32")):
            with R.dataflow():
                s = R.matmul(q, k)
                p = R.nn.softmax(s, axis=3)
                a = R.matmul(p, v)
                b = R.matmul(p, a)
                c = R.matmul(p, b)
                R.output(c)
            return c

    @tvm.script.ir_module
    class Ranks:
        @R.function
        def main(q: R.Tensor((1, 2, 5, 4), "float32"), k: R.Tensor((1, 2, 4, 5), "float32"),
                 v: R.Tensor((2, 5, 3), "float32")):
            with R.dataflow():
                s = R.matmul(q, k)
                p = R.nn.softmax(s, axis=3)
                o = R.matmul(p, v)
                R.output(o)
            return o

    _, left = find(Ranks["main"])  # one note, at the softmax, with the ranks
    assert [(x.source, x.why) for x in left] == [
        ("p", "q, k and v of unknown or different ranks (4, 4, 3)")]
    _, left = find(Returned["main"])
    assert [x.why for x in left] == [
        "its attention probabilities are also returned by the model (attention weights)"]
    _, left = find(Iterated["main"])
    assert [x.why for x in left] == ["its attention probabilities are read by 3 ops "
                                     "(3x matmul), not by one product with v alone"]


class _TwoWeights(nn.Module):
    """Two attentions in one module, each returning its attention weights (in a block, as a
    model has them: the notes name the block)."""

    def __init__(self) -> None:
        super().__init__()
        self.block = _TwoWeightsBlock()

    def forward(self, x: torch.Tensor):
        return self.block(x)


class _TwoWeightsBlock(nn.Module):

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x: torch.Tensor):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        p1 = (q @ k.transpose(-2, -1)).softmax(-1)
        p2 = (k @ q.transpose(-2, -1)).softmax(-1)
        return p1 @ v + p2 @ v, p1, p2


def test_a_modules_softmaxes_left_for_one_reason_are_one_line(tmp_path):
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.inputs import make_inputs, torch_inputs
    from cl_validate.spec import load_case

    path = tmp_path / "c.toml"
    path.write_text('model = "x:y"\n[[inputs]]\nname = "x"\nshape = [1, 5, 8]\n')
    case = load_case(path)
    torch.manual_seed(0)
    tensors = torch_inputs(case, make_inputs(case))
    compiled = compile_case(export_and_import(_TwoWeights().eval(), case, tensors), case, "llvm")
    assert compiled.attention_left == [
        "attention at block (softmax) left as matmuls: its attention probabilities are also "
        "returned "
        "by the model (attention weights) (2 softmaxes)"], compiled.attention_left


def test_talking_heads_between_matmul_and_softmax_stay_and_say_why():
    """EfficientFormerV2's talking heads: a 1×1 conv mixes the heads' scores before the
    softmax. That is not attention's computation: the matmuls stay and the note names it."""

    @tvm.script.ir_module
    class Before:
        @R.function
        def main(q: R.Tensor((1, 2, 5, 4), "float32"), k: R.Tensor((1, 2, 4, 5), "float32"),
                 v: R.Tensor((1, 2, 5, 3), "float32"), w: R.Tensor((2, 2, 1, 1), "float32")
                 ) -> R.Tensor((1, 2, 5, 3), "float32"):
            with R.dataflow():
                s = R.matmul(q, k)
                mixed = R.nn.conv2d(s, w)
                p = R.nn.softmax(mixed, axis=3)
                o = R.matmul(p, v)
                R.output(o)
            return o

    matches, left = find(Before["main"])
    assert not matches and [x.why.split(" between")[0] for x in left] == ["nn.conv2d"]
    tvm.ir.assert_structural_equal(RaiseAttention()(Before), Before)


def test_each_refusal_names_what_stands_in_the_way():
    """A scale computed at run time, and a softmax over the queries rather than the keys:
    each note says which, with no guess."""

    @tvm.script.ir_module
    class RunTimeScale:
        @R.function
        def main(q: R.Tensor((1, 2, 5, 4), "float32"), k: R.Tensor((1, 2, 4, 5), "float32"),
                 v: R.Tensor((1, 2, 5, 3), "float32"), t: R.Tensor((), "float32")):
            with R.dataflow():
                s = R.matmul(q, k)
                p = R.nn.softmax(R.multiply(s, t), axis=3)
                o = R.matmul(p, v)
                R.output(o)
            return o

    @tvm.script.ir_module
    class OverQueries:
        @R.function
        def main(q: R.Tensor((1, 2, 5, 4), "float32"), k: R.Tensor((1, 2, 4, 5), "float32"),
                 v: R.Tensor((1, 2, 5, 3), "float32")):
            with R.dataflow():
                s = R.matmul(q, k)
                p = R.nn.softmax(s, axis=2)
                o = R.matmul(p, v)
                R.output(o)
            return o

    @tvm.script.ir_module
    class ContextPool:  # GCNet's context modeling: a softmax over a conv's map, no attention
        @R.function
        def main(x: R.Tensor((1, 4, 3, 3), "float32"), t: R.Tensor((), "float32"),
                 w: R.Tensor((1, 4, 1, 1), "float32")):
            R.func_attr({"num_input": 2})
            with R.dataflow():
                c = R.nn.conv2d(x, w)
                s = R.multiply(R.reshape(c, R.shape([1, 1, 9])), t)
                p = R.nn.softmax(s, axis=2)
                o = R.matmul(R.reshape(x, R.shape([1, 4, 9])), R.permute_dims(p, [0, 2, 1]))
                R.output(o)
            return o

    assert find(ContextPool["main"]) == ({}, [])  # not between two products: no note
    assert [x.why for x in find(RunTimeScale["main"])[1]] == [
        "a scale computed at run time on the scores (not a constant)"]
    assert [x.why for x in find(OverQueries["main"])[1]] == [
        "a softmax over axis 2 of 4, not over the keys (the last)"]


def _same_numbers(before: tvm.IRModule, after: tvm.IRModule) -> None:
    """Both modules built for this CPU give the same outputs (to float32 rounding)."""
    rng = np.random.default_rng(0)
    args = [rng.standard_normal([int(d) for d in p.ty.shape]).astype("float32")
            for p in before["main"].params]
    outs = []
    for mod in (before, after):
        ex = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
        res = relax.VirtualMachine(ex, tvm.cpu())["main"](*map(tvm.runtime.tensor, args))
        outs.append(res.numpy())
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------
# The attention kernel: numerics, and its GPU schedule
# --------------------------------------------------------------------------------------------
def _attention_module(q, k, v, bias=None, scale=None, causal=None,
                      dtype: str = "float32") -> tvm.IRModule:
    bb = relax.BlockBuilder()
    params = [relax.Var(n, relax.TensorType(s, dtype)) for n, s in
              (("q", q), ("k", k), ("v", v), *((("bias", bias),) if bias else ()))]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.attention(
                *params[:3], bias=params[3] if bias else None, scale=scale,
                causal_mask=causal)))
        bb.emit_func_output(out)
    return bb.get()


def _reference(q, k, v, bias, scale, causal) -> np.ndarray:
    """Attention in float64, BSHD, with PyTorch's handling of fully masked rows (zeros)."""
    q, k, v = (x.astype(np.float64).transpose(0, 2, 1, 3) for x in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if bias is not None:
        s = s + bias
    if causal:
        below = s.shape[-1] - s.shape[-2] if causal == "BottomRight" else 0
        s = np.where(np.tril(np.ones(s.shape[-2:], bool), k=below), s, -np.inf)
    m = s.max(-1, keepdims=True)
    w = np.where(np.isneginf(m), 0.0, np.exp(s - np.where(np.isneginf(m), 0, m)))
    total = w.sum(-1, keepdims=True)
    return (np.where(total == 0, 0, w / np.where(total == 0, 1, total)) @ v).transpose(
        0, 2, 1, 3)


@pytest.mark.parametrize("case", ["plain", "bias", "causal", "masked-row"])
def test_the_attention_kernel_computes_attention(case):
    """The kernel (as legalized for llvm) against a float64 reference: bias broadcast, causal
    mask, a row masked entirely gives zeros."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 7, 3, 8)).astype("float32")
    k = rng.standard_normal((2, 5, 3, 8)).astype("float32")
    v = rng.standard_normal((2, 5, 3, 6)).astype("float32")
    bias = None
    if case == "bias":
        bias = rng.standard_normal((1, 3, 7, 5)).astype("float32")
    if case == "masked-row":
        bias = np.zeros((2, 1, 7, 5), "float32")
        bias[1, 0, 2, :] = -np.inf
    scale = 0.3 if case != "plain" else None
    causal = "TopLeft" if case == "causal" else None
    tq, tk, tv = (tvm.te.placeholder(x.shape, "float32", n) for x, n in
                  ((q, "q"), (k, "k"), (v, "v")))
    tb = tvm.te.placeholder(bias.shape, "float32", "b") if bias is not None else None
    out = attention_te(tq, tk, tv, tb, scale, causal)
    func = tvm.te.create_prim_func([tq, tk, tv, *([tb] if tb is not None else []), out])
    lib = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target({"kind": "llvm"}))
    res = tvm.runtime.tensor(np.zeros([int(d) for d in out.shape], "float32"))
    lib["main"](*map(tvm.runtime.tensor, [q, k, v, *([bias] if bias is not None else [])]),
                res)
    want = _reference(q, k, v, bias, scale, causal)
    np.testing.assert_allclose(res.numpy(), want, rtol=1e-5, atol=1e-5)
    if case == "masked-row":
        assert not res.numpy()[1, 2, 0].any()


def test_on_a_cpu_one_kernel_on_a_gpu_one_tiled_kernel_or_parts_dlight_schedules():
    """llvm: one PrimFunc (tagged), no transpose kernel. cuda: one kernel with K and V in
    shared-memory tiles and an online softmax (written scheduled, named `Attention` in the
    kernel list), at any length; where a head dimension leaves its output phase no even cut
    among the threads (3 here), the two products and the softmax between them, each scheduled
    by dlight's own rules (Matmul, GeneralReduction, Matmul). Both read BSHD in place and
    build."""
    for shape, want in (((1, 197, 6, 64), {"attention_tiled": "Attention"}),
                        ((1, 8192, 1, 16), {"attention_tiled": "Attention"}),
                        ((1, 197, 6, 3), {"attention_scores": "Matmul",
                                          "attention_softmax": "GeneralReduction",
                                          "attention_output": "Matmul"})):
        mod = _attention_module(shape, shape, shape)
        with tvm.target.Target({"kind": "llvm"}):
            legal = relax.transform.LegalizeOps(
                customize_legalize_map=attention_legalizations())(mod)
        funcs = {gv.name_hint: f for gv, f in legal.functions_items()
                 if isinstance(f, tvm.tirx.PrimFunc)}
        assert list(funcs) == ["attention"] and funcs["attention"].attrs[ATTENTION_ATTR] == \
            "kernel"

        target = make_target(BUILTIN["cuda"])
        with target:
            legal = relax.transform.LegalizeOps(
                customize_legalize_map=attention_legalizations())(mod)
        fused = relax.transform.FuseTIR()(relax.transform.FuseOps()(legal))
        parts = {gv.name_hint: f for gv, f in fused.functions_items()
                 if isinstance(f, tvm.tirx.PrimFunc)}
        assert sorted(parts) == sorted(want)
        scheduled = schedule_gpu(fused, target)
        rules = {name: str(scheduled[name].attrs[SCHEDULE_ATTR]) for name in parts}
        assert rules == want
        tvm.compile(scheduled, target=target)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("depth", [64, 3], ids=["tiled", "parts"])
def test_half_precision_on_a_gpu_sums_in_float32_and_builds(dtype, depth):
    """Half Q, K, V on a GPU: the tiled kernel reads them as they are and writes the inputs'
    dtype; the three parts keep the scores and the softmax in float32 between the kernels and
    round the output in the last one. Both build (static: no GPU here)."""
    shape = (1, 197, 6, depth)
    mod = _attention_module(shape, shape, shape, dtype=dtype)
    target = make_target(BUILTIN["cuda"])
    with target:
        legal = relax.transform.LegalizeOps(customize_legalize_map=attention_legalizations())(
            mod)
    fused = relax.transform.FuseTIR()(relax.transform.FuseOps()(legal))
    out_dtypes = {b.value.args[0].name_hint: str(b.var.ty.dtype)
                  for b in bindings(fused["main"]) if op_name(b.value) == "relax.call_tir"}
    assert out_dtypes == ({"attention_tiled": dtype} if depth == 64 else {
        "attention_scores": "float32", "attention_softmax": "float32",
        "attention_output": dtype})
    tvm.compile(schedule_gpu(fused, target), target=target)


@pytest.mark.parametrize("heads", [(4, 4), (4, 1)], ids=["multi-head", "multi-query"])
@pytest.mark.parametrize("causal", [None, "TopLeft", "BottomRight"])
@pytest.mark.parametrize("bias_shape", [None, (1, 1, 5, 7), (2, 4, 5, 7), (2, 1, 1, 7)])
def test_the_gpu_parts_compute_what_the_cpu_kernel_does(heads, causal, bias_shape):
    """The GPU's three kernels (a head dimension of 3 for V: no tiles), built unscheduled for
    llvm, against the float64 reference, for one K/V head shared by every query head
    (multi-query) as well as one per head."""
    rng = np.random.default_rng(2)
    hq, hkv = heads
    q = rng.standard_normal((2, 5, hq, 8)).astype("float32")
    k = rng.standard_normal((2, 7, hkv, 8)).astype("float32")
    v = rng.standard_normal((2, 7, hkv, 3)).astype("float32")
    bias = None if bias_shape is None else rng.standard_normal(bias_shape).astype("float32")
    mod = _attention_module(q.shape, k.shape, v.shape, bias=bias_shape, scale=0.4,
                            causal=causal)
    with tvm.target.Target({"kind": "cuda", "arch": "sm_90"}):  # legalized as for a GPU
        legal = relax.transform.LegalizeOps(customize_legalize_map=attention_legalizations())(
            mod)
    assert len([f for _, f in legal.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]) \
        == 3
    llvm = tvm.target.Target({"kind": "llvm"})
    vm = relax.VirtualMachine(tvm.compile(legal, target=llvm), tvm.cpu())
    inputs = [q, k, v, *([bias] if bias is not None else [])]
    got = vm["main"](*map(tvm.runtime.tensor, inputs)).numpy()
    kk, vv = (np.repeat(x, hq // hkv, axis=2) for x in (k, v))
    want = _reference(q, kk, vv, bias, 0.4, causal)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------
# Whole blocks, as the libraries write them, through the real pipeline
# --------------------------------------------------------------------------------------------
class _TimmBlock(nn.Module):
    """timm's Attention (packed qkv, permute(2, 0, 3, 1, 4), unbind, SDPA or eager) on the
    tokens of a conv patch embed; a class head."""

    def __init__(self, fused: bool) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, 16, 4, 4)
        self.qkv, self.proj, self.head = nn.Linear(16, 48), nn.Linear(16, 16), nn.Linear(16, 4)
        self.fused = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).flatten(2).transpose(1, 2)
        b, n, c = t.shape
        q, k, v = self.qkv(t).reshape(b, n, 3, 2, 8).permute(2, 0, 3, 1, 4).unbind(0)
        if self.fused:
            a = F.scaled_dot_product_attention(q, k, v)
        else:
            a = ((q * 8 ** -0.5) @ k.transpose(-2, -1)).softmax(-1) @ v
        t = t + self.proj(a.transpose(1, 2).reshape(b, n, c))
        return self.head(t.mean(1))


class _MapAttention(nn.Module):
    """diffusers' processor on a map (view to tokens, per-projection heads by view +
    transpose(1, 2), SDPA with a boolean mask, tokens back into the map) or
    nn.MultiheadAttention asked for its weights (the explicit bmm path)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.conv_in, self.conv_out = nn.Conv2d(3, 16, 3, 1, 1), nn.Conv2d(16, 3, 1)
        self.to_q, self.to_k, self.to_v = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)
        self.mha = nn.MultiheadAttention(16, 2, batch_first=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(x)
        b, c, hh, ww = h.shape
        t = h.view(b, c, hh * ww).transpose(1, 2)
        if self.kind == "mha":
            s = t.transpose(0, 1)
            a = self.mha(s, s, s, need_weights=True)[0].transpose(0, 1)
        else:
            q, k, v = (p(t).view(b, -1, 2, 8).transpose(1, 2)
                       for p in (self.to_q, self.to_k, self.to_v))
            keep = torch.ones(b, 1, hh * ww, hh * ww, dtype=torch.bool).tril()
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=0.2)
            a = a.transpose(1, 2).reshape(b, -1, c)
        return self.conv_out(a.transpose(-1, -2).reshape(b, c, hh, ww) + h)


class _Windows(nn.Module):
    """Swin's window attention: partition into 2×2 windows, attention with a relative
    position bias, reverse."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, 8, 2, 2)
        self.qkv, self.proj = nn.Linear(8, 24), nn.Linear(8, 8)
        self.bias = nn.Parameter(torch.randn(1, 2, 4, 4) * 0.1)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.embed(x).permute(0, 2, 3, 1)  # (B, 4, 4, C)
        b, h, w, c = m.shape
        win = m.view(b, 2, 2, 2, 2, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 4, c)
        q, k, v = self.qkv(win).reshape(-1, 4, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
        a = ((q * 0.5) @ k.transpose(-2, -1) + self.bias).softmax(-1) @ v
        a = self.proj(a.transpose(1, 2).reshape(-1, 4, c))
        back = a.view(b, 2, 2, 2, 2, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h * w, c)
        return self.head(back.mean(1))


class _FoldedHeads(nn.Module):
    """transformers' SAM vision attention in a small block: heads folded into the batch
    (``permute(2, 0, 3, 1, 4).reshape(3, B*H, N, D).unbind(0)``), written-out attention,
    ``view(B, H, h, w, D)`` back; the block runs NHWC between a patch conv and a neck conv."""

    def __init__(self, dim: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Conv2d(3, dim, 4, 4)
        self.norm = nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.neck = nn.Conv2d(dim, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).permute(0, 2, 3, 1)
        b, h, w, c = t.shape
        qkv = self.qkv(self.norm(t)).reshape(b, h * w, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.reshape(3, b * self.heads, h * w, -1).unbind(0)
        attn = ((q * (c // self.heads) ** -0.5) @ k.transpose(-2, -1)).softmax(dim=-1)
        o = (attn @ v).view(b, self.heads, h, w, -1).permute(0, 2, 3, 1, 4).reshape(b, h, w, -1)
        return self.neck((t + self.proj(o)).permute(0, 3, 1, 2))


class _ChannelHeads(nn.Module):
    """timm's BottleneckAttn (BoTNet) without its relative logits: a 1x1 conv for q, k and v
    on the NCHW map, ``torch.split`` of the channels, the heads cut from the channels and
    folded into the batch (``reshape(B * heads, dim_head, -1)``), ``q @ k`` without a
    transpose, ``(attn @ v).transpose(-1, -2).reshape(B, C, H, W)`` into a conv."""

    def __init__(self, dim: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.stem = nn.Conv2d(3, dim, 4, 4)
        self.qkv = nn.Conv2d(dim, 3 * dim, 1, bias=False)
        self.out = nn.Conv2d(dim, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        b, c, h, w = y.shape
        q, k, v = torch.split(self.qkv(y), [c, c, c], dim=1)
        q = q.reshape(b * self.heads, c // self.heads, -1).transpose(-1, -2)
        k = k.reshape(b * self.heads, c // self.heads, -1)
        v = v.reshape(b * self.heads, c // self.heads, -1).transpose(-1, -2)
        attn = ((q @ k) * (c // self.heads) ** -0.5).softmax(dim=-1)
        return self.out((attn @ v).transpose(-1, -2).reshape(b, c, h, w) + y)


def _compile(model: nn.Module, size: int, tmp_path, layout: str = "NCHW"):
    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.execute import run_torch, run_tvm
    from cl_validate.session.inputs import make_inputs, torch_inputs
    from cl_validate.spec import load_case

    path = tmp_path / f"c_{layout}.toml"
    path.write_text(f'model = "x:y"\n[[inputs]]\nname = "x"\nshape = [1, 3, {size}, {size}]\n'
                    f'layout = "{layout}"\n[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n')
    case = load_case(path)
    torch.manual_seed(0)
    model = model.eval()
    arrays = make_inputs(case)
    tensors = torch_inputs(case, arrays)
    compiled = compile_case(export_and_import(model, case, tensors), case, "llvm")
    kernels = read_kernel_list(compiled)
    want = run_torch(model, tensors)
    got = run_tvm(compiled.executable, case, arrays, tvm.cpu())
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    return kernels


@pytest.mark.compile
@pytest.mark.parametrize("model, floor", [
    (lambda: _TimmBlock(fused=True), 1), (lambda: _TimmBlock(fused=False), 1),
    (lambda: _MapAttention("sdpa"), 2), (lambda: _MapAttention("mha"), 2),
    (_FoldedHeads, 2), (_ChannelHeads, 2),
], ids=["timm-sdpa", "timm-eager", "diffusers-sdpa-bool-mask", "mha-weights",
        "sam-folded-heads", "botnet-channel-heads"])
def test_attention_blocks_compile_to_their_boundaries(model, floor, tmp_path):
    """NCHW image in: the input's transform (and the output map's), nothing for attention;
    one attention kernel per attention; numerics as PyTorch's. With NHWC input one fewer."""
    kernels = _compile(model(), 16, tmp_path)
    reasons = [t.attribution.reason for t in kernels.runtime_transforms]
    assert len(reasons) == floor, kernels.render()
    assert set(reasons) <= {Reason.INPUT_BOUNDARY, Reason.OUTPUT_BOUNDARY}
    assert sum(k.name.startswith("attention") for k in kernels.kernels) == 1, kernels.render()
    nhwc = _compile(model(), 16, tmp_path, "NHWC")
    assert len(nhwc.runtime_transforms) == floor - 1, nhwc.render()


@pytest.mark.compile
def test_window_movement_is_read_and_written_by_the_linears_around_it(tmp_path):
    """Swin's window partition and reverse, which no storage order makes a view: the qkv
    Linear reads the tokens in window order, the output projection writes them back in map
    order, its bias added on the way (strided products: each token's channels stay
    contiguous). The input's transform is all that stays; numerics as PyTorch's."""
    kernels = _compile(_Windows(), 8, tmp_path)
    reasons = [t.attribution.reason for t in kernels.runtime_transforms]
    assert reasons == [Reason.INPUT_BOUNDARY], kernels.render()


@pytest.mark.compile
def test_a_permute_the_importer_inserted_is_not_called_the_models_own(tmp_path):
    """Heads the model lays out head-major from tokens it never transposes: the importer's
    BHSD -> BSHD permute stays, and is named for what inserted it."""

    class HeadMajor(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Conv2d(3, 4, 2, 2)
            self.head = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            t = self.embed(x).flatten(2).transpose(1, 2)  # (B, N, C): 16 tokens of 4
            q = t.reshape(1, 2, 8, 4)  # (B, heads, L, E): the tokens split head-major
            a = F.scaled_dot_product_attention(q, q, q)
            return self.head(a.reshape(1, 16, 4).mean(1))

    kernels = _compile(HeadMajor(), 8, tmp_path)
    inserted = [t.attribution for t in kernels.runtime_transforms
                if t.attribution.reason is Reason.IMPORTED]
    assert inserted, kernels.render()
    assert all("scaled_dot_product_attention" in (a.relax_op or "") for a in inserted)
    assert not any(t.attribution.reason is Reason.OWN_PERMUTE
                   for t in kernels.runtime_transforms), kernels.render()
    assert "inserted to convert scaled_dot_product_attention" in inserted[0].describe()


class _BlockedHeads(nn.Module):
    """timm's NesT: the (B, H, W, C) map cut into blocks (``reshape``, ``transpose(2, 3)``),
    attention on (B, blocks, tokens, C) whose q, k and v come from ``permute(3, 0, 4, 1, 2,
    5)`` of the 6-d qkv (the heads ahead of the blocks, stored after the tokens), merged by
    ``permute(0, 2, 3, 4, 1)``, the blocks put back."""

    def __init__(self, dim: int = 16, heads: int = 2, block: int = 2) -> None:
        super().__init__()
        self.heads, self.block = heads, block
        self.embed = nn.Conv2d(3, dim, 2, 2)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.pos = nn.Parameter(torch.randn(1, 4, block * block, dim))
        self.neck = nn.Conv2d(dim, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).permute(0, 2, 3, 1)
        b, h, w, c = t.shape
        g, s = h // self.block, self.block
        blocks = t.reshape(b, g, s, g, s, c).transpose(2, 3).reshape(b, g * g, -1, c)
        blocks = blocks + self.pos
        n = blocks.shape[2]
        q, k, v = self.qkv(blocks).reshape(b, g * g, n, 3, self.heads, c // self.heads
                                           ).permute(3, 0, 4, 1, 2, 5).unbind(0)
        o = ((q * 0.5) @ k.transpose(-2, -1)).softmax(dim=-1) @ v
        o = self.proj(o.permute(0, 2, 3, 4, 1).reshape(b, g * g, n, c))
        o = o.reshape(b, g, g, s, s, c).transpose(2, 3).reshape(b, h, w, c)
        return self.neck((t + o).permute(0, 3, 1, 2))


@pytest.mark.compile
def test_heads_stored_after_the_tokens_are_read_where_they_are(tmp_path):
    """NesT's q (B, heads, blocks, tokens, D), stored (B, blocks, tokens, heads, D): raised
    with the heads the axis after the tokens and the blocks in the batch, so the attention
    reads q, k and v where the projection wrote them and writes what the output projection
    reads. Before, the axis just before the tokens was taken for the heads (the blocks): a
    transpose after every attention, and the one shared before the q/k/v split crashed the
    compile (a permute of the 5-d parts lifted as if they had 4 axes)."""
    kernels = _compile(_BlockedHeads(), 8, tmp_path)
    assert sum(k.name.startswith("attention") for k in kernels.kernels) == 1, kernels.render()
    reasons = {t.attribution.reason for t in kernels.runtime_transforms}
    # the input's and the output's, and the model's own blocks (which no order makes a view)
    assert reasons <= {Reason.INPUT_BOUNDARY, Reason.OUTPUT_BOUNDARY, Reason.OWN_PERMUTE}, \
        kernels.render()
    assert "attention raised" not in kernels.render()


class _PerHeadScale(nn.Module):
    """SwinV2's cosine attention (q and k normalized, the scores scaled per head by a learnt
    ``logit_scale.exp()``), XCiT's per-head temperature as a divisor, or one float."""

    def __init__(self, scale: str) -> None:
        super().__init__()
        self.scale = scale
        self.embed = nn.Conv2d(3, 16, 4, 4)
        self.qkv, self.proj = nn.Linear(16, 48), nn.Linear(16, 16)
        self.logit_scale = nn.Parameter(torch.log(10 * torch.rand(2, 1, 1) + 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).flatten(2).transpose(1, 2)
        b, n, c = t.shape
        q, k, v = self.qkv(t).reshape(b, n, 3, 2, 8).permute(2, 0, 3, 1, 4)
        attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        per_head = torch.clamp(self.logit_scale, max=4.6).exp()
        if self.scale == "multiply":
            attn = attn * per_head
        elif self.scale == "divide":
            attn = attn / per_head
        else:
            attn = attn * 7.0
        out = (attn.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(out)


@pytest.mark.compile
@pytest.mark.parametrize("scale", ["multiply", "divide"])
def test_a_per_head_score_scale_is_folded_into_q(scale, tmp_path):
    """A (heads, 1, 1) factor of the scores is q's: the attention is raised as with one float,
    and has that one's transforms exactly (before: the raise declined, and the transposes of
    q, k and v stayed in every layer)."""
    kernels = _compile(_PerHeadScale(scale), 16, tmp_path)
    floor = _compile(_PerHeadScale("float"), 16, tmp_path)
    assert sum(k.name.startswith("attention") for k in kernels.kernels) == 1, kernels.render()
    assert len(kernels.runtime_transforms) == len(floor.runtime_transforms), kernels.render()


def test_talking_heads_by_linear_layers_stay_and_say_why():
    """CaiT's talking heads: a Linear over the heads on each side of the softmax (the scores
    permuted heads-last, projected, permuted back). The matmuls stay, and the note says a
    Linear is on the scores; it said nothing before (the Linear is a matmul itself)."""

    from tvm.relax.frontend.torch import from_exported_program

    from tests.data.tiny_models import TalkingHeads

    ep = torch.export.export(TalkingHeads(residual=False).eval(), (torch.randn(1, 5, 8),))
    mod = from_exported_program(ep, keep_params_as_input=True)
    matches, left = find(mod["main"])
    assert not matches and len(left) == 1, left
    assert left[0].why.startswith("a Linear on the scores between the matmuls"), left[0].why


def test_a_scale_computed_from_parameters_is_not_named_as_in_between():
    """A score scale that is not one per head (here one per query row, from a parameter
    through exp) is not raised; the note does not name the parameter's own exp as standing
    between the matmuls (SwinV2's note said "exp ... talking heads?")."""

    class RowScaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.logit = nn.Parameter(torch.zeros(2, 5, 1))

        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return ((q @ k.transpose(-2, -1)) * self.logit.exp()).softmax(-1) @ v

    from tvm.relax.frontend.torch import from_exported_program

    ep = torch.export.export(RowScaled().eval(), tuple(torch.randn(1, 2, 5, 4) for _ in "qkv"))
    mod = from_exported_program(ep, keep_params_as_input=True)
    matches, left = find(mod["main"])
    assert not matches and len(left) == 1, left
    assert left[0].why == "a scale of shape (2, 5, 1) on the scores (not one number or one " \
                          "per head)", left[0].why


class _CrossCovariance(nn.Module):
    """XCiT's cross-covariance attention in a small classifier: q, k, v split from one
    projection and transposed (the attention runs over channels: tokens are its features),
    q and k L2-normalized, a per-head temperature."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Conv2d(3, dim, 4, 4)
        self.temperature = nn.Parameter(torch.rand(heads, 1, 1) + 0.5)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.head = nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).flatten(2).transpose(1, 2)
        b, n, c = t.shape
        qkv = self.qkv(t).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 4, 1)
        q, k, v = qkv.unbind(0)
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        attn = ((q @ k.transpose(-2, -1)) * self.temperature).softmax(dim=-1)
        t = t + self.proj((attn @ v).permute(0, 3, 1, 2).reshape(b, n, c))
        return self.head(t.mean(1))


@pytest.mark.compile
def test_cross_covariance_attention_stays_as_matmuls_that_read_in_place(tmp_path):
    """XCiT splits q, k and v from one projection and transposes them tokens-last: the
    scores sum over the tokens. Raised, the attention op took q, k and v each transposed
    whole (one shared transpose before the split) and the output back to tokens: 3
    transforms. As matmuls, which read q, k and v and write the output where they are, the
    input's transform is the only one."""
    kernels = _compile(_CrossCovariance(), 16, tmp_path)
    assert len(kernels.runtime_transforms) == 1, kernels.render()
    assert not any(k.name.startswith("attention") for k in kernels.kernels), kernels.render()


class _PooledHeads(nn.Module):
    """MViTv2's pooling attention in small: q, k and v each pooled per head by a depthwise
    conv on ``(B·heads, D, h, w)`` and normalized head-major ``(B, H, N, D)``; written-out
    attention, residual pooling (``+ q``), heads merged."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.hd = heads, dim // heads
        self.embed = nn.Conv2d(3, dim, 4, 4)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.pools = nn.ModuleList(nn.Conv2d(self.hd, self.hd, 3, s, 1, groups=self.hd,
                                             bias=False) for s in (1, 2, 2))
        self.norms = nn.ModuleList(nn.LayerNorm(self.hd) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.embed(x)
        b, c, h, w = f.shape
        t = f.flatten(2).transpose(1, 2)
        qkv = self.qkv(t).reshape(b, h * w, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        pooled = []
        for i, u in enumerate(qkv.unbind(0)):
            u = u.reshape(b * self.heads, h, w, self.hd).permute(0, 3, 1, 2)
            u = self.pools[i](u)
            u = u.reshape(b, self.heads, self.hd, -1).transpose(2, 3)
            pooled.append(self.norms[i](u))
        q, k, v = pooled
        out = ((q * self.hd ** -0.5) @ k.transpose(-2, -1)).softmax(-1) @ v + q
        return self.proj(out.transpose(1, 2).reshape(b, -1, c))


@pytest.mark.compile
def test_head_major_operands_are_read_in_place_by_the_attention_kernel(tmp_path,
                                                                       monkeypatch):
    """q, k and v the model made head-major (pooled per head, normalized as (B, H, N, D)):
    the raised op reads BSHD and got a transpose of each that nothing cancels (MViTv2: 7
    transforms where the matmuls had 3). The kernel reads each such operand in place of its
    transpose: fewer transforms than with the transposes, numerics as PyTorch's."""
    import cl_validate.compile.attention as attention

    kernels = _compile(_PooledHeads(), 16, tmp_path)
    assert sum(k.name.startswith("attention") for k in kernels.kernels) == 1, kernels.render()
    monkeypatch.setattr(attention, "_in_place", lambda bb, arg: (arg, False))
    transposed = _compile(_PooledHeads(), 16, tmp_path)
    assert len(kernels.runtime_transforms) <= len(transposed.runtime_transforms) - 2, (
        kernels.render(), transposed.render())
