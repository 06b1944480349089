"""What compiling (and running) one case on one target produced — the input of every check.

A `Measurement` holds no verdict: verdicts are a function of a measurement and the case file
as it is *now* (`cl_validate.checks.judge`), so a cached measurement re-judged after a budget
or tolerance edit gives the right answer. Plain data: a case process sends it to the parent, the
cache stores it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cl_validate.errors import ErrorRecord
from cl_validate.measurements.bisection import Bisection
from cl_validate.measurements.kernel_list import KernelList, OpLayout, StageCount
from cl_validate.measurements.profile import Profile
from cl_validate.measurements.quant_steps import OutputStep


@dataclass(frozen=True)
class Skip:
    """Why a check was not run (numerics without a device, a static-only run)."""

    reason: str
    kind: str  # a `SkipKind`'s value, or the failure kind of an error that stopped it


@dataclass
class Sample:
    """One run of the compiled program and of PyTorch on the same inputs."""

    label: str  # which inputs: "" for a case's only sample, "batch=16" at a dynamic size
    actual: list[np.ndarray]  # TVM's outputs, in PyTorch's layout
    expected: list[np.ndarray]  # PyTorch's outputs
    reference64: list[np.ndarray] | None = None  # eager float64's, where a tolerance asks
    #: per output, for a selection output: (items reordered, other items allowed), its
    #: arrays already in the reference's order (matched in the case process, which the
    #: parent never does: the match grows with the square of the items); None: not matched
    selections: list[tuple[int, int] | None] | None = None
    #: per output, the dtype PyTorch computed it in (``float16`` for a half model); the
    #: float64 rule names it ("eager float16's error"); empty: float32
    eager_dtypes: list[str] = field(default_factory=list)


@dataclass
class Measurement:
    target: str
    error: ErrorRecord | None = None  # nothing was measured: the case errored
    kernels: KernelList | None = None
    stage_counts: list[StageCount] = field(default_factory=list)
    op_layouts: list[OpLayout] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)  # numerics: every sample it ran
    #: PyTorch's outputs on an input no sample uses: numerics that would accept them as the
    #: first sample's cannot tell a program that ignores its input (None: not measured)
    decoy: list[np.ndarray] | None = None
    numerics_skip: Skip | None = None
    numerics_error: ErrorRecord | None = None  # compiled, but running it failed
    #: the stages run one by one on the worst failing sample (only when numerics failed)
    bisection: Bisection | None = None
    compile_seconds: float = 0.0
    numerics_seconds: float = 0.0
    seconds: float = 0.0
    peak_rss_mb: float | None = None
    model_outputs: int | None = None  # how many outputs the PyTorch model returns
    #: BatchNorm modules with running statistics in the model (what calibrating recomputes;
    #: the hint of numerics that cannot fail depends on it)
    batchnorms: int | None = None
    #: the outputs' names (`CaseSpec.output_names`: ``logits``, ``1.k``; "" for a lone tensor)
    output_names: list[str] = field(default_factory=list)
    #: each output's quantization step, read off the exported QDQ graph (None: no quantize
    #: before it); what ``[tolerance] steps`` counts the error in
    output_steps: list[OutputStep | None] = field(default_factory=list)
    #: per output, (seed, eager float32's largest error against float64) on input draws
    #: beyond the case's, where a steps failure had eager float32 within them on its own
    #: draw (`session.draw_sensitivity`); the numerics check says when the graph is that
    #: sensitive
    eager_elsewhere: list[tuple[int, float]] = field(default_factory=list)
    #: processes the model's code started and left running (killed by the case process)
    stray_processes: list[str] = field(default_factory=list)
    #: why the program was not built (the static checks come from the IR alone)
    build_skipped: str | None = None
    #: ops kept in their import layout because TVM cannot lower them where the pipeline put
    #: them (one line each); the compile check says so
    kept_layouts: list[str] = field(default_factory=list)
    #: attention written out as matmuls that the pipeline could not raise, and why (one line
    #: each); the compile check says so
    attention_left: list[str] = field(default_factory=list)
    #: quantized convolutions and matmuls the integer_compute stage left in float, and why
    #: (one line each); the float_qdq_products check names them
    float_left: list[str] = field(default_factory=list)
    #: compile passes that stopped at a cap with work left (one line each, by stage): the
    #: program is right but may keep transforms the pass would remove; the compile and the
    #: layout_transforms checks say so
    capped: list[str] = field(default_factory=list)
    #: where the numerics ran when not on this machine ("RPC key 'rk3588' at host:9190")
    ran_on: str | None = None
    #: every kernel's time over repeated runs (``--profile``), or why there is none
    profile: Profile | None = None
    profile_skip: Skip | None = None
    profile_seconds: float = 0.0
