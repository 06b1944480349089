"""Attention over several batch axes (Hiera's mask units: windows and heads), and a query
pooled by ``max`` along a stride axis.

SDPA on five-axis operands ``(B, heads, windows, L, E)`` was imported with B·heads as Relax's
batch and the windows as its heads: the query, key, value and output each got a transpose,
although the model's own head split had laid the data out as (tokens, windows, heads, E),
which is BSHD with windows·heads as its heads. ``x.max(dim)`` was a sort (``topk``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cl_validate.measurements.attribution import Reason


class MaskUnits(nn.Module):
    """Patch tokens in mask-unit order, q/k/v per window and head; ``pool`` > 1 max-pools q
    over a stride split off the tokens, as Hiera's stage transitions do."""

    def __init__(self, pool: int, dim: int = 16, heads: int = 2, windows: int = 4) -> None:
        super().__init__()
        self.pool, self.heads, self.windows = pool, heads, windows
        self.embed = nn.Conv2d(3, dim, 4, 4)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.head = nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).flatten(2).transpose(1, 2)
        b, _, c = t.shape
        qkv = self.qkv(t).reshape(b, -1, self.windows, 3, self.heads, c // self.heads)
        q, k, v = qkv.permute(3, 0, 4, 2, 1, 5).unbind(0)
        if self.pool > 1:
            q = q.view(b, self.heads, self.windows, self.pool, -1, c // self.heads)
            q = q.max(dim=3).values
        out = F.scaled_dot_product_attention(q, k, v)
        return self.head(self.proj(out.transpose(1, 3).reshape(b, -1, c)))


@pytest.mark.compile
@pytest.mark.parametrize("pool", [1, 2])
def test_attention_over_windows_and_heads_reads_the_head_split_in_place(pool, tmp_path):
    from tests.test_attention import _compile  # numerics against PyTorch inside

    kernels = _compile(MaskUnits(pool), 16, tmp_path)
    reasons = [t.attribution.reason for t in kernels.runtime_transforms]
    assert reasons == [Reason.INPUT_BOUNDARY], kernels.render()
    names = [k.name for k in kernels.kernels]
    assert sum(n.startswith("attention") for n in names) == 1, kernels.render()
    assert not any("topk" in n for n in names), kernels.render()
