"""A suite end to end: judge every case × target, answered by the cache or measured by a
`Measurer`: fresh case processes (`cl_validate.suite.pool.WorkerPool`), or this process with
``--no-isolation`` (`cl_validate.session.in_process.InProcess`).

With case processes this process only reads case files, judges measurements and writes
cache entries and reports: it never imports torch or TVM and never runs a model's code, so
nothing a model does can take the run down. An unchanged case is answered here, from the
cache's direct key and the stamps of the files it read when it was measured
(`cl_validate.measurements.cache`): no process starts, no model is built. Everything else —
importing and calling the factory, the weights digest that keys the cache, export, compile,
run — happens in a case process (`cl_validate.session`), under the case's timeout and memory
cap.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from cl_validate.checks.judge import judge
from cl_validate.checks.numerics import wants_bisection
from cl_validate.checks.verdict import CaseResult
from cl_validate.measurements.cache import Cache, cacheable, direct_key
from cl_validate.measurements.messages import FileStamp, TargetMeasured
from cl_validate.paths import repo_root
from cl_validate.spec import CaseSpec
from cl_validate.spec.options import RunOptions, selected_targets

#: What a measurer hands each target's result to.
OnTarget = Callable[[CaseSpec, TargetMeasured], None]
#: What a measurer hands the files a case read to, with its targets' cache keys.
#: (case, its targets' cache keys, the files it read, why those are not known whole or "")
OnInputs = Callable[[CaseSpec, dict[str, str], tuple[FileStamp, ...], str], None]


class Measurer(Protocol):
    """Measures cases, handing every selected target's measurement to `report` exactly once
    (an error measurement when it could not be measured)."""

    def require_devices(self, cases: Sequence[CaseSpec]) -> None:
        """``--require-device``: a one-line usage error before any case runs when a
        selected target's numerics could run nowhere."""

    def run(self, cases: Sequence[CaseSpec], report: OnTarget,
            on_inputs: OnInputs | None = None) -> None:
        """Measure `cases`; the files a case read go to `on_inputs` (with its targets'
        cache keys), where the measurer knows them."""

    def shutdown(self) -> None:
        """End whatever it started."""


@dataclass
class SuiteStats:
    """What the cache did for a run: measurements reused out of all judged."""

    reused: int = 0
    judged: int = 0
    #: (case, why) for each case measured but not kept for the next run: what it read is
    #: not known whole (`cl_validate.session.open_watch`)
    not_kept: list[tuple[str, str]] = field(default_factory=list)


class _Judge:
    """Turns each target's measurement into its verdicts, storing new measurements in the
    cache on the way (warning once if the cache cannot be written: it is an optimization,
    the verdict stands without it)."""

    def __init__(self, options: RunOptions, on_result: Callable[[CaseResult], None]) -> None:
        self.options = options
        self.on_result = on_result
        self.cache = Cache(options.cache_dir) if options.cache_dir else None
        self.stats = SuiteStats()
        self._warned = False

    def __call__(self, case: CaseSpec, msg: TargetMeasured) -> None:
        m = msg.measurement
        self.stats.judged += 1
        self.stats.reused += msg.cached
        if (self.cache is not None and msg.key is not None and not msg.cached
                and cacheable(m)):
            try:
                self.cache.put(msg.key, m)
            except OSError as exc:
                if not self._warned:
                    self._warned = True
                    print(f"cl-validate: warning: cannot write the cache in {self.cache.root}: "
                          f"{exc.strerror or exc}; measurements are not kept for the next "
                          "run (hint: check --cache-dir)", file=sys.stderr)
        self.on_result(judge(case, m, self.options.stale_budget, wall_seconds=msg.wall_seconds,
                             cached=msg.cached))

    def remember(self, case: CaseSpec, keys: dict[str, str],
                 inputs: tuple[FileStamp, ...], unseen: str = "") -> None:
        """The files a measured case read: the next run answers it from them (not when
        `unseen` says why they are not all known: then the run says so)."""
        if self.cache is None:
            return
        if unseen:
            self.stats.not_kept.append((case.label, unseen))
            return
        try:
            for target, key in keys.items():
                self.cache.remember(direct_key(case, target, self.options), inputs, key)
        except OSError:
            pass  # the cache is an optimization; `__call__` warned if it cannot be written

    def answer(self, case: CaseSpec) -> bool:
        """Judge every target of `case` from the cache, when its direct key and the files
        it read say nothing changed; False (nothing judged) otherwise."""
        if self.cache is None:
            return False
        targets = selected_targets(case, self.options)
        if self.options.profile or any(case.profiled(t) for t in targets):
            return False  # times are measured, never reused
        t0 = time.perf_counter()
        found: list[TargetMeasured] = []
        root = repo_root(case.path)
        for t in targets:
            key = self.cache.recall(direct_key(case, t, self.options), root)
            m = self.cache.get(key) if key is not None else None
            if m is None or wants_bisection(case, m):
                return False
            found.append(TargetMeasured(m, key, cached=True))
        for msg in found:
            now = time.perf_counter()
            self(case, replace(msg, wall_seconds=now - t0))
            t0 = now
        return True


def run_suite(cases: Sequence[CaseSpec], options: RunOptions,
              on_result: Callable[[CaseResult], None], measurer: Measurer) -> SuiteStats:
    """Judge every case × target `measurer` measures, each result to `on_result` as it
    arrives. Raises `DeviceUnavailableError` before any case runs when ``--require-device``
    names a device this machine lacks."""
    judged = _Judge(options, on_result)
    todo = [c for c in cases if selected_targets(c, options)]
    if options.require_device:
        measurer.require_devices(todo)
    todo = [c for c in todo if not judged.answer(c)]
    if todo:
        measurer.run(todo, judged, judged.remember)
    return judged.stats
