"""Measure one case: build nothing here but the measurement — export once, then compile (and
run, where the device exists) on each selected target. Runs where torch and TVM live: in a
worker process (or in-process for ``--no-isolation``, ``show`` and the tests)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cl_validate.analysis.kernels import kernel_list
from cl_validate.analysis.layouts import op_layouts
from cl_validate.analysis.stages import op_level_stage, stage_counts
from cl_validate.checks.measurement import Measurement, Skip
from cl_validate.compile.build import compile_case
from cl_validate.compile.frontend import export_and_import
from cl_validate.compile.target import device_available, device_for
from cl_validate.errors import CompileStageError, ErrorRecord
from cl_validate.ir import weight_params
from cl_validate.run.execute import make_inputs, run_torch, run_tvm, torch_inputs
from cl_validate.run.options import RunOptions, selected_targets
from cl_validate.spec import CaseSpec


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
    arrays = make_inputs(case)
    tensors = torch_inputs(case, arrays)
    try:
        expected = run_torch(model, tensors)
        front = export_and_import(model, case, tensors)
    except CompileStageError as exc:
        for t in targets:
            done(Measurement(t, ErrorRecord(str(exc), "CompileError", exc.detail,
                                             case.line_of("model")),
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
    shared = time.perf_counter() - t_case

    for target in targets:
        t0 = time.perf_counter()
        m = Measurement(target, model_outputs=len(expected))
        try:
            compiled = compile_case(front, case, target, build=not options.static_only)
        except CompileStageError as exc:
            m.error = ErrorRecord(str(exc), "CompileError", exc.detail)
            m.seconds = shared + time.perf_counter() - t0
            done(m)
            continue
        m.kernels = kernel_list(compiled)
        m.stage_counts = stage_counts(compiled, m.kernels)
        m.op_layouts = op_layouts(compiled.stage(op_level_stage(compiled)).mod, front.sources)
        m.compile_seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        if options.static_only:
            m.numerics_skip = Skip("static checks only: numerics not run", "StaticOnly")
        elif device_available(target):
            try:
                unbound = [front.params[p.name] for p in weight_params(compiled.final["main"])]
                m.actual = run_tvm(compiled.executable, case, arrays,
                                            device_for(target), unbound)
                m.expected = expected
            except Exception as exc:
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                m.numerics_error = ErrorRecord(
                    f"running the compiled program failed ({target}): "
                    f"{type(exc).__name__}: {first}", "RuntimeError", str(exc))
        else:
            m.numerics_skip = Skip(f"no {target} device on this machine: static checks only",
                                   "DeviceUnavailable")
        m.numerics_seconds = time.perf_counter() - t1
        m.seconds = shared + time.perf_counter() - t0
        done(m)
    return out
