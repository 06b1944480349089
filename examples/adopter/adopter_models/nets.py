"""A small NCHW image model, as a team would write it: convolutions, BatchNorm, ReLU, a
global pool and a classifier. Compiled channels-last, it should need only the input
boundary's layout transform (the pooled features are 1x1: no transform on the way out)."""

from __future__ import annotations

import torch
from torch import nn


class SmallNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16),
                                   nn.ReLU())
        self.head = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.block(x)
        return self.head(x.mean((2, 3)))


def small_net() -> nn.Module:
    return SmallNet().eval()
