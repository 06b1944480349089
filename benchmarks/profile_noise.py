"""How noisy ``--profile`` is: the same compiled program profiled in several sessions.

For each case: compile once for llvm through its case session
(`cl_validate.session.case_session.CaseSession`, as ``cl-validate run`` does), then profile
it `--sessions` times with `cl_validate.session.kernel_timer.profile_case`, what ``--profile``
runs (each a fresh VirtualMachine: one warm-up run, then `--repeats` timed runs, the inputs
at each dynamic dimension's maximum). Prints, per session, the median time of each
runtime-transform kernel and of all kernels, and the transforms' time share (median and the
fastest–slowest run); then how far the session medians spread. That spread is what a
`transform_time_share` budget has to leave room for. Also the wall time ``--profile`` adds to
a case (the warm-up and timed runs).

    python benchmarks/profile_noise.py model_cases/resnet50.toml model_cases/shufflenet_v2.toml
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")

    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.measurements.units import share_text, time_text
    from cl_validate.session.case_session import CaseSession
    from cl_validate.session.kernel_timer import profile_case
    from cl_validate.spec import load_case
    from cl_validate.spec.options import RunOptions

    options = RunOptions(targets=("llvm",), profile=True, profile_repeats=args.repeats)
    for path in args.paths:
        case = load_case(path)
        session = CaseSession(case, options)
        compiled = session.compiled("llvm")  # the model built and exported first
        kernels = read_kernel_list(compiled, case.max_sizes())
        transform_kernels = sorted({t.kernel for t in kernels.runtime_transforms})
        print(f"\n{case.name}: {len(kernels)} kernels, {len(kernels.runtime_transforms)} "
              f"runtime transforms in kernels {transform_kernels}; {args.sessions} sessions "
              f"x (1 warm-up + {args.repeats} timed runs)")
        shares, totals = [], []
        for run in range(args.sessions):
            t0 = time.perf_counter()
            profile, skip = profile_case(case, compiled, session.front.params, "llvm", kernels,
                                         options)
            wall = time.perf_counter() - t0
            if profile is None:
                raise RuntimeError(skip.reason if skip else "not profiled")
            share = profile.transform_share(kernels)
            total = profile.total()
            assert share is not None and total is not None
            shares.append(share.median)
            totals.append(total.median)
            first = profile.kernel(transform_kernels[0]) if transform_kernels else None
            print(f"  session {run + 1}: all kernels {total.text()}; transforms "
                  f"{share.text('share')}"
                  + (f"; kernel {transform_kernels[0]} {first.text()}" if first else "")
                  + f"; --profile wall {wall:.1f} s")
        print(f"  session medians: share {share_text(min(shares))}–{share_text(max(shares))}"
              f" (median {share_text(statistics.median(shares))}); all kernels "
              f"{time_text(min(totals))}–{time_text(max(totals))}")


if __name__ == "__main__":
    main()
