"""Which pipeline stage broke the numerics: the IR after each stage, built and run on the
same inputs, judged by the same rule as the final program.

A case process runs the stages (`cl_validate.session.first_break`) when a case's numerics fail, and
``cl-validate show --bisect`` on demand; this module is the plain data it produces and the
sentence a failure message carries: "first break after `fold_scale_shift` (max abs 0.031;
after `cleanup`: 2e-06)".
"""

from __future__ import annotations

from dataclasses import dataclass

from cl_validate.measurements.error_stats import ErrorStats


@dataclass(frozen=True)
class StageResult:
    """The program after one stage, run: its error per output, or why it could not run."""

    stage: str
    stats: tuple[ErrorStats, ...] = ()
    note: str = ""  # why it did not run ("not executable on llvm: …")
    seconds: float = 0.0

    @property
    def ran(self) -> bool:
        return bool(self.stats)

    @property
    def ok(self) -> bool:
        return self.ran and all(self.stats)

    def worst(self) -> ErrorStats:
        """The output that decides: the first failing one, else the largest error."""
        bad = [s for s in self.stats if not s]
        return bad[0] if bad else max(self.stats, key=lambda s: (s.ratio, s.max_abs)
                                      if s.tolerance.by_ratio else (s.max_abs, 0.0))


@dataclass(frozen=True)
class Bisection:
    """The stages of one case × target run in order, up to the first that breaks."""

    target: str  # where the stages ran
    sample: str  # which inputs ("" for a case's only sample)
    stages: tuple[StageResult, ...]
    stopped: str = ""  # why the scan ended early ("" when it reached a break or the end)
    #: when every stage held on the CPU: the target's kernels that compute wrong on its
    #: device, one line each, worst first (`cl_validate.session.kernel_check`)
    kernels: tuple[str, ...] = ()

    @property
    def first_break(self) -> str | None:
        """The first stage whose output leaves the tolerance, None when none did."""
        broken = self._break()
        return broken[0].stage if broken else None

    def _break(self) -> tuple[StageResult, StageResult | None] | None:
        last_good: StageResult | None = None
        for run in self.stages:
            if not run.ran:
                continue
            if not run.ok:
                return run, last_good
            last_good = run
        return None

    def summary(self) -> str:
        """One clause for a failure message."""
        broken = self._break()
        if broken is not None:
            run, good = broken
            figure = run.worst().figure()
            if good is None:
                return f"first break after `{run.stage}`, the first stage run ({figure})"
            return (f"first break after `{run.stage}` ({figure}; after `{good.stage}`: "
                    f"{good.worst().figure()})")
        if self.stopped:
            return f"no stage broke the numerics before the bisection stopped ({self.stopped})"
        ran = [r for r in self.stages if r.ran]
        if not ran:
            return f"no stage's IR could be run on {self.target} to find the break"
        where = (f"the break is in {self.kernels[0]}" + (
            f" (and {len(self.kernels) - 1} more kernels)" if len(self.kernels) > 1 else "")
            if self.kernels else "the break is in building the final program (fusion, "
            "scheduling or code generation)")
        return (f"every stage's IR is within tolerance when built unfused and run on "
                f"{self.target}: {where}")

    def render(self) -> str:
        """The table for a report body: every stage, its figure, where it broke."""
        at = f", inputs {self.sample}" if self.sample else ""
        lines = [f"stage bisection on {self.target}{at} (each stage's IR built and run on "
                 "the same inputs):"]
        width = max((len(r.stage) for r in self.stages), default=5)
        figures = [r.worst().figure() if r.ran else "" for r in self.stages]
        fig_width = max(map(len, figures), default=0)
        first = self.first_break
        for run, figure in zip(self.stages, figures, strict=True):
            if not run.ran:
                lines.append(f"  {run.stage:<{width}}  {run.note}")
                continue
            verdict = "ok" if run.ok else ("BREAKS" if run.stage == first else "off")
            took = f"({run.note})" if run.note else f"{run.seconds:.1f} s"
            lines.append(f"  {run.stage:<{width}}  {figure:<{fig_width}}  {verdict:<6}  {took}")
        if self.stopped:
            lines.append(f"  (stopped: {self.stopped})")
        lines += [f"  {k}" for k in self.kernels]
        return "\n".join(lines)
