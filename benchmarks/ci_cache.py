"""What a pull request that touches one case costs in CI, with the measurement cache warm vs cold.

    python benchmarks/ci_cache.py [model_cases] [--shards 2] [--touch fcn_small] [--jobs 2]

Simulates the workflow's `validate` job locally: each shard runs
``cl-validate run CASES --target llvm --target cuda --shard I/N`` with its own cache folder,
as each CI shard restores and saves its own. First the base branch, cold (empty caches: what
every pull request cost before the workflow restored the cache); then a pull request that
changes one case file (``seed = 1`` added to `--touch`: new weights, so that case must be
measured again), run twice: with the caches the base run saved (restored, as the workflow
does) and cold. Prints each shard's wall time and how many measurements came from the cache.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REUSED = re.compile(r"cache: (\d+) of (\d+) case x target measurements reused")
RUNS = re.compile(r"\((\d+) case x target runs\)")


def shard(cases: Path, i: int, n: int, cache: Path, jobs: int) -> tuple[float, int, int]:
    """Wall seconds, measurements reused, case x target runs of one shard."""
    cmd = [sys.executable, "-m", "cl_validate", "run", str(cases), "--target", "llvm",
           "--target", "cuda", "--shard", f"{i}/{n}", "-j", str(jobs), "--cache-dir",
           str(cache)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    reused = REUSED.search(proc.stdout)
    runs = RUNS.search(proc.stdout)
    return wall, int(reused.group(1)) if reused else 0, int(runs.group(1)) if runs else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="?", default="model_cases", type=Path)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--touch", default="fcn_small", help="the case file the PR changes")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cl_validate-ci-") as tmp:
        work = Path(tmp) / "model_cases"
        shutil.copytree(args.cases, work, ignore=shutil.ignore_patterns("__pycache__"))
        caches = Path(tmp) / "caches"
        rows: list[tuple[str, int, float, int, int]] = []
        for i in range(1, args.shards + 1):
            rows.append(("base branch, cold", i, *shard(work, i, args.shards,
                                                         caches / f"shard{i}", args.jobs)))
        case = work / f"{args.touch}.toml"
        case.write_text(case.read_text().replace("\n[[inputs]]", "seed = 1\n\n[[inputs]]", 1))
        for i in range(1, args.shards + 1):
            restored = Path(tmp) / "restored" / f"shard{i}"
            shutil.copytree(caches / f"shard{i}", restored)
            rows.append(("PR touching one case, cache restored", i,
                         *shard(work, i, args.shards, restored, args.jobs)))
        for i in range(1, args.shards + 1):
            rows.append(("PR touching one case, cold", i,
                         *shard(work, i, args.shards, Path(tmp) / "cold" / f"shard{i}",
                                args.jobs)))
    print("| run | shard | wall | measurements from the cache |\n|---|---|---|---|")
    for what, i, wall, reused, runs in rows:
        print(f"| {what} | {i}/{args.shards} | {wall:.1f} s | {reused} of {runs} |")
    for what in dict.fromkeys(r[0] for r in rows):
        walls = [r[2] for r in rows if r[0] == what]
        print(f"{what}: slowest shard {max(walls):.1f} s, all shards {sum(walls):.1f} s")


if __name__ == "__main__":
    main()
