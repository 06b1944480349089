"""``Tensor.unfold``'s windows follow the data: the import gathers them with a 2-D index
``(windows, size)`` (`cl_validate.compile.window_converters`), and that gather's layout rule
puts the index's two axes where the data's axis was. Before, a gather with a 2-D index had
no rule: HaloNet's keys and values (a 1x1 conv, ``F.pad``, ``unfold(2, ...).unfold(3, ...)``)
went back to NCHW for the pad and the two gathers, three transposes per attention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.passes.conftest import compile_nhwc_case

pytestmark = pytest.mark.compile


class HaloWindows(nn.Module):
    """Overlapping 4x4 windows of a padded conv output (stride 2, a halo of 1), averaged,
    into a 1x1 conv."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.out = nn.Conv2d(3, 8, 1), nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kv = F.pad(self.conv(x), [1, 1, 1, 1])
        windows = kv.unfold(2, 4, 2).unfold(3, 4, 2)  # (B, C, 4, 4, 4, 4)
        return self.out(windows.mean(dim=(-2, -1)))


def test_the_windows_are_gathered_where_the_conv_wrote_them(tmp_path) -> None:
    kernels = compile_nhwc_case(tmp_path, HaloWindows, (1, 3, 8, 8), rtol=1e-5, atol=1e-6)
    moved = [t.describe() for t in kernels.runtime_transforms]
    assert len(moved) == 1 and "output boundary" in moved[0], kernels.render()
