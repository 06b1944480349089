"""A max pool's indices and ``max_unpool`` (SegNet, ENet): the indices are PyTorch's exactly
(TVM 0.27's importer gives zeros: a wrong program where a model reads them, a failed import
where ``max_unpool`` scatters with them), and the unpool is a scatter per plane that the
layout passes carry channels-last with the pool it reads."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.conftest import tvm_outputs
from tests.passes.conftest import compile_nhwc

pytestmark = pytest.mark.compile

# kernel, stride, padding, dilation, ceil_mode: the default stride, overlapping windows with
# a padded border and ceil_mode's partial last window, dilation, and per-axis values
GEOMETRIES = [(2, None, 0, 1, False), (3, 2, 1, 1, True), (3, 1, 1, 2, False),
              ((2, 3), (1, 2), (1, 0), 1, True)]


class Pools(nn.Module):
    """Values and indices of max pools of every rank and geometry, batched and not."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        out: list[torch.Tensor] = []
        for k, s, p, d, ceil in GEOMETRIES:
            out += F.max_pool2d(x, k, s, p, d, ceil_mode=ceil, return_indices=True)
        out += F.max_pool2d(x[0], 3, 2, 1, ceil_mode=True, return_indices=True)  # (C, H, W)
        out += F.max_pool1d(x.flatten(2), 3, 2, 1, return_indices=True)
        out += F.max_pool3d(x.unsqueeze(0), 2, 2, 1, return_indices=True)
        return out


class Unpools(nn.Module):
    """Pools and unpools with the same geometry, scaled in between (the unpooled map holds
    each window's maximum at its place, zeros elsewhere), an explicit output size too."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        y, i = F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True)
        y2, i2 = F.max_pool2d(x, 2, return_indices=True)
        y1, i1 = F.max_pool1d(x.flatten(2), 2, return_indices=True)
        y3, i3 = F.max_pool3d(x.unsqueeze(0), 2, return_indices=True)
        return [F.max_unpool2d(y * 2, i, 3, 2, 1, output_size=x.shape[-2:]),
                F.max_unpool2d(y2 - 1, i2, 2),
                F.max_unpool1d(y1 * 3, i1, 2),
                F.max_unpool3d(y3 + 1, i3, 2, output_size=x.shape[-3:])]


def test_max_pool_indices_are_pytorchs_for_every_geometry_and_rank():
    """Ties everywhere (integer-valued inputs): the first maximum in the window's order."""
    torch.manual_seed(0)
    x = torch.randint(0, 3, (2, 4, 9, 10)).float()
    got, want = tvm_outputs(Pools(), x, decompose=True), Pools()(x)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.numpy().dtype
        np.testing.assert_array_equal(g, w.numpy())


def test_max_unpool_puts_each_value_at_its_index():
    torch.manual_seed(0)
    x = torch.randn(2, 4, 9, 10)
    for g, w in zip(tvm_outputs(Unpools(), x, decompose=True), Unpools()(x), strict=True):
        np.testing.assert_array_equal(g, w.numpy())


class DividedPools(nn.Module):
    """``avg_pool2d`` with ``divisor_override``: each window's sum over the divisor (TVM's
    converter dropped the divisor), padded and ``ceil_mode`` windows included."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [F.avg_pool2d(x, 2, divisor_override=3),
                F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, divisor_override=2),
                F.avg_pool2d(x, (2, 3), (1, 2), (1, 0), count_include_pad=False,
                             divisor_override=5)]


def test_an_average_pool_with_a_divisor_override_divides_by_it():
    torch.manual_seed(0)
    x = torch.randn(2, 4, 9, 10)
    for g, w in zip(tvm_outputs(DividedPools(), x, decompose=True), DividedPools()(x),
                    strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)


class SegNetStage(nn.Module):
    """One SegNet encoder/decoder stage: conv, pool with indices, conv, unpool, conv."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.mid = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.dec = nn.Conv2d(8, 5, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, i = F.max_pool2d(self.enc(x), 2, 2, return_indices=True)
        return self.dec(F.max_unpool2d(self.mid(y), i, 2, 2))


def test_a_segnet_stage_stays_channels_last(tmp_path):
    """Before: the import failed (float zeros as indices); with torch's own decomposition
    (the indices offset to a flat NCHW position) the pool and the scatter ran in NCHW behind
    three transposes. Now only the NCHW output's boundary is left, the pool runs in NHWC."""
    compiled, kernels = compile_nhwc(tmp_path, SegNetStage, (1, 3, 16, 16), rtol=1e-4,
                                     atol=1e-5)
    assert len(kernels.runtime_transforms) == 1, kernels.render()
    program = str(compiled.stage("convert_layout").mod["main"])
    assert 'layout="NHWC"' in program and "max_pool2d" in program
    final = str(compiled.stage("fold_scale_shift").mod["main"])
    assert "scatter_elements" in final and 'layout="NCHW"' not in final


def test_a_symbolic_batch_keeps_exact_indices_and_resizes():
    """torch.export writes every max pool with its indices: a symbolic batch (or channel
    count) must not stop the import (the bundled dynamic-batch ResNet did), and the indices
    and a resize off the grid are still PyTorch's at every batch."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map
    from cl_validate.compile.decompositions import decompositions

    class Both(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            y, i = F.max_pool2d(x, 3, 2, 1, return_indices=True)
            return y, i, F.interpolate(x, size=(4, 5))

    batch = torch.export.Dim("batch", min=1, max=8)
    ep = torch.export.export(Both(), (torch.randn(2, 3, 9, 10),),
                             dynamic_shapes=({0: batch},)).run_decompositions(decompositions())
    mod = from_exported_program(ep, custom_convert_map=custom_convert_map())
    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})),
                              tvm.cpu())
    for n in (1, 5):
        x = torch.randint(0, 3, (n, 3, 9, 10)).float()
        got = vm["main"](tvm.runtime.tensor(x.numpy()))
        for g, w in zip(got, Both()(x), strict=True):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
