"""FIR filters applied per channel by folding the channels into the batch.

Layout feature: resampling and anti-aliasing code (StyleGAN2/3's ``upfirdn2d`` reference
implementation, kornia's ``filter2d``, Gaussian blurs) filters every channel alike by viewing
``(N, C, H, W)`` as ``(N·C, 1, H, W)``, padding, zero-stuffing and slicing each plane, and
convolving it with a one-channel kernel before viewing it back. The views are written against
NCHW; in a channels-last program each filter is a depthwise convolution.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _kernel(taps: list[float]) -> torch.Tensor:
    k = torch.tensor(taps, dtype=torch.float32)
    k = k[None, :] * k[:, None]
    return k / k.sum()


def upfirdn2d(x: torch.Tensor, kernel: torch.Tensor, up: int = 1, down: int = 1,
              pad: tuple[int, int] = (0, 0)) -> torch.Tensor:
    """Upsample by zero insertion, pad, FIR-filter, downsample (the same on both axes), in
    the reference code's way: channels folded into the batch, one plane per filter."""
    n, c, h, w = x.shape
    kh, kw = kernel.shape
    p0, p1 = pad
    y = x.reshape(-1, h, w, 1)
    y = y.view(-1, h, 1, w, 1, 1)
    y = F.pad(y, [0, 0, 0, up - 1, 0, 0, 0, up - 1])
    y = y.view(-1, h * up, w * up, 1)
    y = F.pad(y, [0, 0, p0, p1, p0, p1])
    y = y.permute(0, 3, 1, 2).reshape(-1, 1, h * up + p0 + p1, w * up + p0 + p1)
    y = F.conv2d(y, torch.flip(kernel, [0, 1]).view(1, 1, kh, kw))
    y = y.permute(0, 2, 3, 1)[:, ::down, ::down, :]
    return y.reshape(n, c, y.shape[1], y.shape[2])


class Upsample(nn.Module):
    """2x upsampling: zero-stuffing and a [1, 3, 3, 1] filter (StyleGAN2's ``Upsample``)."""

    def __init__(self, factor: int = 2) -> None:
        super().__init__()
        self.factor = factor
        self.register_buffer("kernel", _kernel([1, 3, 3, 1]) * factor ** 2)
        p = 4 - factor
        self.pad = ((p + 1) // 2 + factor - 1, p // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return upfirdn2d(x, self.kernel, up=self.factor, pad=self.pad)


class Blur(nn.Module):
    """A [1, 3, 3, 1] blur before a strided convolution (StyleGAN2's discriminator)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("kernel", _kernel([1, 3, 3, 1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return upfirdn2d(x, self.kernel, pad=(2, 1))


class GaussianBlur(nn.Module):
    """kornia-style: ``view(-1, 1, H, W)``, a 5x5 Gaussian with padding, ``view`` back."""

    def __init__(self, sigma: float = 1.0) -> None:
        super().__init__()
        t = torch.arange(5, dtype=torch.float32) - 2
        g = torch.exp(-t ** 2 / (2 * sigma ** 2))
        self.register_buffer("kernel", _kernel(g.tolist())[None, None])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        y = F.conv2d(F.pad(x.view(-1, 1, h, w), [2, 2, 2, 2], mode="reflect"), self.kernel)
        return y.view(n, c, h, w)


class FIRResampler(nn.Module):
    """conv, 2x FIR upsampling, conv, Gaussian blur, blur + stride-2 conv, conv."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.up = Upsample()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1)
        self.smooth = GaussianBlur()
        self.blur = Blur()
        self.down = nn.Conv2d(width, width, 3, stride=2)
        self.head = nn.Conv2d(width, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.leaky_relu(self.stem(x), 0.2)
        y = F.leaky_relu(self.conv1(self.up(y)), 0.2)
        y = self.down(self.blur(self.smooth(y)))
        return self.head(F.leaky_relu(y, 0.2))


def fir_resampler(width: int = 16) -> nn.Module:
    return FIRResampler(width).eval()
