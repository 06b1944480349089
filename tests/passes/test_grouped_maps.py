"""UnmergeGroupedMaps: statistics over a map viewed ``(B, G, C/G·H·W)`` (a manual GroupNorm,
timm's EvoNorm, a per-sample standardization) keep the channel split apart from the pixels,
so a channels-last program needs no transpose around them; the same elements are reduced."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from tests.passes.conftest import compile_nhwc

pytestmark = pytest.mark.compile


class ManualGroupNorm(nn.Module):
    """GroupNorm as older code writes it, between two convolutions."""

    def __init__(self, groups: int = 4) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 4, 1)
        self.groups = groups
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 8).view(1, 8, 1, 1))
        self.bias = nn.Parameter(torch.linspace(-0.2, 0.2, 8).view(1, 8, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        b, c, h, w = y.shape
        g = y.view(b, self.groups, -1)
        mean = g.mean(-1, keepdim=True)
        var = g.var(-1, keepdim=True, unbiased=False)
        g = (g - mean) / torch.sqrt(var + 1e-5)
        return self.b(torch.relu(g.view(b, c, h, w) * self.weight + self.bias))


class EvoNormS0(nn.Module):
    """timm's EvoNorm2dS0: the group std computed, expanded back and viewed as the map."""

    def __init__(self, groups: int = 2) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 4, 1)
        self.groups = groups
        self.v = nn.Parameter(torch.linspace(-1, 1, 8).view(1, 8, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        b, c, h, w = y.shape
        var = y.reshape(b, self.groups, -1).var(-1, unbiased=False, keepdim=True)
        std = (var + 1e-5).sqrt().expand(b, self.groups, c // self.groups * h * w)
        return self.b(y * torch.sigmoid(self.v * y) / std.reshape(b, c, h, w))


class StatisticOut(nn.Module):
    """The group means are an output too: the region is read elsewhere, left as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.a(x)
        g = y.view(y.shape[0], 2, -1)
        mean = g.mean(-1, keepdim=True)
        return (g - mean).view(y.shape), mean


@pytest.mark.parametrize("model", [ManualGroupNorm, EvoNormS0, lambda: ManualGroupNorm(1)])
def test_group_statistics_between_nhwc_convs_add_no_transform(tmp_path, model):
    """NHWC input: the NCHW output's boundary is the one transform left (3 before)."""
    compiled, kernels = compile_nhwc(tmp_path, model, (2, 3, 8, 8), rtol=1e-4, atol=1e-5)
    assert len(kernels.runtime_transforms) == 1, kernels.render()
    assert "(2, 8, 64)" not in str(compiled.stage("normalize_axes").mod["main"])


def test_a_statistic_read_elsewhere_leaves_the_region_as_it_is(tmp_path):
    compiled, _ = compile_nhwc(tmp_path, StatisticOut, (2, 3, 8, 8), rtol=1e-5, atol=1e-6)
    assert "(2, 2, 256)" in str(compiled.stage("normalize_axes").mod["main"])


def test_the_rewrite_alone_changes_no_bit():
    """In the import's own layout the rewritten program reduces the same elements in the
    same order as the merged one: the outputs are equal bit for bit."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map
    from cl_validate.compile.passes import NormalizeAxes, UnmergeGroupedMaps

    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8)
    for model in (ManualGroupNorm(), EvoNormS0()):
        ep = torch.export.export(model.eval(), (x,)).run_decompositions()
        mod = NormalizeAxes()(from_exported_program(ep, custom_convert_map=custom_convert_map()))
        unmerged = UnmergeGroupedMaps()(mod)
        assert not unmerged["main"].same_as(mod["main"])
        outs = []
        for m in (mod, unmerged):
            vm = relax.VirtualMachine(tvm.compile(m, target=tvm.target.Target(
                {"kind": "llvm"})), tvm.cpu())
            outs.append(vm["main"](tvm.runtime.tensor(x.numpy()))[0].numpy())
        assert not np.array_equal(outs[0], np.zeros_like(outs[0]))
        np.testing.assert_array_equal(outs[0], outs[1])
