"""One case through the compiler: the model built once, exported once, each target compiled
once, and run where it can run — everything that runs the user's code happens here, in a
case process (or in this process for ``--no-isolation``, ``show``, ``calibrate`` and the
tests).

A `CaseSession` computes each thing once and keeps it: the model (its factory imported and
called, ``[layout_overrides]`` and the recorded baselines checked: a mistake is a
`CaseFileError`), the seeded inputs and PyTorch's outputs, the export, and per target a
`TargetPlan` (the TVM target, where the numerics run) and the `Compiled` program. The case
processes (`start`, `prepare`, then `measure` per target), ``show``, ``calibrate``, the stage
bisection and the pytest plugin all drive a session; none chains build → export → compile →
run on its own.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from cl_validate.analysis.fused_kernels import read_kernel_list
from cl_validate.analysis.op_layouts import op_layouts
from cl_validate.analysis.stage_counts import stage_counts
from cl_validate.checks.compile import CaseKind
from cl_validate.checks.kernel_list import load_baseline
from cl_validate.checks.numerics import (
    NumericsKind,
    match_decoy,
    match_selections,
    wants_bisection,
)
from cl_validate.compile.factory import build_model, check_layout_overrides, weights_digest
from cl_validate.compile.frontend import Frontend, export_and_import
from cl_validate.compile.model_outputs import OutputTypeError
from cl_validate.compile.pipeline import resolve_pipeline
from cl_validate.compile.program import Compiled, compile_case, op_level_stage
from cl_validate.compile.tvm_targets import (
    build_unavailable,
    device_available,
    make_target,
)
from cl_validate.errors import (
    CaseFileError,
    CompileStageError,
    ErrorRecord,
    UsageError,
    first_line,
)
from cl_validate.ir import weight_params
from cl_validate.measurements.bisection import Bisection
from cl_validate.measurements.cache import Cache, key
from cl_validate.measurements.kinds import SkipKind
from cl_validate.measurements.measurement import Measurement, Sample, Skip
from cl_validate.measurements.selection import TooManyItems
from cl_validate.paths import display_path
from cl_validate.session.device_host import DeviceHostError, close_hosts
from cl_validate.session.draw_sensitivity import eager_elsewhere
from cl_validate.session.execute import float64_model, run_program, run_torch64, run_torch_named
from cl_validate.session.first_break import bisect, bisect_failure
from cl_validate.session.inputs import make_inputs, torch_inputs
from cl_validate.session.kernel_timer import profile_case, wants_profile
from cl_validate.session.model_errors import model_error, refused_call_error
from cl_validate.session.remote import RpcError, run_remote
from cl_validate.session.weights import (
    CALIBRATION_BATCHES,
    CALIBRATION_SEED_OFFSET,
    batchnorms,
    calibrate_batchnorm,
    preserve_signal,
)
from cl_validate.spec import CaseSpec
from cl_validate.spec.options import RunOptions, selected_targets
from cl_validate.spec.placement import Placement, placement
from cl_validate.spec.targets import TargetDef

#: What a measurement is handed to: (measurement, its cache key or None, came from the cache)
Emit = Callable[[Measurement, "str | None", bool], None]
#: The share of a case's timeout after which a bisection stops (the rest finishes the case).
_BISECT_SHARE = 0.75


@dataclass(frozen=True)
class TargetPlan:
    """One target of a case in this run, decided once: its declaration, its TVM target,
    where its numerics run, and whether this machine can build for it."""

    name: str
    tdef: TargetDef
    tvm_target: Any
    place: Placement
    unbuildable: str | None  # why this machine cannot build the program (None: it can)
    numerics: bool  # whether numerics run on it in this run

    def describe(self) -> str:
        """The compile target and where it runs, in words: part of the cache key (a cuda
        measurement without a GPU has no numerics; one from a board under RPC key
        'rk3588' is not one from this machine)."""
        desc = f"{self.tvm_target} on {self.place.describe()}"
        return desc + (f" (not built: {self.unbuildable})" if self.unbuildable else "")


def _one_line(exc: BaseException) -> str:
    return first_line(exc)


class CaseSession:
    """One case (one of its variants: `CaseSpec.expand`) on its way through the compiler."""

    def __init__(self, case: CaseSpec, options: RunOptions | None = None) -> None:
        self.case = case
        self.options = options if options is not None else RunOptions()
        #: the targets of this case in this run, in the case's order
        self.targets: list[str] = selected_targets(case, self.options)
        self._plans: dict[str, TargetPlan] = {}
        self._compiled: dict[tuple[str, bool], Compiled] = {}
        self._references64: list[list[np.ndarray]] | None = None
        self._reference64_error: ErrorRecord | None = None
        self._prepared_seconds = 0.0
        #: whether the forward returns a tensor or a flat tuple of them (None: not run yet)
        self._flat_outputs: bool | None = None
        self._eager_dtypes: list[str] = []  # PyTorch's output dtypes (named by numerics)
        self.started = time.perf_counter()

    # -- the model and its reference --------------------------------------------------------
    @functools.cached_property
    def model(self) -> torch.nn.Module:
        """The case's model: its factory's module imported, the factory called under the case
        seed; the pipeline, ``[layout_overrides]`` and recorded baselines checked against it
        (every mistake in a case file raises `CaseFileError` here)."""
        resolve_pipeline(self.case)
        model = build_model(self.case)
        if self.case.weights in ("calibrated", "signal-preserving"):
            self._calibrate(model)
        check_layout_overrides(self.case, model)
        for target in self.targets:
            load_baseline(self.case, target)  # a hand-edited baseline that does not parse
        return model

    def _calibrate(self, model: torch.nn.Module) -> None:
        """``weights = "calibrated"``: BatchNorm statistics from random inputs drawn like the
        case's, on seeds numerics never uses (`cl_validate.session.weights`); with
        ``"signal-preserving"`` every weighted layer is scaled on them first."""
        case = self.case
        batches = [torch_inputs(case, make_inputs(case, seed=case.seed + CALIBRATION_SEED_OFFSET
                                                  + k)) for k in range(CALIBRATION_BATCHES)]
        try:
            if case.weights == "signal-preserving":
                preserve_signal(model, batches)
            calibrate_batchnorm(model, batches)
        except UsageError as exc:
            raise CaseFileError(exc.message, file=display_path(case.path),
                                line=case.line_of("weights"), hint=exc.hint) from None

    @functools.cached_property
    def decoy(self) -> list[np.ndarray]:
        """PyTorch's outputs on another input than every sample's (the first sample's sizes,
        the seed after the last one numerics uses): what a program that ignored its input
        could return. Numerics that would pass it cannot fail (`checks.numerics`)."""
        first = self.case.samples()[0]
        other = make_inputs(self.case, first.sizes, self.case.seed + self.case.seeds)
        return self.reference(other)

    @functools.cached_property
    def samples(self) -> list[tuple[str, list[np.ndarray]]]:
        """The inputs numerics runs on: one sample per input seed at each set of dynamic
        sizes (one for a static case with one seed), with its label."""
        return [(s.label, make_inputs(self.case, s.sizes, s.seed)) for s in self.case.samples()]

    @functools.cached_property
    def expected(self) -> list[list[np.ndarray]]:
        """PyTorch's outputs on every sample."""
        return [self.reference(arrays) for _, arrays in self.samples]

    def reference(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """PyTorch's eager float32 outputs on `arrays`; the first call names the outputs
        (`CaseSpec.output_names`: the [[outputs]] entries bind to them by name)."""
        try:
            out = run_torch_named(self.model, torch_inputs(self.case, arrays))
        except OutputTypeError as exc:
            raise CaseFileError(str(exc), file=display_path(self.case.path),
                                line=self.case.line_of("model"),
                                hint="return the tensors to compare (a forward wrapper in "
                                "the factory can drop the rest)") from None
        if self._flat_outputs is None:
            self.case = replace(self.case, output_names=tuple(out.names))
            self._flat_outputs = out.flat
            self._eager_dtypes = out.dtypes
        return out.arrays

    @functools.cached_property
    def model64(self) -> torch.nn.Module:
        """A float64 copy of the model (made once, for every sample)."""
        return float64_model(self.model)

    def reference64(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Eager float64's outputs on `arrays` (integer inputs stay integers)."""
        return run_torch64(self.model64, torch_inputs(self.case, arrays))

    @functools.cached_property
    def front(self) -> Frontend:
        """The exported and imported program every target compiles from (traced at the
        example sizes of a dynamic case)."""
        case = self.case
        example = self.samples[0][1] if not case.dynamic else make_inputs(case)
        self.expected  # noqa: B018 - the outputs' names and structure, known from here
        return export_and_import(self.model, self.case, torch_inputs(case, example),
                                 flatten_outputs=not self._flat_outputs)

    # -- per target -------------------------------------------------------------------------
    def plan(self, target: str) -> TargetPlan:
        """`target` in this run (its TVM target is made here: one TVM refuses raises
        `CaseFileError` at its declaration)."""
        if target not in self._plans:
            tdef = self.case.target_def(target)
            tvm_target = make_target(tdef)
            place = placement(tdef, self.options.rpc, device_available)
            unbuildable = build_unavailable(tvm_target)
            numerics = not self.options.static_only and place.runs and unbuildable is None
            self._plans[target] = TargetPlan(target, tdef, tvm_target, place, unbuildable,
                                             numerics)
        return self._plans[target]

    def compiled(self, target: str, *, build: bool = True) -> Compiled:
        """The case's pipeline run for `target` (the IR after every stage) and, with
        `build`, the executable where this machine can build it."""
        build = build and not self.options.static_only
        if (target, build) not in self._compiled:
            self._compiled[(target, build)] = compile_case(
                self.front, self.case, target, build=build,
                tvm_target=self.plan(target).tvm_target)
        return self._compiled[(target, build)]

    def unbound_params(self, compiled: Compiled) -> list[Any]:
        """The weights a pipeline left as parameters of ``main``, in its order."""
        return [self.front.params[p.name] for p in weight_params(compiled.final["main"])]

    def run_program(self, target: str, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The compiled program of `target` on this machine's device, on `arrays`; outputs
        in PyTorch's layout."""
        compiled = self.compiled(target)
        return run_program(compiled.executable, self.case, arrays, self.plan(target).tdef.device,
                           self.unbound_params(compiled))

    # -- measuring --------------------------------------------------------------------------
    def measure_or_reuse(self, emit: Emit) -> None:
        """Validate the case's model, then hand every selected target's measurement to
        `emit`: from the cache (``options.cache_dir``) when every target is there, else
        measured, one target after the other. A case whose model cannot be used gets a
        `CaseFileError` measurement per target, with the case-file line and hint."""
        keys = self.start(emit)
        if keys is None:
            return
        error = self.prepare()
        for t in self.targets:
            emit(self.failed(t, error) if error is not None else self.measure(t),
                 keys.get(t), False)

    def start(self, emit: Emit) -> dict[str, str] | None:
        """Everything before the targets are measured that may answer them already: the model
        (a mistake in the case file: a `CaseFileError` measurement per target), targets TVM
        refuses (theirs), and the cache (every target there: the cached measurements). Hands
        what it answers to `emit`; returns the cache keys of the targets left to measure
        (`self.targets`), or None when none is left."""
        error: ErrorRecord | None = None
        caught: BaseException | None = None
        try:
            self.model  # noqa: B018 - builds and validates it
        except UsageError as exc:
            error, caught = ErrorRecord(str(exc), CaseKind.CASE_FILE_ERROR, "", exc.line), exc
        except Exception as exc:  # the model's code (its eval(), named_modules(), ...) raised
            caught = exc
            error = model_error(self.case, f"the model '{self.case.model}' raised", exc,
                                "run the factory and model.eval() in Python to see the "
                                "traceback; a model torch.export made is taken as it is")
        if error is not None:
            error = refused_call_error(self.case, caught) or error
            for t in self.targets:
                emit(Measurement(t, error, seconds=time.perf_counter() - self.started),
                     None, False)
            return None
        self._drop_unusable_targets(emit)
        if not self.targets:
            return None
        keys = self._cache_keys()
        if keys:
            cache = Cache(self.options.cache_dir or "")
            hits = {t: cache.get(k) for t, k in keys.items()}
            # The export is shared by the targets: a partial hit is measured again, whole.
            # A hit that fails numerics now with no bisection for it is measured again, to
            # say which stage broke them.
            if all(m is not None and not wants_bisection(self.case, m) for m in hits.values()):
                for t in self.targets:
                    hit = hits[t]
                    assert hit is not None
                    emit(hit, keys[t], True)
                return None
        return keys

    def _drop_unusable_targets(self, emit: Emit) -> None:
        """Narrow the run to the targets TVM accepts; each one it refuses gets its
        `CaseFileError` measurement now (one line at the declaration), the others run."""
        usable = []
        for t in self.targets:
            try:
                self.plan(t)
            except UsageError as exc:
                emit(Measurement(t, ErrorRecord(str(exc), CaseKind.CASE_FILE_ERROR, "",
                                                self.case.line_of("targets", t, "target"))),
                     None, False)
            else:
                usable.append(t)
        self.targets = usable

    def _cache_keys(self) -> dict[str, str]:
        """Each target's cache key, or none at all: no cache, or a run that times kernels
        (a cache restored on another runner would report its times)."""
        if not self.options.cache_dir or any(wants_profile(self.case, t, self.options)
                                             for t in self.targets):
            return {}
        digest = weights_digest(self.model)
        return {t: key(self.case, t, digest, self.plan(t).numerics, self.plan(t).describe(),
                       self.options.static_only) for t in self.targets}

    def prepare(self) -> ErrorRecord | None:
        """What every target shares, done once: PyTorch's outputs (the model's forward runs
        here), the float64 reference where a target's numerics want it, the export. None
        when all went well, else why no target can be measured."""
        case = self.case
        t0 = time.perf_counter()
        caught: BaseException
        try:
            self.expected  # noqa: B018 - PyTorch's outputs: the model's forward runs here
            self.decoy  # noqa: B018
            self.front  # noqa: B018
        except CompileStageError as exc:
            error, caught = ErrorRecord(str(exc), CaseKind.COMPILE_ERROR, exc.detail,
                                        case.line_of("model")), exc
        except UsageError as exc:  # the case says something the model cannot do
            error, caught = ErrorRecord(str(exc), CaseKind.CASE_FILE_ERROR, "", exc.line), exc
        except Exception as exc:  # the model's own forward raised
            caught = exc
            error = model_error(case, "PyTorch forward failed", exc,
                                "call the model on the case's [[inputs]] shapes in Python")
            t0 = time.perf_counter()  # the forward's time is nobody's measurement
        else:
            # Too many [[outputs]] is judged (`judge`), not measured: the measurement stays
            # valid, so fixing the case file is answered from the cache.
            self._reference64_error = self._float64_reference()
            self._prepared_seconds = time.perf_counter() - t0
            return None
        self._prepared_seconds = time.perf_counter() - t0
        return refused_call_error(case, caught) or error

    def failed(self, target: str, error: ErrorRecord) -> Measurement:
        """The measurement of a target whose case could not be prepared."""
        return Measurement(target, error, seconds=self._prepared_seconds)

    def measure(self, target: str) -> Measurement:
        """One target, after `prepare`: compile, read the kernel list, run the numerics where
        they run, find the stage that broke them if they fail, time the kernels when asked.
        The first target measured carries the time `prepare` took."""
        try:
            return self._measure(target)
        finally:
            close_hosts()  # a GPU's device host ends with its target's measurement

    def _measure(self, target: str) -> Measurement:
        case = self.case
        shared_seconds, self._prepared_seconds = self._prepared_seconds, 0.0
        reference64_error = self._reference64_error
        t0 = time.perf_counter()
        m = Measurement(target, model_outputs=len(self.expected[0]),
                        batchnorms=len(batchnorms(self.model)),
                        output_names=list(self.case.output_names), decoy=self.decoy,
                        output_steps=self.front.output_steps)
        try:
            compiled = self.compiled(target)
        except CompileStageError as exc:
            m.error = ErrorRecord(str(exc), CaseKind.COMPILE_ERROR, exc.detail)
            m.seconds = shared_seconds + time.perf_counter() - t0
            return m
        m.kernels = read_kernel_list(compiled, case.max_sizes())
        m.stage_counts = stage_counts(compiled, m.kernels)
        m.op_layouts = op_layouts(compiled.stage(op_level_stage(compiled)).mod,
                                  self.front.sources)
        m.compile_seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        m.build_skipped = compiled.build_skipped
        m.kept_layouts = list(compiled.kept_layouts)
        m.attention_left = list(compiled.attention_left)
        m.float_left = list(compiled.float_left)
        m.capped = list(compiled.capped)
        self._numerics(m, compiled, reference64_error if case.needs_float64(target) else None)
        if m.samples:  # where the numerics broke, if they did (the stages run here)
            deadline = self.started + _BISECT_SHARE * (self.options.timeout or case.timeout)
            m.bisection = bisect_failure(self.case, target, compiled, self.front, m.samples,
                                         [arrays for _, arrays in self.samples], deadline)
        m.numerics_seconds = time.perf_counter() - t1
        m.profile, m.profile_skip = profile_case(case, compiled, self.front.params, target,
                                                 m.kernels, self.options)
        m.profile_seconds = time.perf_counter() - t1 - m.numerics_seconds
        m.seconds = shared_seconds + time.perf_counter() - t0
        return m

    def _numerics(self, m: Measurement, compiled: Compiled,
                  reference64_error: ErrorRecord | None) -> None:
        """Run the compiled program on every sample where the target's numerics run (this
        machine, or a device of the RPC tracker, all samples in one session), or say why
        they are skipped; the outputs go into `m`, with the float64 reference where it is
        wanted (`reference64_error`: why the model could not give it)."""
        target, case = m.target, self.case
        plan = self.plan(target)
        if self.options.static_only:
            m.numerics_skip = Skip("static checks only: numerics not run", SkipKind.STATIC_ONLY)
            return
        if not plan.place.runs:
            unbuilt = f"; not built here: {compiled.build_skipped}" if compiled.build_skipped \
                else ""
            m.numerics_skip = Skip(f"{plan.place.missing}{unbuilt}: static checks only",
                                   SkipKind.DEVICE_UNAVAILABLE)
            return
        if reference64_error is not None:
            m.numerics_error = reference64_error
            return
        if compiled.build_skipped:
            m.numerics_error = ErrorRecord(f"cannot build for {target} here: "
                                           f"{compiled.build_skipped}",
                                           NumericsKind.BUILD_UNAVAILABLE)
            return
        unbound = self.unbound_params(compiled)
        inputs = [arrays for _, arrays in self.samples]
        want64 = case.needs_float64(target)
        try:
            if plan.place.where == "local":
                actual = [self.run_program(target, arrays) for arrays in inputs]
            else:
                actual = run_remote(compiled.executable, case, inputs, plan.tdef, plan.place,
                                    self.options.rpc, unbound,
                                    self.options.timeout or case.timeout)
                m.ran_on = plan.place.remote()
            refs64 = self._references64 if want64 else None
            samples = [Sample(label, outs, reference, refs64[i] if refs64 else None,
                              eager_dtypes=self._eager_dtypes)
                       for i, ((label, _), outs, reference) in enumerate(zip(
                           self.samples, actual, self.expected, strict=True))]
        except RpcError as exc:
            m.numerics_error = ErrorRecord(f"{exc} ({target})", exc.kind, exc.detail)
        except DeviceHostError as exc:  # what failed in the device host, as it said it
            m.numerics_error = ErrorRecord(f"running the compiled program failed ({target}): "
                                           f"{exc}", NumericsKind.RUNTIME_ERROR, exc.detail)
        except Exception as exc:
            m.numerics_error = ErrorRecord(
                f"running the compiled program failed ({target}): "
                f"{type(exc).__name__}: {_one_line(exc)}", NumericsKind.RUNTIME_ERROR, str(exc))
        else:  # selections matched here, under the case's limits: never in the parent
            try:
                m.samples = [match_selections(case, target, s) for s in samples]
                if m.decoy is not None and m.samples:
                    m.decoy = match_decoy(case, target, m.decoy, m.samples[0])
                if want64:  # a steps failure eager float32 passed: its error elsewhere
                    m.eager_elsewhere = eager_elsewhere(case, m, self.reference,
                                                        self.reference64)
            except TooManyItems as exc:
                m.numerics_error = ErrorRecord(
                    f"numerics cannot compare {exc} ({target}) (hint: declare the output "
                    "without `selection`, or select fewer items)",
                    NumericsKind.SELECTION_TOO_LARGE, line=case.line_of("outputs"))

    def _float64_reference(self) -> ErrorRecord | None:
        """Eager float64 outputs of every sample (`_references64`), where a target whose
        numerics run in this run asks for them; or why the model cannot give them (an error
        of those targets' numerics)."""
        case = self.case
        if not any(case.needs_float64(t) and self.plan(t).numerics for t in self.targets):
            return None
        try:
            self._references64 = [self.reference64(arrays) for _, arrays in self.samples]
        except Exception as exc:
            line = next(case.tolerance_for(t, None)[1] for t in self.targets
                        if case.needs_float64(t))
            return ErrorRecord(
                f"the model cannot run in float64 for the reference: {type(exc).__name__}: "
                f"{_one_line(exc)} (hint: judge it against float32 with rtol/atol instead)",
                NumericsKind.FLOAT64_ERROR, str(exc), line)
        return None

    def bisect(self, target: str, *, stop_at_break: bool = False) -> Bisection:
        """Every stage of `target`'s pipeline built for this machine's CPU and run on the
        case's first sample, judged by `target`'s tolerance (``show --bisect``)."""
        label, arrays = self.samples[0]
        ref64 = self.reference64(arrays) if self.case.needs_float64(target) else None
        return bisect(self.case, target, self.compiled(target, build=False), self.front,
                      inputs=arrays, expected=self.expected[0], reference64=ref64,
                      label=label, stop_at_break=stop_at_break)
