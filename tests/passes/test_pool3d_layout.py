"""3-D pools carry a layout like the 2-D ones: ``F.local_response_norm`` (AlexNet-style LRN)
is an ``avg_pool3d`` across the channels of the squared map viewed 5-D, and it cost a
transpose out of NHWC and one back around every LRN; a 3-D max pool over frames stacked from
NHWC maps the same."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.passes.conftest import compile_nhwc

pytestmark = pytest.mark.compile


class LRNBetweenConvs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.local_response_norm(F.relu(self.a(x)), 5, alpha=1e-3, beta=0.75, k=2.0)
        return self.b(y)


class PooledFrames(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frames = self.a(x).unsqueeze(2)  # (N, C, 1, H, W)
        pooled = F.max_pool3d(frames, (1, 3, 3), 1, (0, 1, 1)) + F.avg_pool3d(frames, (1, 3, 3), 1,
                                                                    (0, 1, 1))
        return self.b(pooled.squeeze(2))


@pytest.mark.parametrize("model", [LRNBetweenConvs, PooledFrames])
def test_a_3d_pool_between_nhwc_convs_adds_no_transform(tmp_path, model):
    """NHWC input: the NCHW output's boundary is the one transform left (3 before)."""
    _, kernels = compile_nhwc(tmp_path, model, (2, 3, 12, 12), rtol=1e-4, atol=1e-5)
    assert len(kernels.runtime_transforms) == 1, kernels.render()
