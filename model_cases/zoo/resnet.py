"""ResNet-18/50 (He et al. 2015) with BatchNorm, written from the paper's structure.

Layout features: 7×7/2 stem + 3×3/2 max-pool, residual adds whose two inputs must agree on
layout, 1×1 projection shortcuts, and a global average pool + flatten + Linear classifier where
the 4-D → 2-D boundary forces the last layout decision.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo._common import finalize


def _shortcut(in_ch: int, out_ch: int, stride: int) -> nn.Module:
    """Identity, or a 1×1 conv-BN projection where the shape changes."""
    if stride == 1 and in_ch == out_ch:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride, bias=False), nn.BatchNorm2d(out_ch))


class BasicBlock(nn.Module):
    """Two 3×3 conv-BN layers plus identity (or 1×1 conv-BN projection) shortcut."""

    expansion = 1

    def __init__(self, in_ch: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        out_ch = planes * self.expansion
        self.conv1 = nn.Conv2d(in_ch, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, out_ch, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = _shortcut(in_ch, out_ch, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + self.shortcut(x))


class Bottleneck(nn.Module):
    """1×1 reduce → 3×3 (stride here, as in ResNet v1.5) → 1×1 expand ×4, plus shortcut."""

    expansion = 4

    def __init__(self, in_ch: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        out_ch = planes * self.expansion
        self.conv1 = nn.Conv2d(in_ch, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = _shortcut(in_ch, out_ch, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + self.shortcut(x))


class ResNet(nn.Module):
    """Stem, four stages (widths w, 2w, 4w, 8w; stride 2 from stage 2 on), pool, fc."""

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        layers: tuple[int, int, int, int],
        num_classes: int = 1000,
        width: int = 64,
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 7, 2, 3, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        stages: list[nn.Module] = []
        in_ch = width
        for i, depth in enumerate(layers):
            planes = width * 2**i
            blocks: list[nn.Module] = []
            for j in range(depth):
                stride = 2 if (i > 0 and j == 0) else 1
                blocks.append(block(in_ch, planes, stride))
                in_ch = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(num_classes: int = 1000, width: int = 64) -> nn.Module:
    """ResNet-18: BasicBlock × (2, 2, 2, 2); input N×3×H×W with H, W ≥ 32."""
    return finalize(ResNet(BasicBlock, (2, 2, 2, 2), num_classes, width), (4, 3, 64, 64))


def resnet50(num_classes: int = 1000, width: int = 64) -> nn.Module:
    """ResNet-50: Bottleneck × (3, 4, 6, 3); input N×3×H×W with H, W ≥ 32."""
    return finalize(ResNet(Bottleneck, (3, 4, 6, 3), num_classes, width), (4, 3, 64, 64))
