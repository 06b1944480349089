"""Quantized networks compute in integers (issue #37): the integer_compute stage rewrites
dequantize → conv2d / matmul into int8/uint8 × int8 products with int32 accumulation, exact
against the float QDQ program it replaces, and names every product it leaves in float.

The end-to-end tests run the quantizers teams use (torchao's X86 and Arm inductor
quantizers, an XNNPACK-style per-channel symmetric config, a QAT-converted model) on a small
classifier with every op a quantized mobile network has; the unit tests build the QDQ
patterns by hand, with the corners a model seldom shows (padding with a non-zero zero point,
grouped convolutions, per-channel scales through a reshape).
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from cl_validate.checks.verdict import Status
from cl_validate.compile.passes.integer_compute import find, integer_compute
from cl_validate.ir import bindings, op_name, tensor_type
from cl_validate.session.in_process import judge_in_process
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions

CASE = """
model = "quant_models:{model}"
targets = ["llvm", "cuda"]
seeds = 2
{extra}
[[inputs]]
name = "x"
shape = [1, 3, 16, 16]
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
[budget]
layout_transforms = 1
float_qdq_convs = 0   # the budget's old name, read as float_qdq_products
[tolerance]
reference = "float64"
steps = 1
"""


@pytest.mark.compile
@pytest.mark.parametrize("model", ["x86_classifier", "arm_classifier", "xnnpack_classifier",
                                   "qat_classifier"])
def test_every_quantizers_network_computes_in_integers_within_one_step(write_case, model):
    """Each quantizer's network: every convolution and the Linear head on integer data, on
    llvm and (static) cuda; numerics within one quantization step of PyTorch's converted
    model on two input draws; the NCHW input its only runtime transform."""
    pytest.importorskip("torchao")
    case = load_case(write_case(CASE.format(model=model, extra="")))
    results = judge_in_process([case], RunOptions(isolate=False))
    assert {r.target for r in results} == {"llvm", "cuda"}
    for r in results:
        for name in ("compile", "layout_transforms", "float_qdq_products"):
            assert r.check(name).status is Status.PASSED, (r.target, r.check(name).message)
        body = r.check("float_qdq_products").body
        assert "0 in float between QDQ ops (none), 4 in integers (3 conv2d, 1 matmul)" \
            in body, body
        products = [k for k in r.kernels if any(op.startswith(("conv2d", "matmul"))
                                                for op in k.ops)]
        assert len(products) == 4, [k.name for k in products]  # three convs and the head
        for k in products:
            dtypes = [d for op, d in zip(k.ops, k.dtypes, strict=False)
                      if op.startswith(("conv2d", "matmul"))]
            assert dtypes and all(d in ("int8", "uint8") for d in dtypes), (k.name, dtypes)
    numerics = next(r for r in results if r.target == "llvm").check("numerics")
    assert numerics.status is Status.PASSED, numerics.message


@pytest.mark.compile
def test_a_linear_on_a_transposed_activation_computes_in_integers(write_case):
    """(#44.2) MLP-Mixer's token mixing: the cleanup swaps ``xᵀ @ Wᵀ`` into ``W @ x`` (the
    constant weight first), and the channel Linear's import puts ``broadcast_to`` on both
    operands. Both stayed in float ("both operands are computed at run time", which was
    false); now every product computes in integers, within one step, on llvm and cuda."""
    pytest.importorskip("torchao")
    case = load_case(write_case(CASE.format(model="token_mixer", extra="")))
    _all_in_integers(case, "4 in integers (1 conv2d, 3 matmul)")


@pytest.mark.compile
def test_a_linear_over_the_heads_of_permuted_scores_computes_in_integers(write_case):
    """CaiT's talking heads: a Linear over the heads of 4-D scores, which export spells as
    a batched matmul with the weight expanded to the batch and the batch merged. Its weight
    was "not a matrix" and each such product stayed in float; read as the matrix it is,
    every product computes in integers, within one step."""
    pytest.importorskip("torchao")
    case = load_case(write_case(CASE.format(model="talking_heads", extra="").replace(
        "layout_transforms = 1", "layout_transforms = 10")))
    _all_in_integers(case, "5 in integers (1 conv2d, 4 matmul)")


@pytest.mark.compile
def test_a_quantized_transposed_convolution_stays_nhwc_and_computes_in_integers(write_case):
    """(#44.3) A quantized ConvTranspose2d followed its input, a dequantize in the import
    layout, and stayed NCHW between two transposes (4 transforms, where the float model has
    its 2 boundaries; the hint blamed relax.quantize); declared NHWC by hand it ran as a
    float conv2d named nowhere. Now it takes the convolutions' layout, and its lowered
    convolution (zeros inserted as a pad of zero points, the weight flipped) is an integer
    one: the float model's transforms, every product in integers, within one step."""
    pytest.importorskip("torchao")
    case = load_case(write_case(CASE.format(model="upsampler", extra="").replace(
        "layout_transforms = 1", "layout_transforms = 2")))
    for r in judge_in_process([case], RunOptions(isolate=False)):
        for name in ("layout", "layout_transforms", "float_qdq_products"):
            assert r.check(name).status is Status.PASSED, (r.target, r.check(name).message)
        assert "0 in float between QDQ ops (none), 3 in integers (3 conv2d)" \
            in r.check("float_qdq_products").body
        if r.target == "llvm":
            assert r.check("numerics").status is Status.PASSED, r.check("numerics").message


@pytest.mark.compile
def test_integer_compute_false_keeps_the_float_program(write_case):
    """The case option turns the stage off: the same network's products in float (three
    convolutions and the Linear head), and a budget of 0 (under its old name) fails at its
    line, naming them."""
    pytest.importorskip("torchao")
    case = load_case(write_case(CASE.format(model="x86_classifier",
                                            extra="integer_compute = false")))
    (r,) = judge_in_process([case], RunOptions(isolate=False, targets=("llvm",)))
    check = r.check("float_qdq_products")
    assert check.status is Status.FAILED and check.message.startswith(
        "float_qdq_products 4 > budget 0"), check.message
    assert check.line == 12, check.line  # the old name's line
    assert "4 in float between QDQ ops (3 conv2d, 1 matmul)" in check.body, check.body


# --------------------------------------------------------------------------------------------
# The rewrite itself, on hand-built QDQ programs
# --------------------------------------------------------------------------------------------
def _qdq_conv(zx: int, data_dtype: str, groups: int, per_channel: bool, padding: int,
              weight_zero: int = 0, weight_float: bool = False) -> tvm.IRModule:
    """dequantize(x) → conv2d(NHWC, OHWI; weights OIHW int8 dequantized per channel, then
    permuted) → + bias, as PT2E's import looks after ConvertLayout."""
    rng = np.random.default_rng(0)
    cin, cout, k = 8, 8, 3
    w_codes = rng.integers(-127, 128, size=(cout, cin // groups, k, k)).astype("int8")
    w_scale = (rng.uniform(0.001, 0.02, size=cout) if per_channel else
               np.array(0.01)).astype("float32")
    bias = rng.normal(size=cout).astype("float32")
    x = relax.Var("x", relax.TensorType((1, 10, 10, cin), data_dtype))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            data = bb.emit(relax.op.dequantize(x, relax.const(0.05, "float32"),
                                               relax.const(zx, "int32"), axis=-1))
            if weight_float:
                kernel: relax.Expr = relax.const(w_codes.astype("float32") * 0.01)
            else:
                wz = np.full(w_scale.shape, weight_zero, dtype="int32")
                kernel = bb.emit(relax.op.dequantize(relax.const(w_codes),
                                                     relax.const(w_scale), relax.const(wz),
                                                     axis=0))
            kernel = bb.emit(relax.op.permute_dims(kernel, [0, 2, 3, 1]))
            conv = bb.emit(relax.op.nn.conv2d(data, kernel, padding=[padding] * 4,
                                              groups=groups, data_layout="NHWC",
                                              kernel_layout="OHWI", out_dtype="float32"))
            out = bb.emit_output(relax.op.add(conv, relax.const(bias.reshape(1, 1, 1, -1))))
        bb.emit_func_output(out)
    return bb.get()


def _run(mod: tvm.IRModule, x: np.ndarray) -> np.ndarray:
    mod = relax.transform.FoldConstant()(mod)
    exe = tvm.compile(relax.transform.LegalizeOps()(mod), target=tvm.target.Target("llvm"))
    return relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize("zx, dtype, groups, per_channel, padding", [
    (37, "uint8", 1, True, 1),    # x86: uint8 with a zero point, padded borders
    (-128, "int8", 1, False, 1),  # Arm: int8 after a ReLU, per-tensor weights
    (0, "uint8", 8, True, 1),     # depthwise
    (5, "int8", 2, True, 0),      # grouped, unpadded
])
def test_the_integer_product_equals_the_float_one(zx, dtype, groups, per_channel, padding):
    """Integer codes in, int32 accumulation, zero-point correction and padding with the zero
    point: the same values as the float QDQ product to float32 rounding, on every element,
    borders included."""
    mod = _qdq_conv(zx, dtype, groups, per_channel, padding)
    plans, left = find(mod["main"])
    assert len(plans) == 1 and not left, left
    rewritten = tvm.IRModule({"main": integer_compute(mod["main"])})
    assert 'out_dtype="int32"' in rewritten.script()
    # the one dequantize left scales the int32 accumulator: no codes are dequantized
    reads = [str(tensor_type(b.value.args[0]).dtype) for b in bindings(rewritten["main"])
             if op_name(b.value) == "relax.dequantize"]
    assert reads == ["int32"], reads
    info = np.iinfo(dtype)
    x = np.random.default_rng(1).integers(info.min, info.max + 1, size=(1, 10, 10, 8))
    x = x.astype(dtype)
    want, got = _run(mod, x), _run(rewritten, x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6 * np.abs(want).max())


@pytest.mark.parametrize("kwargs, says", [
    ({"weight_zero": 3}, "zero point is not 0"),
    ({"weight_float": True}, "its weight: its operand is not dequantized"),
])
def test_a_product_left_in_float_says_why(kwargs, says):
    """Asymmetric weights (a zero point the data would have to be corrected for) and a float
    weight: not rewritten, each named with its reason."""
    mod = _qdq_conv(3, "uint8", 1, True, 1, **kwargs)
    plans, left = find(mod["main"])
    assert not plans
    (why,) = left
    assert why.op == "conv2d" and says in why.why, why
    assert integer_compute(mod["main"]).same_as(mod["main"])


@pytest.mark.compile
def test_a_quantized_conv1d_computes_in_integers(write_case):
    """A quantized TCN's Conv1d stayed in float ("no integer lowering for it here"): now,
    like a Conv2d, it reads its codes (its own padding as a pad of zero points, the causal
    pad replayed on the codes) and accumulates in int32, within one step."""
    case = load_case(write_case(CASE.format(model="qdq_conv1d", extra="").replace(
        "layout_transforms = 1", "layout_transforms = 2")))
    _all_in_integers(case, "2 in integers (2 conv1d)")


def _all_in_integers(case, products: str) -> None:
    """Every target of `case` computes every quantized product in integers (`products`
    says how many, of which ops), and llvm's numerics pass."""
    for r in judge_in_process([case], RunOptions(isolate=False)):
        check = r.check("float_qdq_products")
        assert check.status is Status.PASSED, (r.target, check.message)
        assert f"0 in float between QDQ ops (none), {products}" in check.body, check.body
        if r.target == "llvm":
            numerics = r.check("numerics")
            assert numerics.status is Status.PASSED, numerics.message
