"""Measure one case — everything that runs the user's code happens here, in a worker process
(or in this process for ``--no-isolation``, ``show`` and the tests):

1. `validated_model`: import the factory's module and call it, check ``[layout_overrides]``,
   the pipeline module and the recorded baselines (a mistake is a `CaseFileError`);
2. the cache key (it needs the model's weights) and, where every target is known, the cached
   measurements;
3. otherwise `measure_case`: export once, then compile (and run, where the device exists) on
   each selected target.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from cl_validate.analysis.kernels import kernel_list
from cl_validate.analysis.layouts import op_layouts
from cl_validate.analysis.stages import op_level_stage, stage_counts
from cl_validate.checks.kernel_list import load_baseline
from cl_validate.checks.measurement import Measurement, Sample, Skip
from cl_validate.compile.build import compile_case
from cl_validate.compile.factory import build_model, check_layout_overrides, weights_digest
from cl_validate.compile.frontend import export_and_import
from cl_validate.compile.pipeline import resolve_pipeline
from cl_validate.compile.target import (
    build_unavailable,
    device_available,
    device_for,
    make_target,
)
from cl_validate.errors import CompileStageError, ErrorRecord, UsageError
from cl_validate.ir import weight_params
from cl_validate.run.bisect import bisect_failure, wants_bisection
from cl_validate.run.cache import Cache, key
from cl_validate.run.execute import (
    float64_model,
    make_inputs,
    run_torch,
    run_torch64,
    run_tvm,
    torch_inputs,
)
from cl_validate.run.options import RunOptions, selected_targets
from cl_validate.run.profile import profile_case, wants_profile
from cl_validate.run.remote import RpcError, run_remote
from cl_validate.run.rpc import placement
from cl_validate.spec import CaseSpec

#: What a measurement is handed to: (measurement, its cache key or None, came from the cache)
Emit = Callable[[Measurement, "str | None", bool], None]


def validated_model(case: CaseSpec, options: RunOptions) -> torch.nn.Module:
    """Resolve the case's factory and pipeline, build its model, check its [layout_overrides]
    and recorded baselines: every mistake in a case file raises `CaseFileError` here."""
    resolve_pipeline(case)
    model = build_model(case)
    check_layout_overrides(case, model)
    for target in selected_targets(case, options):
        load_baseline(case, target)  # a hand-edited baseline that does not parse
    return model


def target_description(case: CaseSpec, target: str, options: RunOptions) -> tuple[bool, str]:
    """Whether numerics will run on `target` in this run, and the compile target and where
    it runs in words (both are part of the cache key: a cuda measurement without a GPU has no
    numerics, one from a board under RPC key 'rk3588' is not one from this machine)."""
    tdef = case.target_def(target)
    tvm_target = make_target(tdef)
    place = placement(tdef, options.rpc, device_available)
    unbuildable = build_unavailable(tvm_target)
    numerics = not options.static_only and place.runs and unbuildable is None
    desc = f"{tvm_target} on {place.describe()}"
    return numerics, desc + (f" (not built: {unbuildable})" if unbuildable else "")


def _usable_targets(case: CaseSpec, options: RunOptions, emit: Emit) -> RunOptions:
    """`options` narrowed to the targets TVM accepts; each one it refuses gets its
    `CaseFileError` measurement now (one line at the declaration), the others run."""
    usable = []
    for t in selected_targets(case, options):
        try:
            make_target(case.target_def(t))
        except UsageError as exc:
            emit(Measurement(t, ErrorRecord(str(exc), "CaseFileError", "",
                                            case.line_of("targets", t, "target"))), None, False)
        else:
            usable.append(t)
    return replace(options, targets=tuple(usable))


def measure_or_reuse(case: CaseSpec, options: RunOptions, emit: Emit) -> None:
    """Validate the case's model, then hand every selected target's measurement to `emit`:
    from the cache (``options.cache_dir``) when every target is there, else measured. A
    case whose model cannot be used gets a `CaseFileError` measurement per target, with the
    case-file line and hint."""
    targets = selected_targets(case, options)
    t0 = time.perf_counter()
    try:
        model = validated_model(case, options)
    except UsageError as exc:
        for t in targets:
            emit(Measurement(t, ErrorRecord(str(exc), "CaseFileError", "", exc.line),
                             seconds=time.perf_counter() - t0), None, False)
        return
    options = _usable_targets(case, options, emit)
    targets = selected_targets(case, options)
    if not targets:
        return
    keys: dict[str, str] = {}
    # Timings are not cached: a cache restored on another runner would report its times.
    if options.cache_dir and not any(wants_profile(case, t, options) for t in targets):
        cache = Cache(options.cache_dir)
        digest = weights_digest(model)
        for t in targets:
            numerics, desc = target_description(case, t, options)
            keys[t] = key(case, t, digest, numerics, desc, options.static_only)
        hits = {t: cache.get(k) for t, k in keys.items()}
        # The export is shared by the targets: a partial hit is measured again, whole.
        # A hit that fails numerics now with no bisection for it is measured again, to say
        # which stage broke them.
        if all(m is not None and not wants_bisection(case, m) for m in hits.values()):
            for t in targets:
                hit = hits[t]
                assert hit is not None
                emit(hit, keys[t], True)
            return
    measure_case(case, model, options, lambda m: emit(m, keys.get(m.target), False))


def measure_case(case: CaseSpec, model: Any, options: RunOptions,
                 on_measurement: Callable[[Measurement], None] | None = None
                 ) -> list[Measurement]:
    """Export once, then compile (and run, where the device exists) on each target."""
    targets = selected_targets(case, options)
    out: list[Measurement] = []

    def done(m: Measurement) -> None:
        out.append(m)
        if on_measurement is not None:
            on_measurement(m)

    t_case = time.perf_counter()
    # Bisection stops here, leaving the rest of the case's time to finish the case.
    deadline = t_case + _BISECT_SHARE * (options.timeout or case.timeout)
    # One sample per input seed at each set of dynamic sizes (just one for a static case
    # with one seed), each with its PyTorch reference; export traces at the example sizes.
    samples = [(s.label, make_inputs(case, s.sizes, s.seed)) for s in case.samples()]
    try:
        expected = [run_torch(model, torch_inputs(case, arrays)) for _, arrays in samples]
        example = samples[0][1] if not case.dynamic else make_inputs(case)
        front = export_and_import(model, case, torch_inputs(case, example))
    except CompileStageError as exc:
        for t in targets:
            done(Measurement(t, ErrorRecord(str(exc), "CompileError", exc.detail,
                                             case.line_of("model")),
                             seconds=time.perf_counter() - t_case))
        return out
    except UsageError as exc:  # the case says something the model cannot do
        for t in targets:
            done(Measurement(t, ErrorRecord(str(exc), "CaseFileError", "", exc.line),
                             seconds=time.perf_counter() - t_case))
        return out
    except Exception as exc:  # the model's own forward raised
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        msg = f"PyTorch forward failed: {type(exc).__name__}: {first}".rstrip(": ")
        for t in targets:
            done(Measurement(t, ErrorRecord(msg, "ModelError", "", case.line_of("model"))))
        return out
    # Too many [[outputs]] is judged (`judge`), not measured: the measurement stays valid, so
    # fixing the case file is answered from the cache.
    reference64, reference64_error = _float64_reference(case, model, targets, samples, options)
    shared = time.perf_counter() - t_case

    for target in targets:
        t0 = time.perf_counter()
        m = Measurement(target, model_outputs=len(expected[0]))
        try:
            compiled = compile_case(front, case, target, build=not options.static_only)
        except CompileStageError as exc:
            m.error = ErrorRecord(str(exc), "CompileError", exc.detail)
            m.seconds = shared + time.perf_counter() - t0
            done(m)
            continue
        m.kernels = kernel_list(compiled, case.max_sizes())
        m.stage_counts = stage_counts(compiled, m.kernels)
        m.op_layouts = op_layouts(compiled.stage(op_level_stage(compiled)).mod, front.sources)
        m.compile_seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        m.build_skipped = compiled.build_skipped
        _numerics(m, case, options, compiled, front.params, samples, expected,
                  reference64 if case.needs_float64(target) else [None] * len(samples),
                  reference64_error if case.needs_float64(target) else None)
        if m.samples:  # where the numerics broke, if they did (the stages run here)
            m.bisection = bisect_failure(case, target, compiled, front, m.samples,
                                         [arrays for _, arrays in samples], deadline)
        m.numerics_seconds = time.perf_counter() - t1
        m.profile, m.profile_skip = profile_case(case, compiled, front.params, target,
                                                 m.kernels, options)
        m.profile_seconds = time.perf_counter() - t1 - m.numerics_seconds
        m.seconds = shared + time.perf_counter() - t0
        done(m)
    return out


def _numerics(m: Measurement, case: CaseSpec, options: RunOptions, compiled: Any,
              params: dict[str, Any], samples: list[tuple[str, Any]],
              expected: list[list[Any]], reference64: list[Any],
              reference64_error: ErrorRecord | None) -> None:
    """Run the compiled program on every sample where the target's numerics run (this
    machine, or a device of the RPC tracker, all samples in one session), or say why they
    are skipped; the outputs go into `m`, with the float64 reference where it is wanted
    (`reference64_error`: why the model could not give it)."""
    target = m.target
    tdef = case.target_def(target)
    place = placement(tdef, options.rpc, device_available)
    if options.static_only:
        m.numerics_skip = Skip("static checks only: numerics not run", "StaticOnly")
        return
    if not place.runs:
        unbuilt = f"; not built here: {compiled.build_skipped}" if compiled.build_skipped else ""
        m.numerics_skip = Skip(f"{place.missing}{unbuilt}: static checks only",
                               "DeviceUnavailable")
        return
    if reference64_error is not None:
        m.numerics_error = reference64_error
        return
    if compiled.build_skipped:
        m.numerics_error = ErrorRecord(f"cannot build for {target} here: "
                                       f"{compiled.build_skipped}", "BuildUnavailable")
        return
    unbound = [params[p.name] for p in weight_params(compiled.final["main"])]
    inputs = [arrays for _, arrays in samples]
    try:
        if place.where == "local":
            actual = [run_tvm(compiled.executable, case, arrays, device_for(tdef.device),
                              unbound) for arrays in inputs]
        else:
            actual = run_remote(compiled.executable, case, inputs, tdef, place, options.rpc,
                                unbound, options.timeout or case.timeout)
            m.ran_on = place.remote()
        m.samples = [Sample(label, outs, reference, r64) for (label, _), outs, reference, r64
                     in zip(samples, actual, expected, reference64, strict=True)]
    except RpcError as exc:
        m.numerics_error = ErrorRecord(f"{exc} ({target})", exc.kind, exc.detail)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        m.numerics_error = ErrorRecord(
            f"running the compiled program failed ({target}): "
            f"{type(exc).__name__}: {first}", "RuntimeError", str(exc))


#: The share of a case's timeout after which a bisection stops (the rest finishes the case).
_BISECT_SHARE = 0.75


def _float64_reference(case: CaseSpec, model: Any, targets: list[str],
                       samples: list[tuple[str, list[Any]]], options: RunOptions
                       ) -> tuple[list[Any], ErrorRecord | None]:
    """Eager float64 outputs of every sample, where a target's tolerance asks for them; or
    why the model cannot give them (an error of those targets' numerics)."""
    if options.static_only or not any(case.needs_float64(t) for t in targets):
        return [None] * len(samples), None
    try:
        model64 = float64_model(model)
        return [run_torch64(model64, torch_inputs(case, arrays)) for _, arrays in samples], None
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        line = next(case.tolerance_for(t, None)[1] for t in targets if case.needs_float64(t))
        return [None] * len(samples), ErrorRecord(
            f"the model cannot run in float64 for the reference: {type(exc).__name__}: "
            f"{first} (hint: judge it against float32 with rtol/atol instead)",
            "Float64ReferenceError", str(exc), line)
