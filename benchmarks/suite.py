"""Suite wall time: cold with 1 worker, cold with N workers, and warm (unchanged suite).

    python benchmarks/suite.py model_cases [-k PATTERN ...] [--jobs 2]

Each run is a fresh ``cl-validate run`` process; the cold runs get empty cache directories,
the warm run reuses the cache the cold N-worker run filled. Prints the wall times, the
speed-up of N workers over 1, the warm/cold ratio, and the largest worker's peak RSS.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(paths: list[str], patterns: list[str], jobs: int, cache: Path) -> tuple[float, str]:
    cmd = [sys.executable, "-m", "cl_validate", "run", *paths, "-j", str(jobs),
           "--cache-dir", str(cache)]
    for p in patterns:
        cmd += ["-k", p]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, proc.stdout


def peak_mb(stdout: str) -> float:
    """Largest 'peak MB' cell of the summary tables."""
    values = [float(m) for m in re.findall(r"\s(\d+)\s*$", stdout, flags=re.M)]
    return max(values, default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=["model_cases"])
    ap.add_argument("-k", dest="patterns", action="append", default=[])
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        one, many = Path(tmp, "one"), Path(tmp, "many")
        cold1, out1 = run(args.paths, args.patterns, 1, one)
        n_runs = len(re.findall(r"^\[\s*\d+/\d+\]", out1, flags=re.M))
        print(f"{n_runs} case x target runs")
        print(f"cold, -j 1:        {cold1:7.1f} s   largest worker {peak_mb(out1):.0f} MB")
        coldn, outn = run(args.paths, args.patterns, args.jobs, many)
        print(f"cold, -j {args.jobs}:        {coldn:7.1f} s   "
              f"largest worker {peak_mb(outn):.0f} MB")
        warm, outw = run(args.paths, args.patterns, args.jobs, many)
        print(f"warm, -j {args.jobs}:        {warm:7.1f} s   "
              f"({'all' if 'reused' in outw else 'NOT all'} measurements from the cache)")
        print(f"speed-up -j {args.jobs} over -j 1: {cold1 / coldn:.2f}x")
        print(f"warm / cold (-j {args.jobs}):     {warm / coldn:.1%}")


if __name__ == "__main__":
    main()
