"""Small sequence models for tests: a conv subsampling into tokens, a Linear on the
flattened ``(B, T, C·F)`` features and a Conformer-style conv module (``transpose(1, 2)``,
pointwise Conv1d, GLU, depthwise Conv1d, BatchNorm1d, SiLU, pointwise Conv1d, back)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ConvModuleTokens(nn.Module):
    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.sub = nn.Conv2d(3, 4, 3, 2, 1)
        self.proj = nn.Linear(4 * 8, d)
        self.norm = nn.LayerNorm(d)
        self.pw1, self.pw2 = nn.Conv1d(d, 2 * d, 1), nn.Conv1d(d, d, 1)
        self.dw = nn.Conv1d(d, d, 5, padding=2, groups=d)
        self.bn = nn.BatchNorm1d(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.relu(self.sub(x))  # (B, C, T, F)
        b, c, t, f = s.shape
        h = self.proj(s.permute(0, 2, 1, 3).reshape(b, t, c * f))
        y = F.glu(self.pw1(self.norm(h).transpose(1, 2)), dim=1)
        y = self.pw2(F.silu(self.bn(self.dw(y))))
        return h + y.transpose(1, 2)


def conv_module_tokens() -> nn.Module:
    return ConvModuleTokens()
