"""Models that misbehave at run time: the report must survive each of them."""

from __future__ import annotations

import ctypes
import time

import torch
from torch import nn


class Segfault(nn.Module):
    """Crashes the process in forward (as a buggy native extension would)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        print("about to crash", flush=True)
        ctypes.string_at(0)  # reads address 0: SIGSEGV
        return x


class Hang(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(3600)
        return x


class MemoryHog(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hog = torch.ones(1024, 1024, 1024, dtype=torch.float32)  # 4 GiB, touched
        time.sleep(30)
        return x + hog[0, 0, 0]


def segfault() -> nn.Module:
    return Segfault()


def hang() -> nn.Module:
    return Hang()


def memory_hog() -> nn.Module:
    return MemoryHog()
