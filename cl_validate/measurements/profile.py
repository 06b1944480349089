"""What ``--profile`` measured, as plain data: every kernel's time in every run of the program.

A case process runs the compiled program a few times with a timer around every call the Relax VM
makes (`cl_validate.session.kernel_timer`) and sends this to the parent, which reports it and judges
the ``transform_time_share`` budget without loading TVM. Nothing here is estimated: each
figure is a median of the measured runs, with the fastest and slowest run beside it, because
a single timing on a shared runner is noise.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from cl_validate.measurements.kernel_list import Kernel, KernelList
from cl_validate.measurements.units import share_text, sizes_text, time_text


@dataclass(frozen=True)
class Spread:
    """A measured figure over the runs: the median, and the fastest and slowest run's."""

    median: float
    low: float
    high: float

    @staticmethod
    def of(values: list[float]) -> Spread | None:
        return Spread(statistics.median(values), min(values), max(values)) if values else None

    def text(self, fmt: str = "time") -> str:
        """``48.7 µs (45.1–52.0)`` or, for a share, ``0.9% (0.8–1.1%)``."""
        if fmt == "share":
            return (f"{share_text(self.median)} ({share_text(self.low)}–"
                    f"{share_text(self.high)})")
        return f"{time_text(self.median)} ({time_text(self.low)}–{time_text(self.high)})"


@dataclass(frozen=True)
class Profile:
    """Each kernel's time in each run, by its index in the kernel list."""

    device: str  # where it ran: "cpu(0)"
    repeats: int
    #: kernel index → nanoseconds in each run (empty: the kernel was not seen running)
    kernel_ns: tuple[tuple[int, ...], ...]
    #: the sizes a symbolic program ran at (each [dynamic] maximum, as its bytes)
    at: dict[str, int] = field(default_factory=dict)

    def kernel(self, index: int) -> Spread | None:
        return Spread.of([float(t) for t in self.kernel_ns[index]]) \
            if index < len(self.kernel_ns) else None

    def _runs(self, indices: set[int] | None = None) -> list[float]:
        """Per run, the time of the kernels in `indices` (all of them by default)."""
        return [float(sum(ts[r] for i, ts in enumerate(self.kernel_ns)
                          if len(ts) > r and (indices is None or i in indices)))
                for r in range(self.repeats)]

    def total(self) -> Spread | None:
        """Time in kernels per run (the VM's own bookkeeping between them left out)."""
        return Spread.of(self._runs())

    def transform_kernels(self, kernels: KernelList) -> set[int]:
        """Kernels that run a runtime transform: a kernel that fuses one with other work
        counts whole (its time cannot be split), so the share is an upper bound there."""
        return {k.index for k in kernels if any(not t.weight for t in k.transforms)}

    def transform_share(self, kernels: KernelList) -> Spread | None:
        """The share of kernel time spent in transform kernels, per run (each run's ratio,
        so a machine that slows down as a whole moves it little)."""
        totals = self._runs()
        parts = self._runs(self.transform_kernels(kernels))
        return Spread.of([p / t for p, t in zip(parts, totals, strict=True) if t > 0])

    def times(self) -> dict[int, str]:
        """Kernel index → its median time, for `KernelList.render`."""
        out = {}
        for i in range(len(self.kernel_ns)):
            s = self.kernel(i)
            if s is not None:
                out[i] = time_text(s.median)
        return out

    def describe(self) -> str:
        """One line: where, how often, at which sizes."""
        at = f" at {sizes_text(self.at)}" if self.at else ""
        return f"median of {self.repeats} runs on {self.device}{at} (fastest–slowest run)"

    def report(self, kernels: KernelList) -> str:
        """Each runtime transform's time and share of kernel time, then the totals."""
        total = self.total()
        lines = [f"kernel times: {self.describe()}"]
        for k in kernels:
            for t in k.transforms:
                if t.weight:
                    continue
                lines.append(f"  {_transform_time(self, k, total)}  {t.describe()}")
        share = self.transform_share(kernels)
        lines.append(f"  all kernels {total.text() if total else '?'}; runtime transforms "
                     f"{share.text('share') if share else '?'} of kernel time")
        return "\n".join(lines)


def _transform_time(profile: Profile, k: Kernel, total: Spread | None) -> str:
    spread = profile.kernel(k.index)
    if spread is None:
        return f"kernel {k.index} {k.name}: not timed"
    share = f" = {share_text(spread.median / total.median)} of kernel time" if total and \
        total.median else ""
    fused = " (fused kernel: its whole time)" if len(k.ops) > 1 else ""
    return f"kernel {k.index} {k.name}: {spread.text()}{share}{fused}"
