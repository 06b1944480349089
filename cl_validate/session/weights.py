"""``weights = "calibrated"`` and ``"signal-preserving"``: random weights that keep a deep
network's signal.

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

A network without BatchNorm (LayerNorm transformers, norm-free nets) has no statistics to
recompute: its signal shrinks at every projection initialised with a small fixed std (0.02,
as transformers are). ``"signal-preserving"`` draws every projection again with the variance
that keeps the signal (`preserve_signal`), then calibrates the BatchNorms there are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

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
    """Recompute every BatchNorm's running mean and variance from `batches` run through the
    model (no gradients); return how many BatchNorms changed.

    The draws run as one batch of all of them (each input concatenated on its first axis):
    a BatchNorm after a global pool then sees several values per channel, not the one a
    batch-1 input gives it (which training mode refuses). A model that cannot take the
    larger batch (a batch size written into its code) runs them one by one instead."""
    norms = batchnorms(model)
    if not norms:
        return 0
    saved = [(bn, bn.momentum, bn.training) for bn in norms]
    try:
        try:
            _run_statistics(model, norms, [[torch.cat(ts) for ts in zip(*batches, strict=True)]])
        except Exception:  # the model's code refuses the larger batch: one draw at a time
            _run_statistics(model, norms, batches)
    except ValueError as exc:  # "Expected more than 1 value per channel when training"
        raise UsageError(f"weights = \"calibrated\" cannot run this model's BatchNorms in "
                         f"training mode: {exc}",
                         hint="a BatchNorm sees one value per channel and the model takes "
                         "one input at a time: give the input a batch of 2 or more, or keep "
                         "weights \"as-built\"") from None
    finally:
        for bn, momentum, training in saved:
            bn.momentum = momentum
            bn.train(training)
    return len(norms)


def _run_statistics(model: torch.nn.Module, norms: list[torch.nn.modules.batchnorm._BatchNorm],
                    batches: Sequence[Sequence[torch.Tensor]]) -> None:
    """The running statistics, from scratch, as the plain average over `batches`."""
    for bn in norms:
        bn.reset_running_stats()
        bn.momentum = None  # a cumulative average over the batches
        bn.train()
    with torch.no_grad():
        for batch in batches:
            model(*batch)


def preserve_signal(model: torch.nn.Module, batches: Sequence[Sequence[torch.Tensor]]) -> int:
    """``weights = "signal-preserving"``: every layer with a weight matrix or kernel (a
    module's ``weight`` of two or more axes; embeddings excepted) scaled, with its bias, so
    that the part of its output that changes with the input has an RMS of one over `batches`
    (the draws, run as one batch). Return how many layers were scaled.

    One forward pass does it: each layer's output is measured and rescaled as it is made, so
    every later layer is measured on the rescaled signal (layer-sequential unit variance, in
    one pass). Where a network's projections shrink the signal (a transformer initialised
    with std 0.02) or its constants (biases, position embeddings, class tokens) outweigh it,
    the output then depends on the input as a trained network's does; only values change,
    never shapes, dtypes or the graph."""
    draws = len(batches)
    joined = [torch.cat(ts) for ts in zip(*batches, strict=True)]
    scales: dict[torch.nn.Module, float] = {}

    def rescale(module: torch.nn.Module, _args: Any, out: Any) -> Any:
        first = out[0] if isinstance(out, tuple) and out else out  # MultiheadAttention
        if not isinstance(first, torch.Tensor) or not first.is_floating_point():
            return None
        scale = scales.get(module)
        if scale is None:
            scale = _unit_spread(first.detach(), draws)
            scales[module] = scale
        if isinstance(out, tuple):
            return (out[0] * scale, *out[1:])
        return out * scale

    handles = [m.register_forward_hook(rescale) for m in _weighted_layers(model)]
    try:
        with torch.no_grad():
            model(*joined)
    except Exception as exc:
        raise UsageError(f"weights = \"signal-preserving\" runs {draws} draws as one batch, "
                         f"and the model refused it: {type(exc).__name__}: {exc}",
                         hint="a model that takes one input at a time can keep weights "
                         "\"as-built\" or \"calibrated\"") from None
    finally:
        for h in handles:
            h.remove()
    with torch.no_grad():
        for module, scale in scales.items():
            owner = module.out_proj if isinstance(module, torch.nn.MultiheadAttention) \
                else module
            for name, p in owner.named_parameters(recurse=False):
                if name in ("weight", "bias"):
                    p.mul_(scale)
    return sum(1 for s in scales.values() if s != 1.0)


def _weighted_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    out: list[torch.nn.Module] = []
    for module in model.modules():
        if isinstance(module, torch.nn.Embedding):
            continue
        if isinstance(module, torch.nn.MultiheadAttention):
            out.append(module)  # it calls its out_proj's weight directly, not the Linear
            continue
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.nn.Parameter) and weight.dim() >= 2 and \
                weight.is_floating_point():
            out.append(module)
    return out


def _unit_spread(out: torch.Tensor, draws: int) -> float:
    """The factor that gives `out`'s change across the draws (on its first axis) an RMS of
    one; where the first axis is not the draws', its change across the positions. 1 when
    it does not change at all (a constant is not scaled up)."""
    x = out.double()
    if draws > 1 and x.dim() > 0 and x.shape[0] % draws == 0:
        spread = x.reshape(draws, -1).std(dim=0).pow(2).mean().sqrt()
    else:
        spread = x.std() if x.numel() > 1 else torch.zeros(())
    value = float(spread)
    if not math.isfinite(value) or value < 1e-12:
        return 1.0
    return 1.0 / value
