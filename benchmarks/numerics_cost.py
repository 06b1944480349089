"""What explaining numerics costs: the float64 reference run, and the stage bisection.

    python benchmarks/numerics_cost.py model_cases/resnet18.toml [more cases] [--repeat 3]

For each case, in this one process (so a noisy neighbour slows every figure alike), through
one case session (`cl_validate.session.case_session.CaseSession`: the model built and
exported once, as ``cl-validate run`` and ``show --bisect`` do):

- the eager float32 reference and the float64 reference, median seconds over --repeat runs,
  and the float64 one as a multiple of the float32 one (what ``reference = "float64"`` adds
  to a run: one such forward per sample);
- the compile of the case's llvm pipeline and the build of its final program (what every run
  pays), against a bisection of every stage (``show --bisect``: `CaseSession.bisect`, its
  compile without the build done before the clock starts; a failing run stops at the first
  break, so this is its worst case), and the ratio.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def median_seconds(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def float64_forward(session: Any, arrays: Any) -> None:
    """The session's float64 copy of the model made afresh, and its forward on `arrays`: what
    a one-sample run with ``reference = "float64"`` pays."""
    session.__dict__.pop("model64", None)  # the cached copy: made again, as a run makes it
    session.reference64(arrays)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")

    from cl_validate.session.case_session import CaseSession
    from cl_validate.spec import load_case
    from cl_validate.spec.options import RunOptions

    print(f"{'case':<20} {'f32 ref s':>9} {'f64 ref s':>9} {'f64/f32':>7} "
          f"{'compile+build s':>15} {'bisect s':>8} {'bisect/compile':>14}")
    for path in args.cases:
        case = load_case(path)
        session = CaseSession(case, RunOptions(targets=("llvm",)))
        error = session.prepare()  # the model, PyTorch's outputs, the export
        if error is not None:
            raise RuntimeError(error.message)
        arrays = session.samples[0][1]
        f32 = median_seconds(functools.partial(session.reference, arrays), args.repeat)
        f64 = median_seconds(functools.partial(float64_forward, session, arrays), args.repeat)
        t0 = time.perf_counter()
        session.compiled("llvm")
        compile_s = time.perf_counter() - t0
        session.compiled("llvm", build=False)  # what `show --bisect` bisects (not timed)
        t0 = time.perf_counter()
        result = session.bisect("llvm")
        bisect_s = time.perf_counter() - t0
        assert all(r.ran for r in result.stages), result.render()
        print(f"{case.name:<20} {f32:9.3f} {f64:9.3f} {f64 / f32:7.2f} {compile_s:15.1f} "
              f"{bisect_s:8.1f} {bisect_s / compile_s:14.2f}", flush=True)


if __name__ == "__main__":
    main()
