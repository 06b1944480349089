"""How well the pool's slot policy packs a run, replayed without running anything.

    python benchmarks/slots.py [--jobs 2] [--suites 400] [--seed 0]

A run's wall time on a noisy shared machine varies by more than the scheduling changes it,
so this replays the policy itself: `cl_validate.suite.pool.share_slots` decides, at every
moment a slot frees, between preparing the next case and granting a waiting target (local
numerics targets first, then in hand-out order, as the pool does), over task durations that
are given, not measured. It compares the policy with cases prepared ahead (the pool's) with
the one before it (a case only when no target waits: `share_slots` with no reserve wanted),
as the wall time over the lower bound (all work / slots; the zygote's start left out):

- on the durations of two traced `-j 2` runs of the six-case benchmark set (BENCHMARKS.md);
- on random suites (4-30 cases, sizes log-normal, prepare / llvm / cuda times scaled from
  those traces, each +-30 %), averaged.
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics

from cl_validate.suite.pool import share_slots

#: (prepare, llvm with numerics, cuda static) seconds per case, from two traced `-j 2` runs of
#: resnet18, mobilenet_v2, mobilenet_v2_nhwc, mobilenet_v3_small, shufflenet_v2, unet.
TRACES = {
    "traced run 1": [(4.33, 11.20, 5.75), (6.14, 12.00, 8.46), (5.69, 12.60, 9.96),
                     (4.89, 26.27, 12.69), (6.64, 11.92, 10.16), (4.54, 15.23, 9.25)],
    "traced run 2": [(2.66, 7.65, 4.10), (5.73, 9.18, 6.71), (4.06, 9.18, 6.58),
                     (4.23, 19.42, 12.84), (5.19, 9.63, 8.69), (4.11, 11.63, 5.62)],
}
_KIND = {"prepare": 0, "llvm": 1, "cuda": 2}


def replay(cases: list[tuple[float, float, float]], jobs: int, ahead: bool) -> float:
    """The wall time of `cases` on `jobs` slots under `share_slots` (prepared ahead, or
    with no reserve wanted: the policy before it)."""
    now, todo = 0.0, list(range(len(cases)))
    events: list[tuple[float, str, int]] = []
    waiting: list[tuple[int, str]] = []  # (case, target) in the order cases were prepared
    preparing: set[int] = set()
    free = jobs
    while todo or events or waiting:
        reserve = len(waiting) + 2 * len(preparing)
        ordered = sorted(waiting, key=lambda w: w[1] != "llvm")  # local numerics first
        prepare, grant = share_slots(free, jobs if ahead else 0, reserve,
                                     len(ordered[:free]), [2] * min(free, len(todo)))
        for case, target in ordered[:grant]:
            waiting.remove((case, target))
            heapq.heappush(events, (now + cases[case][_KIND[target]], target, case))
        for _ in range(prepare):
            case = todo.pop(0)
            preparing.add(case)
            heapq.heappush(events, (now + cases[case][0], "prepare", case))
        free -= prepare + grant
        now, kind, case = heapq.heappop(events)
        free += 1
        if kind == "prepare":
            preparing.discard(case)
            waiting += [(case, "llvm"), (case, "cuda")]
    return now


def random_suite(rng: random.Random) -> list[tuple[float, float, float]]:
    out = []
    for _ in range(rng.randint(4, 30)):
        size = rng.lognormvariate(0.0, 0.6)
        out.append((4.0 * size ** 0.3 * rng.uniform(0.7, 1.3),
                    12.0 * size * rng.uniform(0.7, 1.3), 7.0 * size * rng.uniform(0.7, 1.3)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--suites", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"wall / lower bound on {args.jobs} slots (1.000 = no slot ever idle)")
    for name, cases in TRACES.items():
        bound = sum(map(sum, cases)) / args.jobs
        before, ahead = (replay(cases, args.jobs, a) / bound for a in (False, True))
        print(f"  {name:24s} before {before:.3f}   prepared ahead {ahead:.3f}")
    rng = random.Random(args.seed)
    ratios: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.suites):
        cases = random_suite(rng)
        bound = sum(map(sum, cases)) / args.jobs
        for a in (False, True):
            ratios[a].append(replay(cases, args.jobs, a) / bound)
    print(f"  {args.suites} random suites (mean)  before {statistics.mean(ratios[False]):.3f}"
          f"   prepared ahead {statistics.mean(ratios[True]):.3f}")


if __name__ == "__main__":
    main()
