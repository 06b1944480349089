"""Building blocks and weight set-up shared by the zoo families."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

_NORMS = (nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm)


def make_divisible(value: float, divisor: int = 8, min_value: int | None = None) -> int:
    """Round a channel count to a multiple of `divisor`, never dropping more than 10 %."""
    floor = divisor if min_value is None else min_value
    rounded = max(floor, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


class ConvNormAct(nn.Sequential):
    """Conv2d (no bias) → BatchNorm2d → optional activation, 'same' padding for odd kernels."""

    def __init__(
        self,
        in_ch: int,
        out_ch: int,
        kernel_size: int = 3,
        stride: int = 1,
        groups: int = 1,
        act: Callable[[], nn.Module] | None = nn.ReLU,
    ) -> None:
        layers: list[nn.Module] = [
            nn.Conv2d(in_ch, out_ch, kernel_size, stride, (kernel_size - 1) // 2,
                      groups=groups, bias=False),
            nn.BatchNorm2d(out_ch),
        ]
        if act is not None:
            layers.append(act())
        super().__init__(*layers)


def randomize_norm_affine(model: nn.Module) -> None:
    """Give every BatchNorm/GroupNorm/LayerNorm distinct per-channel scale and shift.

    With the default (weight 1, bias 0) a norm's affine step is the same on every channel, so
    applying it along the wrong axis would go unnoticed by a numerics check.
    """
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, _NORMS) and getattr(m, "weight", None) is not None:
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.2)


def calibrate_batchnorm(model: nn.Module, input_shape: tuple[int, ...]) -> None:
    """Set BatchNorm running statistics from one random batch (like a model trained on data).

    Fresh BatchNorm layers have mean 0 / var 1, i.e. they are channel-uniform no-ops in eval
    mode: deep plain stacks then shrink activations towards zero and a channel mix-up is
    invisible. One train-mode forward with cumulative averaging gives per-channel statistics
    that normalise each layer's real output.
    """
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    if not bns:
        return
    saved = [m.momentum for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average: after one batch, exactly the batch statistics
    model.train()
    with torch.no_grad():
        model(torch.randn(*input_shape))
    for m, momentum in zip(bns, saved, strict=True):
        m.momentum = momentum
    model.eval()


def finalize(model: nn.Module, calib_shape: tuple[int, ...] | None = None) -> nn.Module:
    """Randomise norm affines, calibrate BatchNorm on `calib_shape` if given, return in eval."""
    randomize_norm_affine(model)
    if calib_shape is not None:
        calibrate_batchnorm(model, calib_shape)
    return model.eval()
