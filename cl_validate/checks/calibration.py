"""Calibrating a tolerance: measure TVM's error over several samples, propose rtol/atol.

The rule (documented in docs/how-to/tighten-budgets.md):

1. ``rtol_obs`` = the largest relative error over the elements whose reference magnitude is at
   least the output's RMS (relative error is meaningless near zero);
2. ``atol_obs`` = the largest error those ``rtol_obs * |ref|`` do not cover;
3. proposed = ``headroom`` (4×) times each, rounded *up* to 1, 2 or 5 × 10^k, and never below
   1e-6 (a zero tolerance breaks on the first compiler change that reorders a sum).

``cl-validate calibrate`` (`cl_validate.cli.calibrate`) compiles and runs the samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cl_validate.errors import UsageError

HEADROOM = 4.0
FLOOR = 1e-6


def nice_ceil(x: float) -> float:
    """The smallest 1, 2 or 5 × 10^k that is >= x (0 for x <= 0)."""
    if x <= 0 or not math.isfinite(x):
        return 0.0 if x <= 0 else x
    k = math.floor(math.log10(x))
    for m in (1, 2, 5, 10):
        v = float(f"{m}e{k}")
        if v >= x * (1 - 1e-12):
            return v
    return float(f"1e{k + 1}")  # pragma: no cover - 10e{k} always qualifies


@dataclass(frozen=True)
class ObservedSample:
    weight_seed: int
    input_seed: int
    output: int
    max_abs: float
    mean_abs: float
    max_rel: float
    mean_rel: float
    nonfinite: int


@dataclass
class Observed:
    samples: list[ObservedSample]
    rtol: float
    atol: float

    @property
    def nonfinite(self) -> int:
        return sum(s.nonfinite for s in self.samples)


def observe(pairs: list[tuple[int, int, int, np.ndarray, np.ndarray]]) -> Observed:
    """Statistics of (weight seed, input seed, output, TVM, PyTorch) pairs and the
    rtol/atol split of the worst error (rule in the module docstring)."""
    samples: list[ObservedSample] = []
    kept: list[tuple[np.ndarray, np.ndarray]] = []
    rtol = 0.0
    for w, s, o, actual, expected in pairs:
        a, e = actual.astype(np.float64).ravel(), expected.astype(np.float64).ravel()
        if a.shape != e.shape:
            raise UsageError(f"output {o}: TVM gives {actual.shape}, PyTorch {expected.shape}",
                             hint="cl-validate run reports the mismatch")
        finite = np.isfinite(a) & np.isfinite(e)
        diff, mag = np.abs(a - e)[finite], np.abs(e)[finite]
        rel = np.where(diff == 0, 0.0, diff / np.maximum(mag, np.finfo(np.float64).tiny))
        samples.append(ObservedSample(w, s, o, float(diff.max(initial=0.0)), float(diff.mean())
                              if diff.size else 0.0, float(rel.max(initial=0.0)),
                              float(rel.mean()) if rel.size else 0.0,
                              int((~finite).sum())))
        if diff.size:
            rms = float(np.sqrt(np.mean(mag * mag)))
            large = mag >= rms
            if rms > 0 and large.any():
                rtol = max(rtol, float(rel[large].max()))
            kept.append((diff, mag))
    atol = max((float(np.max(d - rtol * m, initial=0.0)) for d, m in kept), default=0.0)
    return Observed(samples, rtol, max(atol, 0.0))


def propose(obs: Observed, headroom: float) -> tuple[float, float]:
    return (max(nice_ceil(headroom * obs.rtol), FLOOR),
            max(nice_ceil(headroom * obs.atol), FLOOR))
