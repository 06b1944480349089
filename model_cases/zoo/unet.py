"""A small U-Net (Ronneberger et al. 2015): encoder/decoder with skip concatenation.

Layout features: channel ``cat`` of decoder and encoder maps, max-pool downsampling, and three
kinds of 2× upsampling in one graph — ConvTranspose2d (k2/s2, weight layout IOHW), bilinear
``nn.Upsample`` (``align_corners=False``) and nearest ``nn.Upsample`` — each of which needs its
own NHWC handling (``conv2d_transpose``, ``image.resize2d``). Output stays 4-D.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo._common import ConvNormAct, finalize

UP_MODES = ("transpose", "bilinear", "nearest")


class Up(nn.Module):
    """2× upsample (halving channels) → concat with the skip → double conv."""

    def __init__(self, in_ch: int, skip_ch: int, out_ch: int, mode: str) -> None:
        super().__init__()
        half = in_ch // 2
        if mode == "transpose":
            self.up: nn.Module = nn.ConvTranspose2d(in_ch, half, kernel_size=2, stride=2)
        elif mode == "bilinear":
            self.up = nn.Sequential(
                nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
                nn.Conv2d(in_ch, half, 1),
            )
        elif mode == "nearest":
            self.up = nn.Sequential(
                nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(in_ch, half, 1)
            )
        else:
            raise ValueError(f"unknown upsampling mode {mode!r}; use one of {UP_MODES}")
        self.conv = nn.Sequential(ConvNormAct(half + skip_ch, out_ch, 3),
                                  ConvNormAct(out_ch, out_ch, 3))

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.cat((skip, self.up(x)), dim=1))


class UNet(nn.Module):
    def __init__(self, in_channels: int = 3, num_classes: int = 2, base: int = 32,
                 up_modes: tuple[str, ...] = ("transpose", "bilinear", "transpose", "nearest"),
                 ) -> None:
        super().__init__()
        depth = len(up_modes)
        chans = [base * 2**i for i in range(depth + 1)]
        self.inc = nn.Sequential(ConvNormAct(in_channels, base, 3), ConvNormAct(base, base, 3))
        self.pool = nn.MaxPool2d(2)
        self.downs = nn.ModuleList(
            nn.Sequential(ConvNormAct(chans[i], chans[i + 1], 3),
                          ConvNormAct(chans[i + 1], chans[i + 1], 3))
            for i in range(depth)
        )
        # up_modes[0] is the deepest (first) decoder stage.
        self.ups = nn.ModuleList(
            Up(chans[i + 1], chans[i], chans[i], up_modes[depth - 1 - i])
            for i in reversed(range(depth))
        )
        self.outc = nn.Conv2d(base, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inc(x)
        skips = [x]
        for down in self.downs:
            x = down(self.pool(x))
            skips.append(x)
        skips.pop()  # the bottleneck is x itself
        for up in self.ups:
            x = up(x, skips.pop())
        return self.outc(x)


def unet_small(
    in_channels: int = 3,
    num_classes: int = 2,
    base: int = 32,
    up_modes: tuple[str, ...] = ("transpose", "bilinear", "transpose", "nearest"),
) -> nn.Module:
    """U-Net with len(up_modes) levels; N×in_channels×H×W → N×num_classes×H×W.

    H and W must be multiples of 2^len(up_modes) (16 by default).
    """
    model = UNet(in_channels, num_classes, base, up_modes)
    return finalize(model, (4, in_channels, 64, 64))


class SegNet(nn.Module):
    """SegNet (Badrinarayanan et al. 2017): an encoder whose max pools keep their indices and
    a decoder that unpools with them (``max_unpool2d``: each value back at the position of
    its window's maximum, zeros elsewhere), as in SegNet and ENet; the logits resized to the
    label map's size by a scale factor (``F.interpolate(scale_factor=…)``, whose output
    size is rounded: PyTorch maps coordinates with the factor, not with in/out)."""

    def __init__(self, in_channels: int, num_classes: int, base: int, depth: int,
                 out_scale: float) -> None:
        super().__init__()
        chans = [in_channels] + [base * 2**i for i in range(depth)]
        self.encoders = nn.ModuleList(
            nn.Sequential(ConvNormAct(chans[i], chans[i + 1], 3),
                          ConvNormAct(chans[i + 1], chans[i + 1], 3))
            for i in range(depth))
        self.decoders = nn.ModuleList(
            nn.Sequential(ConvNormAct(chans[i + 1], chans[i + 1], 3),
                          ConvNormAct(chans[i + 1], max(chans[i], base), 3))
            for i in reversed(range(depth)))
        self.classifier = nn.Conv2d(base, num_classes, 3, padding=1)
        self.out_scale = out_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        indices = []
        for encoder in self.encoders:
            x, where = nn.functional.max_pool2d(encoder(x), 2, 2, return_indices=True)
            indices.append(where)
        for decoder in self.decoders:
            x = decoder(nn.functional.max_unpool2d(x, indices.pop(), 2, 2))
        logits = self.classifier(x)
        return nn.functional.interpolate(logits, scale_factor=self.out_scale, mode="bilinear",
                                         align_corners=False)


def segnet_small(in_channels: int = 3, num_classes: int = 5, base: int = 16, depth: int = 3,
                 out_scale: float = 1.4) -> nn.Module:
    """SegNet with `depth` pool/unpool levels; N×in_channels×H×W →
    N×num_classes×floor(H·out_scale)×floor(W·out_scale). H and W multiples of 2^depth."""
    model = SegNet(in_channels, num_classes, base, depth, out_scale)
    return finalize(model, (4, in_channels, 64, 64))
