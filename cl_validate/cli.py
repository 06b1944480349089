"""``cl-validate run | show | list`` — exit codes in `cl_validate.errors.ExitCode`."""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import signal
import sys
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path

from cl_validate.errors import CompileStageError, ExitCode, UsageError
from cl_validate.options import add_to_argparse, run_options
from cl_validate.spec import KNOWN_TARGETS, CaseSpec, display_path, load_case, load_cases
from cl_validate.verdict import CaseResult

DEFAULT_PATH = "model_cases"


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so every error prints alike."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message, hint=f"see '{self.prog} --help'")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="cl-validate", description="Gate channels-last TVM compiles of PyTorch "
                "models: layout, runtime layout transforms, kernels and numerics.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="compile and check cases, write JUnit")
    run.add_argument("paths", nargs="*", metavar="PATH",
                     help=f"case files or folders of them (default: {DEFAULT_PATH})")
    run.add_argument("--junit", metavar="FILE", help="write a JUnit XML report to FILE")
    run.add_argument("--markdown", metavar="FILE", help="write a Markdown report to FILE: tables, "
                     "why each failure failed, kernel-chain charts (GitHub renders it)")
    run.add_argument("-k", dest="patterns", action="append", metavar="PATTERN",
                     help="only cases whose name contains PATTERN (glob wildcards allowed)")
    add_to_argparse(run)

    show = sub.add_parser("show", help="stages, transform counts and kernel list of one case")
    show.add_argument("case", metavar="CASE", help="a case file, or a case name under "
                      f"{DEFAULT_PATH}/")
    _add_target(show, "target to compile for (default: llvm)", multi=False)
    show.add_argument("--stage", metavar="S", help="print the IR after stage S")
    show.add_argument("--diff", nargs=2, metavar=("S1", "S2"),
                      help="print a unified diff of the IR after stage S1 and after stage S2")

    lst = sub.add_parser("list", help="list the cases found under PATHs")
    lst.add_argument("paths", nargs="*", metavar="PATH")

    for name, module in _PLUGGED.items():
        mod = importlib.import_module(module)
        mod.configure(sub.add_parser(name, help=mod.HELP, description=mod.__doc__))
    return p


#: Subcommands that live in their own module: each exposes HELP, configure(parser) and
#: main(args) -> ExitCode. Keeps this file the dispatcher, not the home of every command.
_PLUGGED: dict[str, str] = {"budget": "cl_validate.budget", "calibrate": "cl_validate.calibrate",
                            "merge": "cl_validate.report.merge"}


def _add_target(p: argparse.ArgumentParser, help: str, *, multi: bool) -> None:
    p.add_argument("--target", dest="targets" if multi else "target", choices=KNOWN_TARGETS,
                   action="append" if multi else "store", help=help)


def _select(cases: list[CaseSpec], patterns: Sequence[str] | None) -> list[CaseSpec]:
    if not patterns:
        return cases

    def hit(name: str, pat: str) -> bool:
        return fnmatch.fnmatchcase(name, pat) if any(ch in pat for ch in "*?[") else pat in name

    chosen = [c for c in cases if any(hit(c.name, p) for p in patterns)]
    if not chosen:
        raise UsageError(f"-k {' '.join(patterns)} matches no case",
                         hint="cl-validate list shows the case names")
    return chosen


def _cmd_run(args: argparse.Namespace) -> ExitCode:
    from cl_validate.cache import Cache, hint
    from cl_validate.report import progress_line, summary_table, write_junit
    from cl_validate.runner import preflight, run_suite, selected_targets

    if args.junit:  # a report path that cannot be written fails now, not after the compiles
        from cl_validate.paths import report_file

        report_file(args.junit, "--junit")
    if args.markdown:
        from cl_validate.paths import report_file

        report_file(args.markdown, "--markdown")
    cases = _select(load_cases(args.paths or [DEFAULT_PATH]), args.patterns)
    options = run_options(vars(args).get)
    if args.shard:  # this CI job's share; every shard job computes the same split
        from cl_validate.shard import shard_cases

        cases = shard_cases(cases, args.shard, args.shard_timings, options)
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

    cache = Cache(options.cache_dir) if options.cache_dir else None
    interrupted: str | None = None
    pool = None
    if options.isolate:
        from cl_validate.workers import WorkerPool

        pool = WorkerPool(options)
        # Workers import torch and TVM while this process validates the cases, unless the
        # cache will answer every case: then they would only take CPU from the validation.
        # (A wrong guess costs only that overlap: the pool starts workers when they are due.)
        if cache is None or not cache.predicts_hits([
                hint(c, t, options.static_only) for c in cases
                for t in selected_targets(c, options)]):
            pool.prestart(len(cases))
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        digests = preflight(cases, options)
        run_suite(cases, options, on_result, cache=cache, digests=digests, pool=pool)
    except KeyboardInterrupt as exc:
        interrupted = str(exc) or "SIGINT"
    finally:
        signal.signal(signal.SIGTERM, previous)
        if pool is not None:
            pool.shutdown()
    if interrupted:
        results.extend(_not_run(cases, options, results, interrupted))
    order = {c.name: i for i, c in enumerate(cases)}
    results.sort(key=lambda r: (order[r.case.name], selected_targets(
        r.case, options).index(r.target)))
    for r in results:
        if r.target == "cuda" and r.kernels is not None:
            print(f"\n{r.case.name} [cuda] kernel list ({len(r.kernels)} kernels, "
                  f">> = layout transform):\n{r.kernels.render()}")
    print(summary_table(results))
    if cache is not None and cache.hits:
        print(f"cache: {cache.hits} of {cache.hits + cache.misses} case x target measurements "
              f"reused from {cache.root}")
    if args.junit:
        path = write_junit(results, args.junit)
        print(f"JUnit report: {display_path(path)}")
    if args.markdown:
        from cl_validate.report import write_markdown

        print(f"Markdown report: {display_path(write_markdown(results, args.markdown))}")
    _github_outputs(results)
    if interrupted:
        print(f"cl-validate: interrupted ({interrupted}); unfinished cases are reported as not "
              "run", file=sys.stderr)
        return ExitCode.INTERRUPTED
    return ExitCode.CHECK_FAILED if any(not r for r in results) else ExitCode.OK


def _github_outputs(results: Sequence[CaseResult]) -> None:
    """Under GitHub Actions: the Markdown report into the job summary, and an annotation on
    the case-file line of every failed check. No-ops anywhere else."""
    from cl_validate.report import append_step_summary, emit_annotations

    try:
        append_step_summary(results)
    except OSError as exc:  # the summary is a courtesy; the verdict and JUnit stand without it
        print(f"cl-validate: warning: cannot append to $GITHUB_STEP_SUMMARY: {exc}",
              file=sys.stderr)
    emit_annotations(results, sys.stdout)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _not_run(cases: Sequence[CaseSpec], options: object, done: Sequence[CaseResult],
             why: str) -> list[CaseResult]:
    """Placeholders for every case × target that did not finish, so the report is complete."""
    from cl_validate.runner import RunOptions, selected_targets
    from cl_validate.verdict import CHECKS, CheckResult, Status

    assert isinstance(options, RunOptions)
    finished = {(r.case.name, r.target) for r in done}
    out: list[CaseResult] = []
    for c in cases:
        for t in selected_targets(c, options):
            if (c.name, t) not in finished:
                out.append(CaseResult(c, t, [CheckResult(ch, Status.SKIPPED,
                                                         f"not run: run interrupted ({why})",
                                                         kind="NotRun") for ch in CHECKS]))
    return out


def _find_case(ref: str) -> CaseSpec:
    p = Path(ref)
    if p.suffix == ".toml" or p.exists():
        return load_case(p)
    for case in load_cases([DEFAULT_PATH]) if Path(DEFAULT_PATH).is_dir() else []:
        if case.name == ref:
            return case
    raise UsageError(f"no case named '{ref}'", hint=f"pass a .toml path or a case name under "
                     f"{DEFAULT_PATH}/ (cl-validate list)")


def _cmd_show(args: argparse.Namespace) -> ExitCode:
    from cl_validate import analysis, numerics
    from cl_validate.pipeline import compile_case, export_and_import
    from cl_validate.runner import RunOptions, validated_model

    case = _find_case(args.case)
    target = args.target or "llvm"
    model = validated_model(case, RunOptions(targets=(target,)))
    front = export_and_import(model, case, numerics.torch_inputs(case, numerics.make_inputs(case)))
    compiled = compile_case(front, case, target, build=False)
    names = [s.name for s in compiled.stages]
    for wanted in [args.stage] if args.stage else list(args.diff or []):
        if wanted not in names:
            raise UsageError(f"no stage '{wanted}'", hint="stages: " + ", ".join(names))
    if args.stage:
        print(compiled.stage(args.stage).mod.script(show_meta=False))
        return ExitCode.OK
    if args.diff:
        import difflib

        a, b = (compiled.stage(n).mod.script(show_meta=False).splitlines() for n in args.diff)
        diff = difflib.unified_diff(a, b, fromfile=args.diff[0], tofile=args.diff[1],
                                    lineterm="")
        print("\n".join(diff) or f"no difference between {args.diff[0]} and {args.diff[1]}")
        return ExitCode.OK
    kernels = analysis.kernel_list(compiled)
    counts = analysis.stage_counts(compiled, kernels)
    budget = case.budget_for(target)
    print(f"{case.name} [{target}]  pipeline {case.pipeline}  ({display_path(case.path)})")
    print("\nstage            runtime  weight   seconds")
    for c, s in zip(counts, compiled.stages, strict=True):
        print(f"{c.stage:<16} {c.runtime:>7}  {c.weight:>6}   {s.seconds:7.2f}")
    print(f"\nkernel list: {len(kernels)} kernels, {len(kernels.runtime_transforms)} runtime "
          f"layout transforms (budget {budget.layout_transforms}), "
          f"{len(kernels.weight_transforms)} weight transforms; >> marks a transform")
    print(kernels.render())
    return ExitCode.OK


def _cmd_list(args: argparse.Namespace) -> ExitCode:
    cases = load_cases(args.paths or [DEFAULT_PATH])
    width = max(len(c.name) for c in cases)
    for c in cases:
        b = c.budget
        kern = f" kernels<={b.kernels}" if b.kernels is not None else ""
        print(f"{c.name:<{width}}  {','.join(c.targets):<9}  transforms<={b.layout_transforms}"
              f"{kern}  {c.model}  ({display_path(c.path)})")
    return ExitCode.OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``cl-validate`` and ``python -m cl_validate``."""
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")
    try:
        args = _parser().parse_args(argv)
        builtin = {"run": _cmd_run, "show": _cmd_show, "list": _cmd_list}
        if args.command in builtin:
            return int(builtin[args.command](args))
        return int(importlib.import_module(_PLUGGED[args.command]).main(args))
    except UsageError as exc:
        print(f"cl-validate: error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE_ERROR)
    except CompileStageError as exc:
        print(f"cl-validate: {exc}", file=sys.stderr)
        return int(ExitCode.CHECK_FAILED)
    except KeyboardInterrupt:
        print("cl-validate: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except Exception:
        traceback.print_exc()
        print("cl-validate: internal error (a bug: please report it with the traceback above)",
              file=sys.stderr)
        return int(ExitCode.INTERNAL_ERROR)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
