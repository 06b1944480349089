"""Tiny PyTorch models for the integration tests: seconds to compile, real TVM all the way."""

from __future__ import annotations

import torch
from torch import nn


class ConvReLU(nn.Module):
    """conv3x3 → ReLU → conv3x3, NCHW in and out: two boundary transforms under NHWC."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(torch.relu(self.conv1(x)))


class Classifier(nn.Module):
    """conv → ReLU → global mean → Linear: a classifier (1 transform: input boundary)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


class NaNModel(nn.Module):
    """Produces NaN for every input (log of a negative number): numerics must fail."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(-torch.abs(self.conv(x)) - 1.0)


class TwoOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.conv(x)
        return y, y.sum((2, 3))


def conv_relu() -> nn.Module:
    return ConvReLU()


def classifier() -> nn.Module:
    return Classifier()


def nan_model() -> nn.Module:
    return NaNModel()


def two_outputs() -> nn.Module:
    return TwoOutputs()


def not_a_module() -> object:
    return [1, 2, 3]


def raises() -> nn.Module:
    raise RuntimeError("weights file missing")


class ReLU6Net(nn.Module):
    """conv → ReLU6 → conv: `clip` has no layout rule in TVM 0.27's ConvertLayout."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU6(),
                                      nn.Conv2d(8, 8, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


class OwnPermute(nn.Module):
    """Takes NHWC, permutes to NCHW itself, convolves, returns NCHW."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x.permute(0, 3, 1, 2))).sum(1)


def relu6_net() -> nn.Module:
    return ReLU6Net()


def own_permute() -> nn.Module:
    return OwnPermute()


class SequenceFirst(nn.Module):
    """Conv features as a sequence, the way nn.MultiheadAttention(batch_first=False) wants
    them: (H·W, N, C). At batch 1 moving the batch axis moves nothing (a free reshape); at
    batch 8 it is a real transpose: a layout transform that only some shapes have."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.mix = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = self.conv(x).flatten(2).permute(2, 0, 1)  # (H·W, N, C)
        return torch.relu(self.mix(seq))


def sequence_first() -> nn.Module:
    return SequenceFirst()


class FixedBatch(nn.Module):
    """Reshapes with a constant batch size: it cannot be exported with a dynamic batch."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).view(4, -1)


def fixed_batch() -> nn.Module:
    return FixedBatch()


class SlowConvs(nn.Module):
    """Four 64-channel 3×3 convolutions at 128×128: quick to compile, seconds to run untuned
    on one thread (the RPC tests stop a device server while it runs this)."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.Sequential(*(nn.Conv2d(64, 64, 3, padding=1) for _ in range(4)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.convs(x)


def slow_convs() -> nn.Module:
    return SlowConvs()
