"""A small DenseNet-BC (Huang et al. 2017): dense blocks with concatenation, transitions.

Layout features: every dense layer concatenates *all* preceding feature maps along the channel
axis (many multi-input ``cat``s whose axis must be remapped under NHWC), pre-activation
BN → ReLU → conv ordering, and transition layers with 2×2 average pooling.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo._common import finalize


class DenseLayer(nn.Module):
    """BN-ReLU-Conv1×1(bn_size·k) → BN-ReLU-Conv3×3(k) on the concat of all earlier maps."""

    def __init__(self, in_ch: int, growth_rate: int, bn_size: int) -> None:
        super().__init__()
        mid = bn_size * growth_rate
        self.norm1 = nn.BatchNorm2d(in_ch)
        self.conv1 = nn.Conv2d(in_ch, mid, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, growth_rate, 3, padding=1, bias=False)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(features, dim=1)
        x = self.conv1(self.relu(self.norm1(x)))
        return self.conv2(self.relu(self.norm2(x)))


class DenseBlock(nn.Module):
    def __init__(self, num_layers: int, in_ch: int, growth_rate: int, bn_size: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            DenseLayer(in_ch + i * growth_rate, growth_rate, bn_size) for i in range(num_layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return torch.cat(features, dim=1)


class Transition(nn.Sequential):
    """BN → ReLU → 1×1 conv (compression) → 2×2/2 average pool."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__(
            nn.BatchNorm2d(in_ch),
            nn.ReLU(inplace=True),
            nn.Conv2d(in_ch, out_ch, 1, bias=False),
            nn.AvgPool2d(2, 2),
        )


class DenseNet(nn.Module):
    def __init__(self, growth_rate: int = 16, block_config: tuple[int, ...] = (4, 6, 8, 6),
                 num_init_features: int = 32, bn_size: int = 4, compression: float = 0.5,
                 num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(3, num_init_features, 7, 2, 3, bias=False),
            nn.BatchNorm2d(num_init_features),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        ]
        ch = num_init_features
        for i, n in enumerate(block_config):
            layers.append(DenseBlock(n, ch, growth_rate, bn_size))
            ch += n * growth_rate
            if i != len(block_config) - 1:
                out = int(ch * compression)
                layers.append(Transition(ch, out))
                ch = out
        layers += [nn.BatchNorm2d(ch), nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(ch, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def densenet_small(
    growth_rate: int = 16,
    block_config: tuple[int, ...] = (4, 6, 8, 6),
    num_init_features: int = 32,
    bn_size: int = 4,
    num_classes: int = 1000,
) -> nn.Module:
    """DenseNet-BC, ImageNet stem, four dense blocks by default (DenseNet-121 is k=32,
    (6, 12, 24, 16)). Input N×3×H×W with H, W ≥ 2^(len(block_config) + 1)."""
    return finalize(DenseNet(growth_rate, block_config, num_init_features, bn_size,
                             num_classes=num_classes), (4, 3, 64, 64))
