"""``cl-validate run [PATH ...]``: compile and check cases, print the verdicts, write reports.

The reports are this run's on every way out (`cl_validate.report.outputs`): written when the
run starts, as results arrive, and last by `_finish` — from the ``finally`` of `_run`, after
an interrupt, a bug or a normal end alike. The exit code is the verdict's first: a run with a
failed check exits 1 even when its report could not be written."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from typing import Any

from cl_validate.checks.compile import CaseKind
from cl_validate.checks.fallback_kernels import schedule_text
from cl_validate.checks.judge import declaring_line
from cl_validate.checks.registry import case_check, names
from cl_validate.checks.verdict import CaseResult, CheckResult, Status
from cl_validate.cli.common import (
    DEFAULT_PATH,
    add_paths,
    add_patterns,
    expand,
    measurer,
    select,
)
from cl_validate.errors import ExitCode, UsageError
from cl_validate.measurements.kinds import SkipKind
from cl_validate.measurements.sources import off_pins, off_pins_line
from cl_validate.paths import display_path
from cl_validate.report.annotations import emit_annotations
from cl_validate.report.console import one_line, progress_line, summary_table
from cl_validate.report.ledger import console_ledger
from cl_validate.report.markdown import append_step_summary
from cl_validate.report.outputs import RunReports
from cl_validate.spec import CaseSpec, load_cases
from cl_validate.spec.options import (
    RunOptions,
    add_to_argparse,
    check_target_names,
    run_options,
    selected_targets,
)
from cl_validate.suite.driver import SuiteStats, run_suite
from cl_validate.suite.pool import WorkerPool
from cl_validate.suite.shard import shard_cases
from cl_validate.suite.signals import SignalGuard

HELP = "compile and check cases, write JUnit"


def configure(parser: argparse.ArgumentParser) -> None:
    add_paths(parser)
    parser.add_argument("--junit", metavar="FILE", help="write a JUnit XML report to FILE (an "
                        "existing FILE must be a JUnit report, or empty)")
    parser.add_argument("--markdown", metavar="FILE", help="write a Markdown report to FILE: "
                        "tables, why each failure failed, kernel-chain charts (GitHub renders "
                        "it; an existing FILE must be a report cl_validate wrote, or empty)")
    parser.add_argument("--trend-json", metavar="FILE", help="write the figures of every case "
                        "x target to FILE as JSON trend tools read (github-action-benchmark's "
                        "customSmallerIsBetter: a list of {name, unit, value, extra})")
    add_patterns(parser)
    add_to_argparse(parser)


def main(args: argparse.Namespace) -> ExitCode:
    # Report paths that cannot be written, or would replace what is not a report, fail now,
    # not after the compiles.
    reports = RunReports(args.junit, args.markdown, args.trend_json)
    try:
        cases, options = _plan(args)
    except BaseException:  # nothing ran: no report, and none of an earlier run left standing
        reports.discard()
        raise
    if not cases:  # more shards than cases: still a (empty) report for `merge`
        print(f"shard {args.shard[0]}/{args.shard[1]}: no cases to run")
        problems = reports.final([])
        _say_unwritten(problems)
        return ExitCode.REPORT_NOT_WRITTEN if problems else ExitCode.OK
    return _run(cases, options, reports)


def _plan(args: argparse.Namespace) -> tuple[list[CaseSpec], RunOptions]:
    """The cases this run (this shard) checks, and its options; `UsageError` for anything a
    user must fix before a run can start."""
    cases = select(expand(load_cases(args.paths or [DEFAULT_PATH])), args.patterns)
    options = run_options(vars(args).get)
    check_target_names(cases, options)
    if args.shard:  # this CI job's share; every shard job computes the same split
        cases = shard_cases(cases, args.shard, args.shard_timings, options.targets)
        if not cases:
            return [], options
    if not any(selected_targets(c, options) for c in cases):
        raise UsageError("no case runs on the selected targets",
                         hint="check the cases' targets = [...] against --target")
    return cases, options


def _run(cases: Sequence[CaseSpec], options: RunOptions, reports: RunReports) -> ExitCode:
    """Run the cases, with the reports written first (every case × check not finished), as
    each result arrives, and — whatever ends the run — last (`_finish`)."""
    total = sum(len(selected_targets(c, options)) for c in cases)
    results: list[CaseResult] = []
    off = off_pins_line(off_pins())
    if off:  # once, before the first result: every count below was measured under these
        print(f"cl-validate: warning: {off}", flush=True)

    def pending(done: Sequence[CaseResult]) -> list[CaseResult]:
        return _in_order(cases, options, [*done, *_not_run(cases, options, done, UNFINISHED)])

    def on_result(r: CaseResult) -> None:
        results.append(r)
        print(progress_line(r, len(results), total), flush=True)
        reports.progress(results, pending)

    interrupts = _Interrupts()
    stopped: str | None = None  # why the run ended before every case finished
    stats = SuiteStats()
    problems: list[str] = []
    refused = False
    guard: SignalGuard | None = None
    interrupts.install()
    try:
        try:
            reports.start(pending)
            # This process ends whatever a dead zygote's tree leaves behind (reap_orphans).
            # The zygote starts only when a case is not answered by the cache.
            m = measurer(options, reap_orphans=True)
            # A signal from a case's processes fails that case (`WorkerPool.hostile_signal`);
            # one from outside interrupts the run, through `interrupts`.
            guard = SignalGuard(m.hostile_signal if isinstance(m, WorkerPool)
                                else _ignore_signal)
            try:
                with guard:
                    stats = run_suite(cases, options, on_result, m)
                interrupts.armed = False  # from here on a signal waits for the report
            finally:
                interrupts.armed = False
                m.shutdown()
        except KeyboardInterrupt as exc:
            if guard is not None and guard.last is not None:  # SIGHUP, SIGQUIT, ...
                interrupts.first = guard.last.name
            stopped = f"run interrupted ({interrupts.first or exc or 'SIGINT'})"
        except BaseException as exc:  # a bug: still this run's report
            interrupts.armed = False
            stopped = "run stopped: " + (one_line(str(exc)) or type(exc).__name__)
            # --require-device: exit 2 before anything ran; as for any usage error, no report
            refused = isinstance(exc, UsageError) and not results
            raise
    finally:
        if refused:
            reports.discard()
        else:
            problems = _finish(cases, options, reports, results, stopped)
        interrupts.restore()
    if stopped is not None:
        results = [*results, *_not_run(cases, options, results, stopped)]
    _print_results(_in_order(cases, options, results), stats, options, reports)
    if interrupts.later:
        print(f"cl-validate: {', '.join(interrupts.later)} while finishing: the workers were "
              "ended and the report written first", file=sys.stderr)
    if stopped is not None:
        print(f"cl-validate: interrupted ({interrupts.first or 'SIGINT'}); unfinished cases "
              "are reported as not run", file=sys.stderr)
    _say_unwritten(problems)
    if stopped is not None:
        return ExitCode.INTERRUPTED
    results = _in_order(cases, options, results)
    unusable = _unusable(results)
    if unusable and len(unusable) == len({r.case.name for r in results}):
        for message in unusable.values():
            print(f"cl-validate: error: {message}", file=sys.stderr)
        print("cl-validate: error: no case could be run: every case file above is unusable",
              file=sys.stderr)
        return ExitCode.USAGE_ERROR
    if any(not r for r in results):
        return ExitCode.CHECK_FAILED  # whether or not the report was written: the verdict
    return ExitCode.REPORT_NOT_WRITTEN if problems else ExitCode.OK


def _finish(cases: Sequence[CaseSpec], options: RunOptions, reports: RunReports,
            results: Sequence[CaseResult], stopped: str | None) -> list[str]:
    """Write the run's final report: every result, and — when the run ended early
    (`stopped` says why) — every case × target that did not finish, marked not run. The one
    place a run's report is completed: called on every way out of `_run`. Returns a line per
    report that could not be written."""
    rest = _not_run(cases, options, results, stopped) if stopped is not None else []
    return reports.final(_in_order(cases, options, [*results, *rest]))


def _in_order(cases: Sequence[CaseSpec], options: RunOptions,
              results: Sequence[CaseResult]) -> list[CaseResult]:
    """`results` in the order of the cases, each case's targets in its own order."""
    order = {c.label: i for i, c in enumerate(cases)}
    return sorted(results, key=lambda r: (order[r.case.label], selected_targets(
        r.case, options).index(r.target)))


def _print_results(results: Sequence[CaseResult], stats: SuiteStats, options: RunOptions,
                   reports: RunReports) -> None:
    """The kernel lists of device targets, profiles, the summary table and ledger, where
    the reports went, and GitHub's summary and annotations."""
    for r in results:  # what a device target compiled to, read where it cannot run
        if r.target != "llvm" and r.kernels is not None:
            rules = f"\n{schedule_text(r.kernels)}" if r.kernels.schedule_counts() else ""
            print(f"\n{r.case.label} [{r.target}] kernel list ({len(r.kernels)} kernels, "
                  f">> = layout transform):\n{r.kernels.render()}{rules}")
    for r in results:
        if r.profile is not None and r.kernels is not None:
            print(f"\n{r.case.label} [{r.target}] {r.profile.report(r.kernels)}")
    print(summary_table(results))
    print(console_ledger(results))
    if stats.reused:
        print(f"cache: {stats.reused} of {stats.judged} case x target measurements reused "
              f"from {options.cache_dir}")
    for label, why in stats.not_kept:  # the reason may quote the model's command lines
        print(one_line(f"cache: {label} not kept for the next run: {why} (hint: it is "
                       "measured again each run; read its data from Python, or in the "
                       "case's own processes)"))
    for what, path in reports.written():
        print(f"{what}: {display_path(path)}")
    _github_outputs(results)


def _say_unwritten(problems: Sequence[str]) -> None:
    for line in problems:
        print(f"cl-validate: error: {line}", file=sys.stderr)


def _unusable(results: Sequence[CaseResult]) -> dict[str, str]:
    """Case name → its one-line error, for cases whose model could not be used in any run
    (the factory, its module, a [layout_overrides] path...: a `CaseFileError` found in the
    case process)."""
    errors: dict[str, dict[str, str]] = {}
    for r in results:
        c = r.check(case_check().name)
        errors.setdefault(r.case.name, {})[f"{r.case.label} {r.target}"] = (
            c.message if c.status is Status.ERROR and c.kind == CaseKind.CASE_FILE_ERROR else "")
    return {name: next(iter(by_target.values())) for name, by_target in errors.items()
            if all(by_target.values())}


def _github_outputs(results: Sequence[CaseResult]) -> None:
    """Under GitHub Actions: the Markdown report into the job summary, and an annotation on
    the case-file line of every failed check. No-ops anywhere else."""
    try:
        append_step_summary(results)
    except OSError as exc:  # the summary is a courtesy; the verdict and JUnit stand without it
        print(f"cl-validate: warning: cannot append to $GITHUB_STEP_SUMMARY: {exc}",
              file=sys.stderr)
    emit_annotations(results, sys.stdout)


class _Interrupts:
    """SIGINT and SIGTERM raise `KeyboardInterrupt` (named after the signal) in the run, once.

    Only the first one raises, and only while `armed` (the run is going): one that follows —
    a second Ctrl-C 50 ms later, a CI runner's SIGTERM after its SIGINT — or one that comes
    once the run is over is noted in `later`, not raised: it would otherwise land in the
    middle of ending the workers or writing the report, and cost the report. The handler
    disarms itself as it raises, so no moment is left in which a second one could raise."""

    def __init__(self) -> None:
        self.armed = True
        self.first: str | None = None
        self.later: list[str] = []
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _on_signal(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if self.armed:
            self.armed = False
            self.first = name
            raise KeyboardInterrupt(name)
        self.later.append(name)  # nothing printed here: it could cut into a write to stderr


#: What the reports say of a case × target while the run is still going (or if it never ends
#: normally: a run killed with SIGKILL leaves that report).
UNFINISHED = "not finished when this report was written"


def _ignore_signal(signo: signal.Signals, sender: int, chain: list[int]) -> None:
    """In this process (--no-isolation) a case's code is this process: nothing to fail."""


def _not_run(cases: Sequence[CaseSpec], options: RunOptions, done: Sequence[CaseResult],
             why: str) -> list[CaseResult]:
    """Placeholders for every case × target that did not finish, so the report is complete."""
    finished = {(r.case.label, r.target) for r in done}
    message = why if why == UNFINISHED else f"not run: {why}"
    out: list[CaseResult] = []
    for c in cases:
        for t in selected_targets(c, options):
            if (c.label, t) not in finished:
                out.append(CaseResult(c, t, [
                    CheckResult(ch, Status.SKIPPED, message, kind=SkipKind.NOT_RUN,
                                line=declaring_line(c, ch))
                    for ch in names()]))
    return out
