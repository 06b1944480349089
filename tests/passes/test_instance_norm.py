"""PerSampleInstanceNorm: PyTorch's batch-folded instance norm (``view(1, B·C, H, W)``, a norm
over axes 0, 2, 3, ``view(B, C, H, W)``) as one norm over the spatial axes, which ConvertLayout
carries into NHWC: no transpose into the fold and back."""

from __future__ import annotations

import pytest
import torch
import tvm
from torch import nn
from tvm.script import ir as I
from tvm.script import relax as R

from cl_validate.compile.passes import PerSampleInstanceNorm
from tests.passes.conftest import compile_nhwc_case

X = R.Tensor((2, 4, 3, 3), "float32")
F8 = R.Tensor((1, 8, 3, 3), "float32")


def test_the_folded_norm_is_one_norm_over_the_spatial_axes() -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(x: X, g: R.Tensor((4,), "float32"), b: R.Tensor((4,), "float32")) -> X:
            with R.dataflow():
                gt = R.tile(g, repeats=[2])
                bt = R.tile(b, repeats=[2])
                f = R.reshape(x, R.shape([1, 8, 3, 3]))
                n = R.nn.instance_norm(f, gt, bt, channel_axis=1, axes=[0, 2, 3])
                gv = R.reshape(n, R.shape([2, 4, 3, 3]))
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: X, g: R.Tensor((4,), "float32"), b: R.Tensor((4,), "float32")) -> X:
            with R.dataflow():
                gv = R.nn.instance_norm(x, g, b, channel_axis=1, axes=[2, 3])
                R.output(gv)
            return gv

    tvm.ir.assert_structural_equal(PerSampleInstanceNorm()(Before), Expected)


def test_a_gamma_that_differs_between_samples_is_left() -> None:
    """γ of (B·C,) that is not one vector repeated: each sample's planes have their own, which
    a norm over (B, C, H, W) cannot carry."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: X, g: R.Tensor((8,), "float32"), b: R.Tensor((8,), "float32")) -> X:
            with R.dataflow():
                f = R.reshape(x, R.shape([1, 8, 3, 3]))
                n = R.nn.instance_norm(f, g, b, channel_axis=1, axes=[0, 2, 3])
                gv = R.reshape(n, R.shape([2, 4, 3, 3]))
                R.output(gv)
            return gv

    tvm.ir.assert_structural_equal(PerSampleInstanceNorm()(Before), Before)


class _Generator(nn.Module):
    """CycleGAN's block at a batch of two: conv, InstanceNorm (with and without affine),
    ReLU, conv."""

    def __init__(self, affine: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = nn.InstanceNorm2d(4, affine=affine)
        self.out = nn.Conv2d(4, 4, 1)
        if affine:
            with torch.no_grad():
                self.norm.weight.uniform_(0.5, 1.5)
                self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.norm(self.conv(x))))


@pytest.mark.compile
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_instance_norm_at_batch_two_costs_no_transform(tmp_path, affine) -> None:
    kernels = compile_nhwc_case(tmp_path, lambda: _Generator(affine), (2, 3, 8, 8), rtol=1e-4,
                                atol=1e-5)
    # NHWC in, NCHW out: the output boundary alone (the fold cost one transform more)
    assert len(kernels.runtime_transforms) == 1, kernels.render()
