"""``cl-validate show CASE``: a case's stages, transform counts and fused kernel list, or the
IR after one stage (``--stage``), or what a stage changed (``--diff``). Compiles in this
process (no worker): it is for a person looking at one case."""

from __future__ import annotations

import argparse
import difflib
from typing import Any

from cl_validate.checks.cost import schedule_text, transform_costs
from cl_validate.cli.common import (
    DEFAULT_PATH,
    add_target,
    case_target,
    find_case,
    pick_variant,
)
from cl_validate.errors import ExitCode, UsageError
from cl_validate.paths import display_path
from cl_validate.run.options import RunOptions, positive_int
from cl_validate.spec import CaseSpec

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
    parser.add_argument("--profile", action="store_true", help="also build and run the "
                        "program, timing every kernel on the target's device")
    parser.add_argument("--profile-repeats", type=positive_int, default=5, metavar="N",
                        help="timed runs under --profile (default: 5)")


def main(args: argparse.Namespace) -> ExitCode:
    case = pick_variant(find_case(args.case), args.variant)
    target = case_target(case, args.target)
    # lazy: torch and TVM (compiling the case here, in this process)
    from cl_validate.analysis.kernels import kernel_list
    from cl_validate.analysis.stages import stage_counts
    from cl_validate.compile.build import compile_case
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.run.execute import make_inputs, torch_inputs
    from cl_validate.run.measure import validated_model
    from cl_validate.run.profile import profile_case

    model = validated_model(case, RunOptions(targets=(target,)))
    front = export_and_import(model, case, torch_inputs(case, make_inputs(case)))
    compiled = compile_case(front, case, target, build=args.profile)
    names = [s.name for s in compiled.stages]
    for wanted in [args.stage] if args.stage else list(args.diff or []):
        if wanted not in names:
            raise UsageError(f"no stage '{wanted}'", hint="stages: " + ", ".join(names))
    if args.stage:
        print(compiled.stage(args.stage).mod.script(show_meta=False))
        return ExitCode.OK
    if args.bisect:
        return _bisect(case, target, model, front, compiled)
    if args.diff:
        a, b = (compiled.stage(n).mod.script(show_meta=False).splitlines() for n in args.diff)
        diff = difflib.unified_diff(a, b, fromfile=args.diff[0], tofile=args.diff[1],
                                    lineterm="")
        print("\n".join(diff) or f"no difference between {args.diff[0]} and {args.diff[1]}")
        return ExitCode.OK
    kernels = kernel_list(compiled, case.max_sizes())
    counts = stage_counts(compiled, kernels)
    budget = case.budget_for(target)
    print(f"{case.label} [{target}]  pipeline {case.pipeline}  ({display_path(case.path)})")
    print("\nstage            runtime  weight   seconds")
    for c, s in zip(counts, compiled.stages, strict=True):
        print(f"{c.stage:<16} {c.runtime:>7}  {c.weight:>6}   {s.seconds:7.2f}")
    print(f"\nkernel list: {len(kernels)} kernels, {len(kernels.runtime_transforms)} runtime "
          f"layout transforms (budget {budget.layout_transforms}), "
          f"{len(kernels.weight_transforms)} weight transforms; >> marks a transform")
    profile, skip = None, None
    if args.profile:
        options = RunOptions(targets=(target,), profile=True,
                             profile_repeats=args.profile_repeats)
        profile, skip = profile_case(case, compiled, front.params, target, kernels, options)
    print(kernels.render(times=profile.times() if profile else None))
    print(f"\n{transform_costs(kernels)}")
    if kernels.schedule_counts():
        print(f"\n{schedule_text(kernels)}")
    if profile is not None:
        print(f"\n{profile.report(kernels)}")
    elif skip is not None:
        print(f"\n{skip.reason}")
    return ExitCode.OK


def _bisect(case: CaseSpec, target: str, model: Any, front: Any, compiled: Any) -> ExitCode:
    """Every stage of `target`'s pipeline run on this machine's CPU on the case's first
    sample, judged by `target`'s tolerance."""
    # lazy: torch and TVM (running the stages here, in this process)
    from cl_validate.run.bisect import bisect
    from cl_validate.run.execute import (
        float64_model,
        make_inputs,
        run_torch,
        run_torch64,
        torch_inputs,
    )

    sample = case.samples()[0]
    arrays = make_inputs(case, sample.sizes, sample.seed)
    expected = run_torch(model, torch_inputs(case, arrays))
    ref64 = (run_torch64(float64_model(model), torch_inputs(case, arrays))
             if case.needs_float64(target) else None)
    result = bisect(case, target, compiled, front, inputs=arrays, expected=expected,
                    reference64=ref64, label=sample.label, stop_at_break=False)
    print(f"{case.label} [{target}]  pipeline {case.pipeline}  ({display_path(case.path)})\n")
    print(result.render())
    skipped = any(not r.ran for r in result.stages)
    print("\n" + (result.summary() if result.first_break else
                  f"every stage's IR{' that ran' if skipped else ''} is within tolerance"))
    return ExitCode.OK
