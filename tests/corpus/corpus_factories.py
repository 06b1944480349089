"""Model factories for the hostile-input corpus: each one is wrong in exactly one way.

Kept tiny (8x8 inputs, a handful of channels) so the cases that do compile take seconds.
"""

from __future__ import annotations

import torch
from torch import nn


class Conv(nn.Module):
    """A well-behaved model: the control case the broken ones are variations of."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


class DataDependent(Conv):
    """Python control flow on a tensor value: torch.export cannot trace it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        if y.sum() > 0:
            return y * 2
        return y - 1


class Spectrum(Conv):
    """The exponential of a spectrum: exports fine, but neither TVM 0.27's torch frontend nor
    cl_validate's complex pairs compute ``exp`` of a complex tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.fft(self.conv(x)).exp().real


class NaNOut(Conv):
    """Every output element is NaN (sqrt of a negative number)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(-torch.abs(self.conv(x)) - 1.0)


class TwoInputs(Conv):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.conv(x) + self.conv(y)


def conv() -> nn.Module:
    return Conv()


def data_dependent() -> nn.Module:
    return DataDependent()


def spectrum() -> nn.Module:
    return Spectrum()


def nan_out() -> nn.Module:
    return NaNOut()


def two_inputs() -> nn.Module:
    return TwoInputs()


def returns_factory() -> object:
    """Returns the factory instead of calling it (a common slip)."""
    return conv


def returns_tensor() -> object:
    return torch.zeros(1, 3, 8, 8)


def raises() -> nn.Module:
    raise FileNotFoundError("checkpoint weights/conv.pt not found")


NOT_CALLABLE = 42


class ForwardRaises(Conv):
    """forward() raises an exception with no message at all."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError()


def forward_raises() -> nn.Module:
    return ForwardRaises()
