"""``weights = "calibrated"``: random weights that keep a deep network's signal.

A freshly built network has BatchNorm statistics of a network that was never trained: running
mean 0 and variance 1, whatever its convolutions really produce. Through depth the
activations then grow or shrink layer by layer, and in a deep detector or segmentation net
the output can end up independent of the input (output RMS 31, change under another input
RMS 4e-7): a numerics comparison of such a model compares constants.

Calibrating recomputes every BatchNorm's running statistics from what its input really is on
random inputs drawn like the case's (on seeds the numerics never use), as a short training run
would, and changes nothing else: every BatchNorm then normalises its input, and the signal
reaches the output. Only BatchNorm modules are put in training mode, one at a time by
``module.train()``, so models that refuse ``model.train()`` (exported or PT2E-converted
programs have no BatchNorm modules) are left alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from cl_validate.errors import UsageError

#: calibration batches; their seeds are far from the case seeds numerics uses
CALIBRATION_BATCHES = 4
CALIBRATION_SEED_OFFSET = 100_000


def batchnorms(model: torch.nn.Module) -> list[torch.nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
            and m.track_running_stats]


def calibrate_batchnorm(model: torch.nn.Module,
                        batches: Sequence[Sequence[torch.Tensor]]) -> int:
    """Recompute every BatchNorm's running mean and variance as the plain average over
    `batches` (run through the model, no gradients); return how many BatchNorms changed."""
    norms = batchnorms(model)
    if not norms:
        return 0
    saved = [(bn, bn.momentum, bn.training) for bn in norms]
    for bn in norms:
        bn.reset_running_stats()
        bn.momentum = None  # a cumulative average over the batches
        bn.train()
    try:
        with torch.no_grad():
            for batch in batches:
                model(*batch)
    except ValueError as exc:  # "Expected more than 1 value per channel when training"
        raise UsageError(f"weights = \"calibrated\" cannot run this model's BatchNorms in "
                         f"training mode: {exc}",
                         hint="a BatchNorm sees one value per channel (batch 1 after a global "
                         "pool): give the input a batch of 2 or more, or keep weights "
                         "\"as-built\"") from None
    finally:
        for bn, momentum, training in saved:
            bn.momentum = momentum
            bn.train(training)
    return len(norms)
