"""A conv3d fed by a channels-last map: TVM 0.27's ConvertLayout made its data layout
``NCHWD`` (the NHWC map's letters, one axis added by ``unsqueeze``) beside the kernel's
``OIDHW``, and the legalized program computed a wrong result of another shape. An undeclared
conv3d keeps its import layout: the program is PyTorch's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.passes.conftest import compile_nhwc

pytestmark = pytest.mark.compile


class FramesThenVolume(nn.Module):
    """A 2-D stem per frame (the batch), the frames stacked into depth, a 3-D conv."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.volume = nn.Conv3d(4, 5, (2, 3, 3), padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frames = F.relu(self.stem(x))  # (T, C, H, W)
        return self.volume(frames.permute(1, 0, 2, 3).unsqueeze(0))


class UnsqueezedVolume(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 2, 1)
        self.volume = nn.Conv3d(1, 3, (2, 3, 3), padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.volume(self.stem(x).unsqueeze(1))


@pytest.mark.parametrize("model", [FramesThenVolume, UnsqueezedVolume])
def test_a_conv3d_after_nhwc_convs_computes_pytorchs_result(tmp_path, model):
    compiled, _ = compile_nhwc(tmp_path, model, (3, 3, 8, 9), rtol=1e-4, atol=1e-5)
    program = str(compiled.stage("convert_layout").mod["main"])
    assert 'data_layout="NCDHW"' in program and 'kernel_layout="OIDHW"' in program
