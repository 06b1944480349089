"""A small fully convolutional segmentation net (FCN, Long et al. 2015, in spirit).

Layout features: a purely 4-D graph end to end — strided conv-BN-ReLU stages, a dilated 3×3
context conv, a 1×1 conv classifier producing K class maps, and a bilinear resize
(``F.interpolate``, ``align_corners=False``) back to the input size. No Linear, no flatten: in
NHWC the whole body can stay channels-last, so only the model's NCHW input and output boundary
should need transforms.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo._common import ConvNormAct, finalize


class FCNSmall(nn.Module):
    """Encoder at output stride 8 (three stride-2 stages), dilated context, 1×1 head, upsample."""

    def __init__(self, num_classes: int = 21, width: int = 32) -> None:
        super().__init__()
        w = width
        self.backbone = nn.Sequential(
            ConvNormAct(3, w, 3, 2),
            ConvNormAct(w, w, 3, 1),
            ConvNormAct(w, 2 * w, 3, 2),
            ConvNormAct(2 * w, 2 * w, 3, 1),
            ConvNormAct(2 * w, 4 * w, 3, 2),
            ConvNormAct(4 * w, 4 * w, 3, 1),
        )
        self.context = nn.Sequential(
            nn.Conv2d(4 * w, 4 * w, 3, padding=2, dilation=2, bias=False),
            nn.BatchNorm2d(4 * w),
            nn.ReLU(inplace=True),
            nn.Dropout(0.1),
        )
        self.classifier = nn.Conv2d(4 * w, num_classes, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-2:]
        y = self.classifier(self.context(self.backbone(x)))
        return F.interpolate(y, size=size, mode="bilinear", align_corners=False)


def fcn_small(num_classes: int = 21, width: int = 32) -> nn.Module:
    """`FCNSmall`: N×3×H×W → N×num_classes×H×W (H, W multiples of 8)."""
    return finalize(FCNSmall(num_classes, width), (4, 3, 64, 64))
