"""``cl-validate run [PATH ...]``: compile and check cases, print the verdicts, write reports."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence

from cl_validate.checks.compiled import CaseKind
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
from cl_validate.paths import display_path, report_file
from cl_validate.report.annotations import emit_annotations
from cl_validate.report.console import progress_line, summary_table
from cl_validate.report.junit import write_junit
from cl_validate.report.ledger import console_ledger
from cl_validate.report.markdown import append_step_summary, write_markdown
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
    parser.add_argument("--junit", metavar="FILE", help="write a JUnit XML report to FILE")
    parser.add_argument("--markdown", metavar="FILE", help="write a Markdown report to FILE: "
                        "tables, why each failure failed, kernel-chain charts (GitHub renders "
                        "it)")
    add_patterns(parser)
    add_to_argparse(parser)


def main(args: argparse.Namespace) -> ExitCode:
    if args.junit:  # a report path that cannot be written fails now, not after the compiles
        report_file(args.junit, "--junit")
    if args.markdown:
        report_file(args.markdown, "--markdown")
    cases = select(expand(load_cases(args.paths or [DEFAULT_PATH])), args.patterns)
    options = run_options(vars(args).get)
    check_target_names(cases, options)
    if args.shard:  # this CI job's share; every shard job computes the same split
        cases = shard_cases(cases, args.shard, args.shard_timings, options.targets)
        if not cases:  # more shards than cases: still a (empty) report for `merge`
            print(f"shard {args.shard[0]}/{args.shard[1]}: no cases to run")
            if args.junit:
                write_junit([], args.junit)
            return ExitCode.OK
    total = sum(len(selected_targets(c, options)) for c in cases)
    if total == 0:
        raise UsageError("no case runs on the selected targets",
                         hint="check the cases' targets = [...] against --target")
    results: list[CaseResult] = []

    def on_result(r: CaseResult) -> None:
        results.append(r)
        print(progress_line(r, len(results), total), flush=True)

    interrupted: str | None = None
    stats = SuiteStats()
    # This process ends whatever a dead zygote's tree leaves behind (reap_orphans). The zygote
    # starts only when a case is not answered by the cache.
    m = measurer(options, reap_orphans=True)
    # A signal from a case's processes fails that case (`WorkerPool.hostile_signal`); one
    # from outside interrupts the run, through these handlers.
    guard = SignalGuard(m.hostile_signal if isinstance(m, WorkerPool) else _ignore_signal)
    previous = {s: signal.signal(s, _raise_interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with guard:
            stats = run_suite(cases, options, on_result, m)
    except KeyboardInterrupt as exc:
        interrupted = (guard.last.name if guard.last is not None else str(exc)) or "SIGINT"
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        m.shutdown()
    if interrupted:
        results.extend(_not_run(cases, options, results, interrupted))
    order = {c.label: i for i, c in enumerate(cases)}
    results.sort(key=lambda r: (order[r.case.label], selected_targets(
        r.case, options).index(r.target)))
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
    if args.junit:
        path = write_junit(results, args.junit)
        print(f"JUnit report: {display_path(path)}")
    if args.markdown:
        print(f"Markdown report: {display_path(write_markdown(results, args.markdown))}")
    _github_outputs(results)
    if interrupted:
        print(f"cl-validate: interrupted ({interrupted}); unfinished cases are reported as not "
              "run", file=sys.stderr)
        return ExitCode.INTERRUPTED
    unusable = _unusable(results)
    if unusable and len(unusable) == len({r.case.name for r in results}):
        for message in unusable.values():
            print(f"cl-validate: error: {message}", file=sys.stderr)
        print("cl-validate: error: no case could be run: every case file above is unusable",
              file=sys.stderr)
        return ExitCode.USAGE_ERROR
    return ExitCode.CHECK_FAILED if any(not r for r in results) else ExitCode.OK


def _unusable(results: Sequence[CaseResult]) -> dict[str, str]:
    """Case name → its one-line error, for cases whose model could not be used in any run
    (the factory, its module, a [layout_overrides] path...: a `CaseFileError` found in the
    worker)."""
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


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _ignore_signal(signo: signal.Signals, sender: int, chain: list[int]) -> None:
    """In this process (--no-isolation) a case's code is this process: nothing to fail."""


def _not_run(cases: Sequence[CaseSpec], options: RunOptions, done: Sequence[CaseResult],
             why: str) -> list[CaseResult]:
    """Placeholders for every case × target that did not finish, so the report is complete."""
    finished = {(r.case.label, r.target) for r in done}
    out: list[CaseResult] = []
    for c in cases:
        for t in selected_targets(c, options):
            if (c.label, t) not in finished:
                out.append(CaseResult(c, t, [
                    CheckResult(ch, Status.SKIPPED, f"not run: run interrupted ({why})",
                                kind=SkipKind.NOT_RUN, line=declaring_line(c, ch))
                    for ch in names()]))
    return out
