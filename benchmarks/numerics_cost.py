"""What explaining numerics costs: the float64 reference run, and the stage bisection.

    python benchmarks/numerics_cost.py model_cases/resnet18.toml [more cases] [--repeat 3]

For each case, in this one process (so a noisy neighbour slows every figure alike), with the
model built and exported once:

- the eager float32 reference and the float64 reference, median seconds over --repeat runs,
  and the float64 one as a multiple of the float32 one (what ``reference = "float64"`` adds
  to a run: one such forward per sample);
- the compile of the case's llvm pipeline and the build of its final program (what every run
  pays), against a bisection of every stage (``show --bisect``; a failing run stops at the
  first break, so this is its worst case), and the ratio.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def median_seconds(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")

    from cl_validate.compile.factory import build_model
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.execute import float64_model, run_torch, run_torch64
    from cl_validate.session.first_break import bisect
    from cl_validate.session.inputs import make_inputs, torch_inputs
    from cl_validate.spec import load_case

    print(f"{'case':<20} {'f32 ref s':>9} {'f64 ref s':>9} {'f64/f32':>7} "
          f"{'compile+build s':>15} {'bisect s':>8} {'bisect/compile':>14}")
    for path in args.cases:
        case = load_case(path)
        model = build_model(case)
        arrays = make_inputs(case)
        inputs = torch_inputs(case, arrays)
        f32 = median_seconds(functools.partial(run_torch, model, inputs), args.repeat)
        f64 = median_seconds(lambda m=model, i=inputs: run_torch64(float64_model(m), i),
                             args.repeat)  # the copy and the forward, as a one-sample run
        front = export_and_import(model, case, inputs)
        t0 = time.perf_counter()
        compiled = compile_case(front, case, "llvm")
        compile_s = time.perf_counter() - t0
        expected = run_torch(model, inputs)
        t0 = time.perf_counter()
        result = bisect(case, "llvm", compiled, front, inputs=arrays, expected=expected,
                        reference64=run_torch64(float64_model(model), inputs), stop_at_break=False)
        bisect_s = time.perf_counter() - t0
        assert all(r.ran for r in result.stages), result.render()
        print(f"{case.name:<20} {f32:9.3f} {f64:9.3f} {f64 / f32:7.2f} {compile_s:15.1f} "
              f"{bisect_s:8.1f} {bisect_s / compile_s:14.2f}", flush=True)


if __name__ == "__main__":
    main()
