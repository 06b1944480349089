"""Suite wall time: cold with 1 worker, cold with N workers, and warm (unchanged suite).

    python benchmarks/suite.py model_cases [-k PATTERN ...] [--jobs 2] [--repeat 3]

Each run is a fresh ``cl-validate run`` process. The cold runs get empty cache directories and
alternate in ABBA order (-j 1, -j N, -j N, -j 1, -j 1, ...), so a noisy neighbour on a shared
machine slows both alike and a machine that drifts (slower or faster through the runs) favours
neither; the medians are compared, and each round's pair. Every run also prints the CPU time
(user + system) its processes took: the same work, so a run whose CPU time is far off ran
on a slower machine. The warm run reuses a cache a cold run filled. Prints every run,
the medians, the speed-up of N workers over 1, the warm/cold ratio, and the largest worker's
peak RSS.
"""

from __future__ import annotations

import argparse
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(paths: list[str], patterns: list[str], jobs: int, cache: Path
        ) -> tuple[float, float, str]:
    cmd = [sys.executable, "-m", "cl_validate", "run", *paths, "-j", str(jobs),
           "--cache-dir", str(cache)]
    for p in patterns:
        cmd += ["-k", p]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, cpu, proc.stdout


def peak_mb(stdout: str) -> float:
    """Largest 'peak MB' cell of the summary tables."""
    values = [float(m) for m in re.findall(r"\s(\d+)\s*$", stdout, flags=re.M)]
    return max(values, default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=["model_cases"])
    ap.add_argument("-k", dest="patterns", action="append", default=[])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="cold runs of each (alternating)")
    args = ap.parse_args()
    cold: dict[int, list[float]] = {1: [], args.jobs: []}
    peaks: dict[int, float] = {1: 0.0, args.jobs: 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        n_runs = 0
        for i in range(args.repeat):
            for jobs in (1, args.jobs) if i % 2 == 0 else (args.jobs, 1):
                wall, cpu, out = run(args.paths, args.patterns, jobs,
                                     Path(tmp, f"cold-{jobs}-{i}"))
                n_runs = len(re.findall(r"^\[\s*\d+/\d+\]", out, flags=re.M))
                cold[jobs].append(wall)
                peaks[jobs] = max(peaks[jobs], peak_mb(out))
                print(f"cold, -j {jobs}: {wall:7.1f} s   cpu {cpu:6.1f} s", flush=True)
        warm, _, outw = run(args.paths, args.patterns, args.jobs, Path(tmp, f"cold-{args.jobs}-0"))
    one, many = statistics.median(cold[1]), statistics.median(cold[args.jobs])
    print(f"\n{n_runs} case x target runs, {args.repeat} cold runs of each, ABBA order")
    print(f"cold, -j 1 (median):  {one:7.1f} s   largest worker {peaks[1]:.0f} MB")
    print(f"cold, -j {args.jobs} (median):  {many:7.1f} s   largest worker "
          f"{peaks[args.jobs]:.0f} MB")
    print(f"warm, -j {args.jobs}:           {warm:7.1f} s   "
          f"({'all' if 'reused' in outw else 'NOT all'} measurements from the cache)")
    pairs = ", ".join(f"{a / b:.2f}" for a, b in zip(cold[1], cold[args.jobs], strict=True))
    print(f"speed-up -j {args.jobs} over -j 1: {one / many:.2f}x (each round's pair: {pairs})")
    print(f"warm / cold (-j {args.jobs}):     {warm / many:.1%}")


if __name__ == "__main__":
    main()
