"""What several subcommands share: the default case folder, finding a case, selecting cases."""

from __future__ import annotations

import argparse
import fnmatch
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from cl_validate.checks.verdict import CaseResult
from cl_validate.errors import UsageError
from cl_validate.paths import display_path
from cl_validate.spec import CaseSpec, load_case, load_cases
from cl_validate.spec.config import StalePolicy
from cl_validate.spec.model import DEFAULT_CASES
from cl_validate.spec.options import (
    RunOptions,
    check_target_names,
    run_options,
    selected_targets,
)
from cl_validate.suite.driver import Measurer, run_suite
from cl_validate.suite.pool import WorkerPool

DEFAULT_PATH = DEFAULT_CASES


def add_paths(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help=f"case files or folders of them (default: {DEFAULT_PATH})")


def add_patterns(p: argparse.ArgumentParser) -> None:
    """``-k PATTERN``: select cases by name (`select`)."""
    p.add_argument("-k", dest="patterns", action="append", metavar="PATTERN",
                   help="only cases whose name contains PATTERN (glob wildcards allowed)")


def add_target(p: argparse.ArgumentParser, help: str, *, multi: bool) -> None:
    """``--target``: llvm, cuda or a declared target (checked against the cases)."""
    p.add_argument("--target", dest="targets" if multi else "target", metavar="TARGET",
                   action="append" if multi else "store", help=help)


def expand(cases: Sequence[CaseSpec]) -> list[CaseSpec]:
    """Every run of the cases: each case, then its [[variants]]."""
    return [run for case in cases for run in case.expand()]


def select(cases: list[CaseSpec], patterns: Sequence[str] | None) -> list[CaseSpec]:
    """The runs whose name contains a pattern (or matches it, with glob wildcards): the case's
    name selects all its variants, ``resnet50[b8]`` one of them."""
    if not patterns:
        return cases

    def hit(case: CaseSpec, pat: str) -> bool:
        if any(ch in pat for ch in "*?"):  # a glob, over the name and the run's label
            return fnmatch.fnmatchcase(case.name, pat) or fnmatch.fnmatchcase(case.label, pat)
        if "[" in pat:  # one variant: resnet50[b8]
            return pat == case.label
        return pat in case.name

    chosen = [c for c in cases if any(hit(c, p) for p in patterns)]
    if not chosen:
        raise UsageError(f"-k {' '.join(patterns)} matches no case",
                         hint="cl-validate list shows the case names")
    return chosen


def case_target(case: CaseSpec, target: str | None) -> str:
    """The one target a single-case command works on: `target` (a target of the case, or
    built in), default llvm."""
    target = target or "llvm"
    try:
        case.target_def(target)
    except KeyError:
        raise UsageError(f"case '{case.name}' has no target '{target}'",
                         hint="its targets: " + ", ".join(case.targets)) from None
    return target


def find_case(ref: str) -> CaseSpec:
    """A case by file path, or by name under ``model_cases/``."""
    p = Path(ref)
    if p.suffix == ".toml" or p.exists():
        return load_case(p)
    for case in load_cases([DEFAULT_PATH]) if Path(DEFAULT_PATH).is_dir() else []:
        if case.name == ref:
            return case
    raise UsageError(f"no case named '{ref}'", hint=f"pass a .toml path or a case name under "
                     f"{DEFAULT_PATH}/ (cl-validate list)")


def pick_variant(case: CaseSpec, name: str | None) -> CaseSpec:
    """The run of `case` a command works on: itself, or its variant `name`."""
    if name is None:
        return case
    for run in case.expand()[1:]:
        if run.variant is not None and run.variant.name == name:
            return run
    declared = ", ".join(v.name for v in case.variants) or "none"
    raise UsageError(f"case '{case.name}' has no variant '{name}'",
                     file=display_path(case.path), line=case.line_of("variants"),
                     hint=f"its [[variants]]: {declared}")


def measurer(options: RunOptions, *, reap_orphans: bool = False) -> Measurer:
    """Worker processes, or this process with ``--no-isolation``."""
    if options.isolate:
        return WorkerPool(options, reap_orphans=reap_orphans)
    # lazy: torch and TVM (cases are measured in this process)
    from cl_validate.session.in_process import InProcess

    return InProcess(options)


def measure_static(cases: Sequence[CaseSpec], args: argparse.Namespace,
                   say: Callable[[CaseResult], str], *, cached: bool = False,
                   tidy: Callable[[str], str] = str) -> list[CaseResult]:
    """Compile every case on its selected targets (the run options of `args`), static checks
    only, printing a line per result (`say` for one that compiled, else its error as `tidy`
    words it), and return the results. Without `cached` the cache is neither read nor
    written."""
    options = run_options(vars(args).get, stale_budget=StalePolicy.WARN, static_only=True)
    if not cached:
        options = replace(options, cache_dir=None)
    check_target_names(cases, options)
    if not any(selected_targets(c, options) for c in cases):
        raise UsageError("no case runs on the selected targets",
                         hint="check the cases' targets = [...] against --target")
    results: list[CaseResult] = []

    def on_result(r: CaseResult) -> None:
        results.append(r)
        what = say(r) if r.kernels is not None else f"not measured: {tidy(r.checks[0].message)}"
        print(f"  {r.case.label} [{r.target}]: {what}", flush=True)

    m = measurer(options)
    try:
        run_suite(cases, options, on_result, m)
    finally:
        m.shutdown()
    return results
