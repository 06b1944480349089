"""A slice written in place (``x[:, :c] = conv(x[:, :c])``, FasterNet's partial convolution;
ShiftViT's shifted channel groups) imports as ``slice_scatter``, which ConvertLayout has no rule
for: SinkPermutes runs it on the channels-last data, the sliced axis renamed, so it costs no
transpose into NCHW and back."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.passes.conftest import compile_nhwc_case

pytestmark = pytest.mark.compile


class PartialConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 1), nn.Conv2d(8, 8, 1)
        self.p = nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(x).clone()
        x[:, :2] = self.p(x[:, :2])
        return self.b(x)


class Shift(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 1), nn.Conv2d(8, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(x)
        out = torch.zeros_like(x)
        out[:, 0:2, :, :-1] = x[:, 0:2, :, 1:]
        out[:, 2:4, :, 1:] = x[:, 2:4, :, :-1]
        out[:, 4:, :, :] = x[:, 4:, :, :]
        return self.b(out)


@pytest.mark.parametrize("model", [PartialConv, Shift], ids=["partial_conv", "shift"])
def test_a_slice_written_in_place_costs_no_transform(tmp_path, model) -> None:
    kernels = compile_nhwc_case(tmp_path, model, (1, 3, 6, 6), rtol=1e-5, atol=1e-6)
    assert len(kernels.runtime_transforms) == 1, kernels.render()  # the NCHW output alone
