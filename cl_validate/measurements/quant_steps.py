"""The quantization step of a quantized model's outputs, as plain data: what the numerics
check counts a quantized output's error in (`cl_validate.checks.numerics`).

A value that leaves a dequantize lies on its grid: ``(q - zero_point) · scale``. TVM and
PyTorch compute the same QDQ graph in float32, in another order; where a value before a
quantize sits within float32 rounding of a rounding boundary, the two round it to
neighbouring codes: one step of that quantize's scale. Counted in steps, a quantized
output's error reads as what it is ("1 step": one rounding flip) with no tolerance to tune.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OutputStep:
    """One output's quantization step, read off the exported QDQ graph."""

    scale: float  # the step, in the output's units
    #: True: the output is a dequantize's value (through ops that keep it on the grid: a
    #: reshape, a permute, ReLU, max pooling); False: float ops follow the last dequantize
    #: (an average pool, a float conv or add), whose step is `scale` propagated
    on_grid: bool
    #: the ops between the last dequantize and the output (``adaptive_avg_pool2d, flatten``)
    after: tuple[str, ...] = ()

    def describe(self) -> str:
        """``step 0.0235 (the output's quantize)`` or ``step 0.027 (the last quantize
        before it, through add, relu, adaptive_avg_pool2d, flatten)``."""
        if self.on_grid and not self.after:
            return f"step {self.scale:.3g} (the output's quantize)"
        through = f", through {', '.join(self.after)}" if self.after else ""
        where = "the output's quantize" if self.on_grid else "the last quantize before it"
        return f"step {self.scale:.3g} ({where}{through})"


def steps_text(n: float) -> str:
    """``0 steps``, ``1 step``, ``1.5 steps``."""
    shown = f"{n:.2g}"
    return f"{shown} step" + ("" if shown == "1" else "s")
