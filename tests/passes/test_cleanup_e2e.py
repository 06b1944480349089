"""End to end on small real torch models: export -> import -> ConvertLayout -> cleanup passes.

One model per technique. Each checks the run-time permute count before and after, and that the
compiled module computes exactly (bit for bit) what it computes without the passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import tvm
from torch import nn
from torch.nn import functional as F

from cl_validate.compile.passes import cleanup_passes
from cl_validate.compile.passes._util import moves_only_unit_axes
from cl_validate.ir import bindings, count_permutes, permute_axes, static_shape

pytestmark = pytest.mark.compile


class MobileBlock(nn.Module):
    """MobileNetV2 inverted residual with ReLU6 (R.clip: no layout rule) around it."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU6())
        self.expand = nn.Sequential(nn.Conv2d(c, 2 * c, 1), nn.BatchNorm2d(2 * c), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(2 * c, 2 * c, 3, padding=1, groups=2 * c), nn.ReLU6())
        self.project = nn.Conv2d(2 * c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        return y + self.project(self.dw(self.expand(y)))


class HardSwishSE(nn.Module):
    """MobileNetV3 style: Hardswish, squeeze-excite gate with Hardsigmoid, Mish, concat."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, c, 3, padding=1)
        self.reduce, self.expand = nn.Conv2d(c, 4, 1), nn.Conv2d(4, c, 1)
        self.out = nn.Conv2d(2 * c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.hardswish(self.conv(x))
        gate = F.hardsigmoid(self.expand(F.relu(self.reduce(y.mean((2, 3), keepdim=True)))))
        return self.out(torch.cat([y * gate, F.mish(y)], 1))


class Shuffles(nn.Module):
    """PixelShuffle and a ShuffleNet channel shuffle: reshape/transpose chains in NCHW."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, c, 1)
        self.mid = nn.Conv2d(c, c, 1)
        self.up = nn.PixelShuffle(2)
        self.out = nn.Conv2d(c // 4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        n, c, h, w = y.shape
        y = y.reshape(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
        return self.out(self.up(self.mid(y)))


class ShuffleUnit(nn.Module):
    """ShuffleNet's units: `groups` branches concatenated, then a channel shuffle of that many
    groups (a concat whose output the shuffle interleaves); with `also_read`, the concat is
    read before its shuffle as well (then the shuffle has to stay a transpose)."""

    def __init__(self, groups: int = 2, c: int = 4, also_read: bool = False) -> None:
        super().__init__()
        self.groups, self.also_read = groups, also_read
        self.branches = nn.ModuleList(nn.Conv2d(3, c, 1) for _ in range(groups))
        self.out = nn.Conv2d(groups * c, 5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat([b(x) for b in self.branches], 1)
        n, c, h, w = y.shape
        z = y.view(n, self.groups, c // self.groups, h, w).transpose(1, 2).reshape(n, c, h, w)
        out = self.out(z)
        return out + self.out(y) if self.also_read else out


class Classifier(nn.Module):
    """Global pool + flatten + linear: the pooled (1, 1, 1, C) value goes back to NCHW before
    the flatten, a permute that only moves size-1 axes."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, c, 3, padding=1)
        self.fc = nn.Linear(c, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.adaptive_avg_pool2d(F.relu(self.conv(x)), 1)
        return self.fc(torch.flatten(y, 1))


class BatchNormAfterOwnPermute(nn.Module):
    """MaxViT: an NHWC stage (LayerNorm, Linear) the model permutes back to NCHW for a
    BatchNorm2d and a conv."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.ln, self.fc = nn.LayerNorm(c), nn.Linear(c, c)
        self.bn = nn.BatchNorm2d(c)
        self.conv = nn.Conv2d(c, c, 1)
        self.bn.running_mean.normal_()
        self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.stem(x).permute(0, 2, 3, 1)
        t = t + self.fc(self.ln(t))
        return self.conv(self.bn(t.permute(0, 3, 1, 2)))


class CoordSpaceToDepth(nn.Module):
    """A space-to-depth stem (``pixel_unshuffle``) concatenated with CoordConv's coordinate
    planes (``linspace(...).expand``): the concat's transpose to NHWC joins the stem's own
    and moves onto the planes' small inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(12 + 2, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.pixel_unshuffle(x, 2)
        b, _, h, w = s.shape
        ys = torch.linspace(-1, 1, h).view(1, 1, h, 1).expand(b, 1, h, w)
        xs = torch.linspace(-1, 1, w).view(1, 1, 1, w).expand(b, 1, h, w)
        return self.conv(torch.cat([s, ys, xs], 1))


def _cleanup(mod: tvm.IRModule) -> tvm.IRModule:
    out = tvm.transform.Sequential(cleanup_passes())(mod)
    tvm.relax.analysis.well_formed(out)
    return out


def _exact(run_llvm: Callable[..., list[np.ndarray]], a: tvm.IRModule, b: tvm.IRModule,
           *args: Any) -> None:
    for x, y in zip(run_llvm(a, *args), run_llvm(b, *args), strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(("model", "before", "after"), [
    pytest.param(MobileBlock, 8, 2, id="relu6-mobilenet-block"),
    pytest.param(HardSwishSE, 10, 2, id="hardswish-se-mish-concat"),
    pytest.param(Shuffles, 8, 4, id="pixel-and-channel-shuffle"),
    pytest.param(ShuffleUnit, 6, 2, id="channel-shuffle-after-concat"),
    pytest.param(lambda: ShuffleUnit(groups=3), 7, 2, id="three-group-shuffle-after-concat"),
    pytest.param(lambda: ShuffleUnit(also_read=True), 6, 3,
                 id="shuffle-of-a-concat-read-twice"),
    pytest.param(BatchNormAfterOwnPermute, 4, 2, id="batch-norm-after-own-permute"),
    pytest.param(CoordSpaceToDepth, 3, 2, id="coordinate-planes-after-space-to-depth"),
])
def test_transforms_left_are_the_boundary(import_nhwc: Any, run_llvm: Any, model: type,
                                          before: int, after: int) -> None:
    """Input and output permutes remain (the model is NCHW in and out); each shuffle keeps
    the one transpose that is the shuffle itself, but one after a concat: the concat writes
    its parts interleaved (unless the concat is read elsewhere too)."""
    imp = import_nhwc(model())
    cleaned = _cleanup(imp.converted)
    assert count_permutes(imp.converted) == before
    assert count_permutes(cleaned) == after
    _exact(run_llvm, imp.converted, cleaned, imp.example, *imp.params)


def test_bound_weights(import_nhwc: Any, run_llvm: Any) -> None:
    """Weights already bound as constants: the same result, the same count."""
    imp = import_nhwc(HardSwishSE())
    bound = imp.bound(imp.converted)
    cleaned = _cleanup(bound)
    assert (count_permutes(bound), count_permutes(cleaned)) == (10, 2)
    _exact(run_llvm, bound, cleaned, imp.example)


def test_size1_permute_becomes_reshape(import_nhwc: Any, run_llvm: Any) -> None:
    imp = import_nhwc(Classifier())
    cleaned = _cleanup(imp.converted)
    assert count_permutes(imp.converted) == 2  # input, and the pooled (1, 1, 1, 8)
    assert count_permutes(cleaned) == 1  # input only
    for b in bindings(cleaned["main"]):  # every permute left (weights too) moves data
        axes = permute_axes(b.value)
        if axes is not None:
            assert not moves_only_unit_axes(static_shape(b.value.args[0]), axes)
    _exact(run_llvm, imp.converted, cleaned, imp.example, *imp.params)


class _Scans(nn.Module):
    """cumsum over H, sort over the channels, argsort over W, cumprod over the channels of
    a conv map, flip along W, topk over H (values and indices): each along its axis alone;
    bucketize, each element alone."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        y = y.cumsum(2) / 8 + torch.sort(y, dim=1)[0] + torch.argsort(y, dim=3).float() / 8
        y = y + torch.bucketize(y, torch.tensor([-0.5, 0.0, 0.5])).float() / 4
        top, at = torch.topk(y, 8, dim=2)
        return self.b(y.cumprod(1) + torch.flip(y, [3]) + top + at.float() / 8)



def test_scans_and_sorts_run_in_the_layout_of_their_input(tmp_path) -> None:
    """Each was transposed into NCHW and back (4 transforms more; without their rules the
    flip 1 more, the topk 3: into it, and back for its values and for its indices)."""
    from tests.passes.conftest import compile_nhwc

    _, kernels = compile_nhwc(tmp_path, _Scans, (1, 3, 8, 8), rtol=1e-5, atol=1e-5,
                              input_layout="NCHW")
    assert len(kernels.runtime_transforms) == 2, kernels.render()  # the boundaries


class _TwoViews(nn.Module):
    """LoFTR-style matching on one image: the image and its mirror (``torch.flip`` along W)
    stacked on the batch, through one shared convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.cat([x, torch.flip(x, dims=[3])], dim=0))


def test_a_mirrored_view_of_a_channels_last_input_needs_no_transform(tmp_path) -> None:
    """With NHWC input the flip runs on W where the data has it: no transform but the
    output's (before: NHWC to NCHW and back around the flip, in the kernel of the concat)."""
    from tests.passes.conftest import compile_nhwc

    _, kernels = compile_nhwc(tmp_path, _TwoViews, (1, 3, 8, 8), rtol=1e-5, atol=1e-5)
    reasons = [t.attribution.reason.name for t in kernels.runtime_transforms]
    assert reasons == ["OUTPUT_BOUNDARY"], kernels.render()
