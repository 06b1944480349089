"""ConvNeXt-T-like model (Liu et al. 2022) with the model's own NCHW ↔ NHWC permutes.

Layout features: each block runs a 7×7 depthwise conv in NCHW, then *itself* permutes to NHWC
for LayerNorm → Linear(4×) → GELU → Linear → layer scale, and permutes back before the
residual add. Stem and downsampling LayerNorms normalise over channels the same way (permute,
``layer_norm`` over the last axis, permute back). Under an NHWC conversion these permutes should
cancel against the inserted layout transforms; if they don't, they show up in the budget.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo._common import finalize


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channel axis of an NCHW tensor, via permute → NHWC → permute back."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    """dw 7×7 → permute NHWC → LN → Linear 4× → GELU → Linear → ·γ → permute NCHW → + x."""

    def __init__(self, dim: int, layer_scale_init: float) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), layer_scale_init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x)
        y = y.permute(0, 2, 3, 1)  # N, C, H, W → N, H, W, C
        y = self.pwconv2(self.act(self.pwconv1(self.norm(y))))
        y = self.gamma * y
        y = y.permute(0, 3, 1, 2)  # back to N, C, H, W
        return x + y  # drop path is the identity in eval mode


class ConvNeXt(nn.Module):
    def __init__(
        self,
        num_classes: int = 1000,
        depths: tuple[int, ...] = (3, 3, 9, 3),
        dims: tuple[int, ...] = (96, 192, 384, 768),
        layer_scale_init: float = 1.0,
    ) -> None:
        super().__init__()
        if len(depths) != len(dims):
            raise ValueError("depths and dims must have the same length")
        self.downsample = nn.ModuleList()
        self.downsample.append(
            nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6))
        )
        for i in range(1, len(dims)):
            self.downsample.append(
                nn.Sequential(LayerNorm2d(dims[i - 1], eps=1e-6),
                              nn.Conv2d(dims[i - 1], dims[i], 2, 2))
            )
        self.stages = nn.ModuleList(
            nn.Sequential(*(ConvNeXtBlock(d, layer_scale_init) for _ in range(n)))
            for n, d in zip(depths, dims, strict=True)
        )
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for down, stage in zip(self.downsample, self.stages, strict=True):
            x = stage(down(x))
        return self.head(self.norm(x.mean((-2, -1))))


def convnext_stage(
    num_classes: int = 1000,
    depths: tuple[int, ...] = (3, 3, 9, 3),
    dims: tuple[int, ...] = (96, 192, 384, 768),
    layer_scale_init: float = 1.0,
) -> nn.Module:
    """ConvNeXt-T shape by default; input N×3×H×W with H, W multiples of 32.

    `layer_scale_init` defaults to 1.0, not the paper's 1e-6 training init: at 1e-6 every block
    branch is ~1e-6 of the residual, so a numerics check could not see a broken block.
    """
    return finalize(ConvNeXt(num_classes, depths, dims, layer_scale_init))


def convnext_t_short() -> nn.Module:
    """ConvNeXt-T widths with one block per stage (plus a third in stage 3): every layout
    feature of the full model — patchify stem, the blocks' own NCHW↔NHWC permutes around
    LayerNorm + Linear, downsampling LayerNorms — at a fraction of the compile time."""
    return convnext_stage(depths=(1, 1, 3, 1))
