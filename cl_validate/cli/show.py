"""``cl-validate show CASE``: a case's stages, transform counts and fused kernel list, or the
IR after one stage (``--stage``), or what a stage changed (``--diff``). Compiles in this
process (no case process): it is for a person looking at one case."""

from __future__ import annotations

import argparse
import difflib
from dataclasses import replace

from cl_validate.checks.fallback_kernels import schedule_text
from cl_validate.checks.layout_transform_bytes import transform_costs
from cl_validate.checks.layout_transforms import NAME as TRANSFORMS
from cl_validate.cli.common import (
    DEFAULT_PATH,
    add_target,
    case_target,
    find_case,
    pick_variant,
)
from cl_validate.errors import ExitCode, UsageError
from cl_validate.paths import display_path
from cl_validate.spec.options import add_to_argparse, run_options

HELP = "stages, transform counts and kernel list of one case"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("case", metavar="CASE", help="a case file, or a case name under "
                        f"{DEFAULT_PATH}/")
    add_target(parser, "target to compile for (default: llvm)", multi=False)
    parser.add_argument("--variant", metavar="NAME", help="one of the case's [[variants]] "
                        "(default: the case's own shapes)")
    parser.add_argument("--stage", metavar="S", help="print the IR after stage S")
    parser.add_argument("--diff", nargs=2, metavar=("S1", "S2"),
                        help="print a unified diff of the IR after stage S1 and after stage S2")
    parser.add_argument("--bisect", action="store_true",
                        help="build the IR after every stage for this machine's CPU, run it on "
                        "the case's inputs and print each stage's error against PyTorch, "
                        "by the case's tolerance")
    add_to_argparse(parser, only=("profile", "profile_repeats"))


def main(args: argparse.Namespace) -> ExitCode:
    case = pick_variant(find_case(args.case), args.variant)
    target = case_target(case, args.target)
    # lazy: torch and TVM (compiling the case here, in this process)
    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.analysis.stage_counts import stage_counts
    from cl_validate.session.case_session import CaseSession
    from cl_validate.session.kernel_timer import profile_case

    options = replace(run_options(vars(args).get, in_process_default=True), targets=(target,))
    session = CaseSession(case, options)
    session.model  # noqa: B018 - a case file the model contradicts: exit 2, before compiling
    compiled = session.compiled(target, build=bool(args.profile))
    names = [s.name for s in compiled.stages]
    for wanted in [args.stage] if args.stage else list(args.diff or []):
        if wanted not in names:
            raise UsageError(f"no stage '{wanted}'", hint="stages: " + ", ".join(names))
    if args.stage:
        print(compiled.stage(args.stage).mod.script(show_meta=False))
        return ExitCode.OK
    if args.bisect:
        result = session.bisect(target)
        print(f"{case.label} [{target}]  pipeline {case.pipeline}  ({display_path(case.path)})\n")
        print(result.render())
        skipped = any(not r.ran for r in result.stages)
        print("\n" + (result.summary() if result.first_break else
                      f"every stage's IR{' that ran' if skipped else ''} is within tolerance"))
        return ExitCode.OK
    if args.diff:
        a, b = (compiled.stage(n).mod.script(show_meta=False).splitlines() for n in args.diff)
        diff = difflib.unified_diff(a, b, fromfile=args.diff[0], tofile=args.diff[1],
                                    lineterm="")
        print("\n".join(diff) or f"no difference between {args.diff[0]} and {args.diff[1]}")
        return ExitCode.OK
    kernels = read_kernel_list(compiled, case.max_sizes())
    counts = stage_counts(compiled, kernels)
    budget = case.budget_for(target)
    print(f"{case.label} [{target}]  pipeline {case.pipeline}  ({display_path(case.path)})")
    print("\nstage            runtime  weight   seconds")
    for c, s in zip(counts, compiled.stages, strict=True):
        print(f"{c.stage:<16} {c.runtime:>7}  {c.weight:>6}   {s.seconds:7.2f}")
    for kept in [*compiled.kept_layouts, *compiled.attention_left, *compiled.float_left,
                 *compiled.capped]:
        print(f"note: {kept}")
    print(f"\nkernel list: {len(kernels)} kernels, {len(kernels.runtime_transforms)} runtime "
          f"layout transforms (budget {budget.get(TRANSFORMS)}), "
          f"{len(kernels.weight_transforms)} weight transforms; >> marks a transform")
    profile, skip = None, None
    if args.profile:
        profile, skip = profile_case(case, compiled, session.front.params, target, kernels,
                                     options)
    print(kernels.render(times=profile.times() if profile else None))
    print(f"\n{transform_costs(kernels)}")
    if kernels.schedule_counts():
        print(f"\n{schedule_text(kernels)}")
    if profile is not None:
        print(f"\n{profile.report(kernels)}")
    elif skip is not None:
        print(f"\n{skip.reason}")
    return ExitCode.OK
