"""FoldScaleShift: per-channel constant affine chains after a conv fold into its weights.

Unit cases are built with a BlockBuilder (constants of known values), checked for the exact
rewritten structure, the exact folded weights and bias, and for computing what the unfolded
module computes. Every "must not fold" case checks that the IR is left exactly as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import torch
import tvm
from torch import nn
from tvm import relax

from cl_validate.compile.passes import FoldScaleShift
from cl_validate.ir import bindings, is_tensor_constant, op_name

RNG = np.random.default_rng(0)
C = 8


def _vec(shape: Sequence[int], low: float = 0.5, high: float = 2.0) -> np.ndarray:
    return RNG.uniform(low, high, size=shape).astype("float32")


def _module(layout: str, steps: Callable[[relax.BlockBuilder, relax.Var], relax.Var],
            weight: np.ndarray | None = None, *, weight_param: bool = False) -> tvm.IRModule:
    """main(x) = steps(conv2d(x, W)) in `layout` ("NHWC" with OHWI, or "NCHW" with OIHW)."""
    nhwc = layout == "NHWC"
    x_shape = (1, 6, 6, 4) if nhwc else (1, 4, 6, 6)
    w = weight if weight is not None else _vec((C, 3, 3, 4) if nhwc else (C, 4, 3, 3), -1, 1)
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    params = [x]
    bb = relax.BlockBuilder()
    w_expr: relax.Expr = relax.const(w)
    if weight_param:
        w_expr = relax.Var("w", relax.TensorType(w.shape, "float32"))
        params.append(w_expr)
    with bb.function("main", params):
        with bb.dataflow():
            conv = bb.emit(relax.op.nn.conv2d(
                x, w_expr, padding=1, data_layout=layout,
                kernel_layout="OHWI" if nhwc else "OIHW"))
            out = bb.emit_output(steps(bb, conv))
        bb.emit_func_output(out)
    return bb.get()


def _channel(shape_nhwc: bool, values: np.ndarray) -> relax.Expr:
    """A per-channel constant shaped as DecomposeOpsForInference leaves it."""
    shape = (1, 1, 1, C) if shape_nhwc else (1, C, 1, 1)
    return relax.const(values.reshape(shape))


def _ops(mod: tvm.IRModule) -> list[str]:
    """The ops called in ``main``, in order (``gv = lv`` output aliases skipped)."""
    return [op for b in bindings(mod["main"]) if (op := op_name(b.value)) is not None]


def _run(mod: tvm.IRModule, x: np.ndarray, *extra: np.ndarray) -> np.ndarray:
    ex = tvm.compile(relax.transform.LegalizeOps()(mod),
                     target=tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](*(tvm.runtime.tensor(a) for a in (x, *extra))).numpy()


def _input(mod: tvm.IRModule) -> np.ndarray:
    shape = [int(d) for d in mod["main"].params[0].ty.shape]
    return RNG.uniform(-1, 1, size=shape).astype("float32")


def _consts(mod: tvm.IRModule) -> list[np.ndarray]:
    out = []
    for b in bindings(mod["main"]):
        for a in getattr(b.value, "args", []):
            if is_tensor_constant(a):
                out.append(a.value.numpy())
    return out


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_batchnorm_chain_becomes_rescaled_weights_plus_one_bias(layout: str) -> None:
    nhwc = layout == "NHWC"
    mean, std, gamma, beta = _vec((C,), -1, 1), _vec((C,)), _vec((C,)), _vec((C,), -1, 1)
    w = _vec((C, 3, 3, 4) if nhwc else (C, 4, 3, 3), -1, 1)

    def bn(bb: relax.BlockBuilder, y: relax.Var) -> relax.Var:
        y = bb.emit(relax.op.subtract(y, _channel(nhwc, mean)))
        y = bb.emit(relax.op.divide(y, _channel(nhwc, std)))
        y = bb.emit(relax.op.multiply(y, _channel(nhwc, gamma)))
        return bb.emit(relax.op.add(y, _channel(nhwc, beta)))

    before = _module(layout, bn, w)
    after = FoldScaleShift()(before)

    assert _ops(after) == ["relax.nn.conv2d", "relax.add"]
    new_w, bias = _consts(after)
    scale = gamma.astype(np.float64) / std
    np.testing.assert_allclose(new_w, w * scale.reshape(C, 1, 1, 1), rtol=1e-6)
    np.testing.assert_allclose(bias.reshape(C), beta - mean * scale, rtol=1e-6, atol=1e-7)
    assert bias.shape == ((1, 1, 1, C) if nhwc else (1, C, 1, 1))
    x = _input(before)
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-5, atol=1e-5)


def test_scale_without_shift_leaves_the_bare_conv() -> None:
    gamma = _vec((C,))
    before = _module("NHWC", lambda bb, y: bb.emit(relax.op.multiply(y, relax.const(gamma))))
    after = FoldScaleShift()(before)
    assert _ops(after) == ["relax.nn.conv2d"]
    x = _input(before)
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-5, atol=1e-6)


def test_constant_minus_conv_and_scalar_operands_fold() -> None:
    """c - conv flips the sign of the scale; scalar constants apply to every channel."""
    c0 = _vec((C,), -1, 1)

    def steps(bb: relax.BlockBuilder, y: relax.Var) -> relax.Var:
        y = bb.emit(relax.op.subtract(relax.const(c0), y))
        y = bb.emit(relax.op.multiply(relax.const(np.float32(3.0)), y))
        return bb.emit(relax.op.divide(y, relax.const(np.float32(2.0))))

    before = _module("NHWC", steps)
    after = FoldScaleShift()(before)
    assert _ops(after) == ["relax.nn.conv2d", "relax.add"]
    x = _input(before)
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-5, atol=1e-5)


def test_chain_stops_at_the_first_step_that_does_not_qualify() -> None:
    """multiply folds; the relu after it and the add after that stay as they are."""
    gamma, beta = _vec((C,)), _vec((C,), -1, 1)

    def steps(bb: relax.BlockBuilder, y: relax.Var) -> relax.Var:
        y = bb.emit(relax.op.multiply(y, relax.const(gamma)))
        y = bb.emit(relax.op.nn.relu(y))
        return bb.emit(relax.op.add(y, relax.const(beta)))

    before = _module("NHWC", steps)
    after = FoldScaleShift()(before)
    assert _ops(after) == ["relax.nn.conv2d", "relax.nn.relu", "relax.add"]
    x = _input(before)
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-5, atol=1e-6)


def _shared_intermediate(bb: relax.BlockBuilder, y: relax.Var) -> relax.Var:
    scaled = bb.emit(relax.op.multiply(y, relax.const(_vec((C,)))))
    return bb.emit(relax.op.add(scaled, y))  # the conv result is read twice


def _varies_along_width(bb: relax.BlockBuilder, y: relax.Var) -> relax.Var:
    return bb.emit(relax.op.multiply(y, relax.const(_vec((1, 1, 6, 1)))))


def _broadcasts_the_result(bb: relax.BlockBuilder, y: relax.Var) -> relax.Var:
    return bb.emit(relax.op.multiply(y, relax.const(_vec((2, 1, 1, C)))))


def _divides_a_constant(bb: relax.BlockBuilder, y: relax.Var) -> relax.Var:
    return bb.emit(relax.op.divide(relax.const(_vec((C,))), y))


def _lone_bias_add(bb: relax.BlockBuilder, y: relax.Var) -> relax.Var:
    return bb.emit(relax.op.add(y, relax.const(_vec((C,)))))


def _by_a_runtime_value(bb: relax.BlockBuilder, y: relax.Var) -> relax.Var:
    return bb.emit(relax.op.multiply(y, y))


@pytest.mark.parametrize("steps", [_shared_intermediate, _varies_along_width,
                                   _broadcasts_the_result, _divides_a_constant,
                                   _lone_bias_add, _by_a_runtime_value],
                         ids=lambda f: f.__name__.lstrip("_"))
def test_left_alone(steps: Callable[[relax.BlockBuilder, relax.Var], relax.Var]) -> None:
    before = _module("NHWC", steps)
    tvm.ir.assert_structural_equal(FoldScaleShift()(before), before)


def test_weights_still_parameters_are_left_alone() -> None:
    before = _module("NHWC", lambda bb, y: bb.emit(relax.op.multiply(
        y, relax.const(_vec((C,))))), weight_param=True)
    tvm.ir.assert_structural_equal(FoldScaleShift()(before), before)


def test_packed_layouts_are_left_alone() -> None:
    """NCHW4c-style layouts put channels on two axes; the pass does not guess."""
    x = relax.Var("x", relax.TensorType((1, 1, 6, 6, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = bb.emit(relax.op.nn.conv2d(
                x, relax.const(_vec((2, 1, 3, 3, 4, 4), -1, 1)), padding=1,
                data_layout="NCHW4c", kernel_layout="OIHW4i4o"))
            out = bb.emit_output(relax.op.multiply(conv, relax.const(np.float32(2.0))))
        bb.emit_func_output(out)
    before = bb.get()
    tvm.ir.assert_structural_equal(FoldScaleShift()(before), before)


# --------------------------------------------------------------------------------------------
# End to end: a real torch model through the default pipeline
# --------------------------------------------------------------------------------------------
class ConvBN(nn.Module):
    """conv → BN → ReLU, a depthwise conv → BN, and a BN not after a conv (left alone)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.bn_dw = nn.BatchNorm2d(8)
        self.bn_pre = nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        y = self.bn_dw(self.dw(y))
        return self.bn_pre(torch.relu(y))


@pytest.mark.compile
def test_pipeline_folds_batchnorm_into_convs(tmp_path: Any) -> None:
    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.checks.numerics import compare
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.spec import Tolerance, load_case

    torch.manual_seed(0)
    model = ConvBN().eval()
    for bn in (model.bn, model.bn_dw, model.bn_pre):  # non-trivial running statistics
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.data.uniform_(0.5, 2)
        bn.bias.data.uniform_(-1, 1)
    case_file = tmp_path / "convbn.toml"
    case_file.write_text('model = "x:y"\n[[inputs]]\nname = "x"\nshape = [1, 3, 8, 8]\n'
                         '[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n')
    case = load_case(case_file)
    x = torch.randn(1, 3, 8, 8)
    compiled = compile_case(export_and_import(model, case, [x]), case, "llvm")

    before = compiled.stage("fold_params").mod
    after = compiled.stage("fold_scale_shift").mod
    ops_before, ops_after = _ops(before), _ops(after)
    assert ops_before.count("relax.divide") == 3  # one per BatchNorm
    # The two BatchNorms after convs fold; only the one after the ReLU keeps its arithmetic.
    assert ops_after.count("relax.divide") == 1
    assert ops_after.count("relax.multiply") == 1
    conv_kernels = [k.name for k in read_kernel_list(compiled) if "conv2d" in k.name]
    # Fused kernels are named after their ops in order: between each conv and its ReLU there
    # is at most the one bias add; the unfolded BatchNorm fuses in after the second ReLU.
    assert len(conv_kernels) == 2, conv_kernels
    for name in conv_kernels:
        assert "_add_relu" in name and not any(
            op in name.split("_relu")[0] for op in ("subtract", "divide", "multiply")), name

    vm = relax.VirtualMachine(compiled.executable, tvm.cpu())
    actual = vm["main"](tvm.runtime.tensor(x.numpy())).numpy()
    with torch.no_grad():
        expected = model(x).numpy()
    assert compare(actual, expected, Tolerance(rtol=1e-5, atol=1e-5))


class Residual(nn.Module):
    """conv → (BN) → ReLU → conv → (BN) → + x → ReLU: the residual block of a ResNet."""

    def __init__(self, bn: bool) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.b1: nn.Module = nn.BatchNorm2d(8) if bn else nn.Identity()
        self.b2: nn.Module = nn.BatchNorm2d(8) if bn else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + x)


@pytest.mark.compile
def test_fresh_batchnorm_costs_no_fusion(tmp_path: Any) -> None:
    """A freshly built BatchNorm (zero mean, unit variance, zero shift) folds to a bare
    convolution that still fuses with its ReLU and residual add: the block compiles to as
    many kernels as the same block without BatchNorm, so a budget recorded on a fresh model
    holds for the trained one."""
    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.spec import load_case

    case_file = tmp_path / "res.toml"
    case_file.write_text('model = "x:y"\n[[inputs]]\nname = "x"\nshape = [1, 8, 8, 8]\n'
                         '[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n')
    case = load_case(case_file)
    x = torch.randn(1, 8, 8, 8)
    kernels = {}
    for bn in (True, False):
        torch.manual_seed(0)
        model = Residual(bn).eval()
        compiled = compile_case(export_and_import(model, case, [x]), case, "llvm", build=False)
        kernels[bn] = [k.name for k in read_kernel_list(compiled)]
    assert len(kernels[True]) == len(kernels[False]), kernels
    conv_kernels = [n for n in kernels[True] if "conv2d" in n]
    assert len(conv_kernels) == 2 and all("relu" in n for n in conv_kernels), conv_kernels
