"""How sensitive a quantized graph is in float32 on input draws beyond the case's own.

A quantized graph can be off float64 by many quantization steps in eager float32 itself: a
value that lands on a quantize's rounding boundary takes the neighbouring code when float32
rounds it differently, and the layers after amplify that one code. On the case's own draw
eager float32 may be on float64's side of every such tie while the compiled program (whose
float32 sums run in another order) is not, and the steps rule then fails with a stage named,
as if the compiler were wrong. Where a steps failure is not explained by eager float32's
error on its own draw, eager float32 and float64 run on a few more draws: the largest error
per output, with the draw's seed, goes into the measurement, and the numerics check says
when the graph is that sensitive (`checks.numerics`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch

from cl_validate.checks.numerics import sample_stats, worst_failure
from cl_validate.measurements.measurement import Measurement
from cl_validate.session.inputs import make_inputs
from cl_validate.spec import CaseSpec

#: Input draws beyond the case's own (and the decoy's) that eager float32 runs on
DRAWS = 4

Run = Callable[[Sequence[np.ndarray]], list[np.ndarray]]


@contextmanager
def one_thread() -> Iterator[None]:
    """PyTorch on one thread, every op inline. A target's process is forked from the case
    process after PyTorch's OpenMP threads started there: a parallel op in it would wait
    forever on threads the fork did not copy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def eager_elsewhere(case: CaseSpec, m: Measurement, reference: Run, reference64: Run,
                    draws: int = DRAWS) -> list[tuple[int, float]]:
    """Per output, (seed, eager float32's largest absolute error against float64) over
    `draws` more input draws, where `m`'s numerics fail by steps on a draw where eager
    float32 was within them; [] otherwise (nothing to explain, or no steps failure)."""
    failed = [f for s in m.samples if len(s.actual) == len(s.expected)
              if (f := worst_failure(sample_stats(case, m.target, s, m.output_steps,
                                                  match=False))) is not None]
    if not failed or not all(f.tolerance.by_steps and not f.sensitive for f in failed):
        return []
    sizes = case.samples()[0].sizes
    first = case.seed + case.seeds + 1  # after the case's draws and the decoy's
    worst: list[tuple[int, float]] = []
    with one_thread():
        for seed in range(first, first + draws):
            arrays = make_inputs(case, sizes, seed)
            for i, (f32, f64) in enumerate(zip(reference(arrays), reference64(arrays),
                                               strict=True)):
                err = float(np.max(np.abs(f32.astype(np.float64) - f64))) if f32.size \
                    else 0.0
                if i == len(worst):
                    worst.append((seed, err))
                elif err > worst[i][1]:
                    worst[i] = (seed, err)
    return worst
