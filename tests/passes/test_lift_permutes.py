"""A transpose after an elementwise join of differently transposed operands is lifted onto
them: CCNet's criss-cross attention sums a column branch and a row branch, each permuted
back to NCHW its own way, scales the sum and adds the map. Lifted, ConvertLayout's transpose
after the sum is composed with each branch's permute: one becomes a matmul's write, one
stays a transpose (written along the matmul's rows from its larger operand, a product would
walk memory worse than the transpose does: `walk_problem`). Without the lift both
branches' permutes stay (the sum's is carried into one of them)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cl_validate.compile.passes import sink_rounds
from tests.passes.conftest import compile_nhwc_case

pytestmark = pytest.mark.compile


class CrissCross(nn.Module):
    """Along the columns: ``(B, W, C, H) @ (H, H)`` back by ``permute(0, 2, 3, 1)``; along
    the rows: ``(B, H, C, W) @ (W, W)`` back by ``permute(0, 2, 1, 3)``; ``γ·(a + b) + y``."""

    def __init__(self, size: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 1)
        self.cols = nn.Parameter(torch.randn(size, size) / size)
        self.rows = nn.Parameter(torch.randn(size, size) / size)
        self.gamma = nn.Parameter(torch.tensor([0.5]))
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        a = (y.permute(0, 3, 1, 2) @ self.cols).permute(0, 2, 3, 1)
        b = (y.permute(0, 2, 1, 3) @ self.rows).permute(0, 2, 1, 3)
        return self.head(self.gamma * (a + b) + y)


def _moved(tmp_path, monkeypatch, lift: bool) -> list[str]:
    if not lift:
        monkeypatch.setattr(sink_rounds, "_lifted", lambda _func, _accept: None)
    kernels = compile_nhwc_case(tmp_path, CrissCross, (1, 3, 8, 8), rtol=1e-5, atol=1e-5)
    return [t.describe() for t in kernels.runtime_transforms if "boundary" not in t.describe()]


def test_the_join_of_two_branches_leaves_one_transpose(tmp_path, monkeypatch) -> None:
    lifted = _moved(tmp_path, monkeypatch, lift=True)
    assert len(lifted) == 1, lifted


def test_without_the_lift_each_branch_keeps_its_transpose(tmp_path, monkeypatch) -> None:
    kept = _moved(tmp_path, monkeypatch, lift=False)
    assert len(kept) == 2, kept
