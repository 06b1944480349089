"""``cl-validate calibrate CASE``: measure the numerical error, propose rtol/atol with headroom.

A tolerance copied from another case is either loose enough to hide a real regression or so
tight that the next compiler change flakes. Calibrate measures instead: it compiles the case
once and runs the compiled program on several input seeds (inputs drawn from each input's
declared ``range``, default [-1, 1]; input seed ``seed + i``, so sample 0 is exactly what
``cl-validate run`` checks). Weights are bound into the program as constants at compile time,
so other weights need another compile: ``--weight-seeds M`` rebuilds the model under seeds
``seed .. seed+M-1`` and compiles once per weight seed.

The rule is `cl_validate.checks.calibration`'s (documented in
docs/how-to/tighten-budgets.md).

NaN or Inf in any output is reported and nothing is proposed: no tolerance may hide them.
``--write`` writes the proposal into the case file, keeping its comments and formatting.

A case judged against float64 (``reference = "float64"``) has nothing to tune: calibrate
reports, per sample, TVM's and eager float32's RMSE against the float64 run, their ratio and
the bound (multiplier × eager + floor), and exits 1 if a sample exceeds it. ``--write`` is
refused there: rtol/atol would be written but never judged by.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import tomlkit

from cl_validate.checks.calibration import FLOOR, HEADROOM, Observed, observe, propose
from cl_validate.checks.numerics import compare_all
from cl_validate.checks.ratchet import case_command
from cl_validate.cli.common import find_case, pick_variant
from cl_validate.errors import CompileStageError, ExitCode, UsageError
from cl_validate.measurements.error_stats import ErrorStats
from cl_validate.paths import display_path
from cl_validate.spec import CaseSpec
from cl_validate.spec.casefile import (
    CaseText,
    diff_lines,
    set_section,
    tidy,
    toml_number,
    written_to,
)
from cl_validate.spec.options import RunOptions, positive_int

if TYPE_CHECKING:  # torch and TVM: imported where calibrate runs the case
    from cl_validate.session.case_session import CaseSession

HELP = "measure numerical error over several seeds and propose rtol/atol"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = (
        "Compile CASE once, run it on N input seeds (and M weight seeds, one compile each),\n"
        "report max/mean abs and rel error per sample, and propose rtol/atol: 4x the observed\n"
        "error, rounded up to 1/2/5 x 10^k, at least 1e-6. --write puts them in the case file.")
    parser.add_argument("case", metavar="CASE", help="a case file, or a case name under "
                        "model_cases/")
    parser.add_argument("--seeds", type=positive_int, default=5, metavar="N",
                        help="input seeds per compile (default 5)")
    parser.add_argument("--weight-seeds", type=positive_int, default=1, metavar="M",
                        help="weight seeds, one compile each (default 1: the case's seed)")
    parser.add_argument("--target", default="llvm", metavar="TARGET",
                        help="target to run on (default llvm; its device must be on this "
                        "machine: cuda needs a GPU)")
    parser.add_argument("--headroom", type=float, default=HEADROOM, metavar="X",
                        help=f"multiply the observed error by X (default {HEADROOM:g})")
    parser.add_argument("--variant", metavar="NAME",
                        help="calibrate one of the case's [[variants]] (and write its "
                        "tolerance); default: the case's own shapes")
    parser.add_argument("--write", action="store_true",
                        help="write the proposal into the case file's tolerance")


def main(args: argparse.Namespace) -> ExitCode:
    case = pick_variant(find_case(args.case), args.variant)
    # lazy: torch and TVM (calibrate compiles and runs the case here, in this process)
    from cl_validate.compile.tvm_targets import device_available
    from cl_validate.session.case_session import CaseSession

    if args.target not in case.targets:
        raise UsageError(f"case '{case.name}' does not run on {args.target}",
                         file=display_path(case.path), line=case.line_of("targets"))
    if not args.headroom >= 1:
        raise UsageError(f"--headroom must be >= 1, got {args.headroom:g}")
    tdef = case.target_def(args.target)
    if tdef.foreign() or not device_available(tdef.device):
        raise UsageError(f"calibrate runs the numerics on this machine: no {args.target} "
                         "device here", hint="calibrate on llvm, or on a machine with the "
                         "target's device (calibrate does not run through RPC)")
    current, line = case.tolerance_for(args.target, None)
    if current.float64 and args.write:
        raise UsageError(f"case '{case.name}' is judged against float64 on {args.target}: "
                         "rtol/atol would be written but never used",
                         file=display_path(case.path), line=line,
                         hint="the float64 rule needs no tuning; calibrate without --write "
                         "to see its ratios, or set reference = \"float32\" to judge by "
                         "rtol/atol")
    session = CaseSession(case, RunOptions(targets=(args.target,), isolate=False))
    session.model  # noqa: B018 - a bad factory: exit 2, before anything is compiled
    try:
        pairs, by_float64 = _run(session, args.target, args.seeds, args.weight_seeds)
    except _Failed as exc:
        print(f"cl-validate: calibrate: {exc}")
        return ExitCode.CHECK_FAILED
    obs = observe(pairs)
    print(report(case, args.target, obs, args.seeds, args.weight_seeds))
    if obs.nonfinite:
        print(f"\n{obs.nonfinite} non-finite values (NaN/Inf): no tolerance proposed — fix the "
              "model or its input ranges first")
        return ExitCode.CHECK_FAILED
    if by_float64:
        print()
        print(report_float64(case, args.target, by_float64))
        if current.float64:
            return ExitCode.OK if all(st for _, _, st in by_float64) else ExitCode.CHECK_FAILED
    rtol, atol = propose(obs, args.headroom)
    print(f"\nproposed ({args.headroom:g}x the observed error, rounded up to 1/2/5 x 10^k, at "
          f"least {FLOOR:g}): rtol = {toml_number(rtol)}, atol = {toml_number(atol)}")
    print(f"current  ({display_path(case.path)}:{line or '-'}): rtol = "
          f"{toml_number(current.rtol)}, atol = {toml_number(current.atol)}")
    if any(o.tolerance or args.target in o.target_tolerance for o in case.outputs):
        print("note: [[outputs]] tolerances take precedence over the case tolerance and are "
              "not changed")
    if args.write:
        write(case, args.target, rtol, atol)
    return ExitCode.OK


class _Failed(Exception):
    """The case does not compile or run: calibrate has nothing to measure."""


Pairs = list[tuple[int, int, int, np.ndarray, np.ndarray]]
Float64Stats = list[tuple[int, int, ErrorStats]]


def _run(first: CaseSession, target: str, seeds: int, weight_seeds: int
         ) -> tuple[Pairs, Float64Stats]:
    """(weight seed, input seed, output, TVM, eager float32) for every output of every
    sample; and where an output is judged against float64, its figures by that rule. `first`
    is the case's session (weights from its seed); each other weight seed gets its own."""
    # lazy: torch and TVM (compiling and running the case here, in this process)
    from cl_validate.session.case_session import CaseSession
    from cl_validate.session.inputs import make_inputs

    pairs: Pairs = []
    by_float64: Float64Stats = []
    case = first.case
    need64 = case.needs_float64(target)
    for w in range(case.seed, case.seed + weight_seeds):
        # the weights are drawn from the case's seed: another seed, another session
        session = first if w == case.seed else CaseSession(replace(case, seed=w),
                                                           first.options)
        try:
            session.compiled(target)
        except CompileStageError as exc:
            raise _Failed(str(exc)) from exc
        for s in range(case.seed, case.seed + seeds):
            for sizes in case.sample_sizes():  # every size of a dynamic dimension
                arrays = make_inputs(replace(case, seed=s), sizes)
                expected = session.reference(arrays)
                actual = session.run_program(target, arrays)
                if len(actual) != len(expected):
                    raise _Failed(f"TVM returned {len(actual)} outputs, PyTorch "
                                  f"{len(expected)}")
                pairs.extend((w, s, i, a, e) for i, (a, e) in enumerate(zip(
                    actual, expected, strict=True)))
                if need64:
                    try:
                        ref64 = session.reference64(arrays)
                    except Exception as exc:
                        raise _Failed(f"the model cannot run in float64 for the reference: "
                                      f"{type(exc).__name__}: {str(exc).strip()[:300]} "
                                      "(hint: judge it against float32 with rtol/atol "
                                      "instead)") from exc
                    label = ", ".join(f"{k}={v}" for k, v in sizes.items())
                    by_float64.extend((w, s, st) for st in compare_all(
                        case, target, actual, expected, label, ref64) if st.tolerance.by_ratio)
    return pairs, by_float64


def report(case: CaseSpec, target: str, obs: Observed, seeds: int, weight_seeds: int) -> str:
    lines = [f"calibrate {case.label} [{target}]: {weight_seeds} compile(s) x {seeds} input "
             "seed(s), inputs uniform in their declared range",
             f"{'weights':>7} {'inputs':>6} {'output':>6}  {'max_abs':>9} {'mean_abs':>9} "
             f"{'max_rel':>9} {'mean_rel':>9}"]
    for s in obs.samples:
        bad = f"  {s.nonfinite} non-finite" if s.nonfinite else ""
        lines.append(f"{s.weight_seed:>7} {s.input_seed:>6} {s.output:>6}  {s.max_abs:9.2e} "
                     f"{s.mean_abs:9.2e} {s.max_rel:9.2e} {s.mean_rel:9.2e}{bad}")
    worst_abs = max(s.max_abs for s in obs.samples)
    worst_rel = max(s.max_rel for s in obs.samples)
    lines.append(f"max over samples: max_abs {worst_abs:.2e}, max_rel {worst_rel:.2e}")
    lines.append(f"as |tvm - torch| <= atol + rtol*|torch|: rtol {obs.rtol:.2e} (elements with "
                 f"|torch| >= its RMS), atol {obs.atol:.2e} (the rest)")
    return "\n".join(lines)


def report_float64(case: CaseSpec, target: str, stats: Float64Stats) -> str:
    """The float64 rule per sample: TVM's RMSE and eager float32's against float64, ratio."""
    tol = stats[0][2].tolerance
    lines = [f"against the float64 reference (TVM's RMSE <= {tol.multiplier:g} x eager "
             f"float32's + {tol.floor:g}):",
             f"{'weights':>7} {'inputs':>6} {'output':>6}  {'tvm_rmse':>9} {'eager_rmse':>10} "
             f"{'ratio':>6} {'allowed':>9}"]
    for w, s, st in stats:
        where = f"  {st.sample}" if st.sample else ""
        bad = "  EXCEEDS" if not st else ""
        lines.append(f"{w:>7} {s:>6} {st.output:>6}  {st.rmse:9.2e} {st.eager_rmse or 0:10.2e} "
                     f"{st.ratio:6.2f} {st.bound:9.2e}{where}{bad}")
    worst = max(stats, key=lambda x: x[2].ratio)[2]
    over = sum(1 for _, _, st in stats if not st)
    verdict = (f"{over} of {len(stats)} exceed the bound: a regression to explain, not a "
               f"tolerance to tune (`{case_command(case, 'show', '--bisect')}` finds the stage)"
               if over else "every sample within: nothing to tune")
    lines.append(f"worst ratio {worst.ratio:.2f}x eager float32; {verdict}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# --write
# --------------------------------------------------------------------------------------------
def write(case: CaseSpec, target: str, rtol: float, atol: float) -> None:
    """Write the tolerance where it applies to `target` (policy as for budgets): an existing
    ``[targets_override.<t>] tolerance`` in place; else ``[tolerance]`` when `target` is the
    case's first target, else a new override. Other targets that inherit ``[tolerance]`` are
    pinned at their old value in their own override: what was not measured does not change.
    For a variant (`case.variant`), the same in its [[variants]] entry."""
    source = CaseText.read(case.path)
    old_text = source.text
    doc = tomlkit.parse(old_text)
    values = {"rtol": toml_number(rtol), "atol": toml_number(atol)}
    v = case.variant
    overrides = v.overrides if v is not None else case.overrides
    writes: dict[str | None, dict[str, str]] = {}
    if "tolerance" in overrides.get(target, {}):
        writes[target] = values
    elif target == case.targets[0]:
        writes[None] = values
        for t in case.targets[1:]:
            if "tolerance" not in overrides.get(t, {}):
                old, _ = case.tolerance_for(t, None)
                writes[t] = {"rtol": toml_number(old.rtol), "atol": toml_number(old.atol)}
    else:
        writes[target] = values
    for table, vals in writes.items():
        set_section(doc, "tolerance", table, vals, variant=v.index if v else None)
    new_text = tidy(old_text, tomlkit.dumps(doc))
    shown = display_path(case.path)
    if new_text == old_text:
        print(f"{shown}: tolerance already as proposed; not written")
        return
    again = pick_variant(source.check(new_text), v.name if v else None)
    got, _ = again.tolerance_for(target, 0)
    if (got.rtol, got.atol) != (float(values["rtol"]), float(values["atol"])) and not any(
            o.tolerance for o in case.outputs):
        raise AssertionError(f"rewriting {shown} would give {got}, not rtol {rtol} atol {atol}")
    source.write(new_text)
    print(f"wrote {written_to(case.path)}:")
    for line in diff_lines(shown, old_text, new_text):
        print(f"  {line}")
    if source.kept():
        print(f"  ({source.kept()})")
