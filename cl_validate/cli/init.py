"""``cl-validate init MODULE:FACTORY --input NAME:SHAPE[:LAYOUT][:DTYPE] ...``: a first case file.

A team's first case should not start from guessed budgets. ``init`` writes the case file for
the model with the channels-last goal declared (``[layout]``: convolutions in NHWC/OHWI), then
compiles it once through the same case processes as ``cl-validate run`` (static checks, as
``budget tighten``: counts need no numerics, cuda compiles without a GPU) and writes every
exact budget the checks measure (``layout_transforms``, ``kernels``, bytes, ...), each with a
comment saying where the number came from: the target, the date, the TVM and torch versions.
The tolerance is the float64 rule (no number to tune); ``cl-validate calibrate`` proposes
rtol/atol for a case that wants them.

The model is imported as ``cl-validate run`` imports it: ``MODULE`` is looked up next to the
case file (``-o``, default ``model_cases/<factory>.toml``) and in the working directory. An
existing file is never replaced without ``--force``; nothing is written when the model does
not compile (exit 1, with the reason).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cl_validate.atomic import write_atomic
from cl_validate.checks.layout import NAME as LAYOUT
from cl_validate.checks.layout import LayoutKind
from cl_validate.checks.verdict import CaseResult, Status
from cl_validate.cli.budget import figures
from cl_validate.cli.common import DEFAULT_PATH, measure_static
from cl_validate.cli.pins import installed
from cl_validate.errors import ExitCode, UsageError
from cl_validate.paths import display_path
from cl_validate.spec import load_case
from cl_validate.spec.budgets import BudgetPlan, verify
from cl_validate.spec.model import DTYPES, IO_LAYOUTS
from cl_validate.spec.options import add_to_argparse

HELP = "write a case file for MODULE:FACTORY with measured budgets"

#: What a channels-last case declares for its convolutions (the goal this tool gates).
GOAL = {"relax.nn.conv2d": ("NHWC", "OHWI")}
_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_NAME = re.compile(r"^[A-Za-z_]\w*$")


@dataclass(frozen=True)
class InputArg:
    """One ``--input NAME:SHAPE[:LAYOUT][:DTYPE]``."""

    name: str
    shape: tuple[int, ...]
    layout: str | None
    dtype: str = "float32"


#: How ``--input`` writes the shape of a 0-d input (a diffusion sampler's timestep).
SCALAR = "scalar"


def parse_input(text: str) -> InputArg:
    """``x:1x3x32x32``, ``x:1,3,32,32:NCHW``, ``ids:1x77:int64`` or ``t:scalar:int64`` (the
    layout and the dtype in either order; argparse type: a UsageError on bad text)."""
    parts = text.split(":")
    hint = ("write NAME:SHAPE[:LAYOUT][:DTYPE], e.g. x:1x3x224x224, x:1x224x224x3:NHWC, "
            f"ids:1x77:int64 or t:{SCALAR}:int64")
    if not 2 <= len(parts) <= 4 or not _NAME.match(parts[0]):
        raise UsageError(f"--input {text!r}: not NAME:SHAPE[:LAYOUT][:DTYPE]", hint=hint)
    dims = [] if parts[1].lower() in (SCALAR, "[]") else re.split(r"[x,]", parts[1])
    if not all(d.isdigit() and int(d) > 0 for d in dims):
        raise UsageError(f"--input {text!r}: shape {parts[1]!r} is not positive integers "
                         f"separated by x (or {SCALAR})", hint=hint)
    layout, dtype = None, None
    for extra in parts[2:]:
        if extra.upper() in IO_LAYOUTS and layout is None:
            layout = extra.upper()
        elif extra.lower() in DTYPES and dtype is None:
            dtype = extra.lower()
        else:
            raise UsageError(f"--input {text!r}: {extra!r} is neither a layout (NCHW, NHWC) "
                             "nor a dtype", hint=f"dtypes: {', '.join(DTYPES)}; an image "
                             "input is NCHW (PyTorch's) or NHWC: omit the layout otherwise")
    if layout is not None and len(dims) != 4:
        raise UsageError(f"--input {text!r}: a layout needs a 4-D shape", hint=hint)
    return InputArg(parts[0], tuple(int(d) for d in dims), layout, dtype or "float32")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("factory", metavar="MODULE:FACTORY",
                        help="the callable returning the torch.nn.Module, e.g. "
                        "mypkg.models:small_net")
    parser.add_argument("--input", dest="inputs", action="append", required=True,
                        metavar="NAME:SHAPE[:LAYOUT][:DTYPE]", type=_input_type,
                        help="an input of the model, in call order (repeatable): "
                        "x:1x3x224x224 (NCHW, as PyTorch holds it; float32), "
                        "x:1x224x224x3:NHWC, ids:1x77:int64, t:scalar:int64 (0-d)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help=f"the case file to write (default {DEFAULT_PATH}/<factory>.toml)")
    parser.add_argument("--target", dest="targets", action="append", metavar="TARGET",
                        help="targets of the case (repeatable; default llvm and cuda)")
    parser.add_argument("--description", metavar="TEXT", help="the case's description")
    parser.add_argument("--force", action="store_true", help="replace an existing FILE")
    add_to_argparse(parser, only=("no_isolation",))


def _input_type(text: str) -> InputArg:
    try:
        return parse_input(text)
    except UsageError as exc:  # argparse reports a ValueError/TypeError as a bad value
        raise argparse.ArgumentTypeError(str(exc)) from None


def _q(s: str) -> str:
    """A TOML basic string."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _literal(key: str, value: int) -> str:
    return f"{value:_}" if key.endswith("_bytes") else str(value)


def skeleton(factory: str, inputs: Sequence[InputArg], targets: Sequence[str] | None,
             description: str) -> str:
    """The case file before anything is measured: model, inputs, targets, the layout goal,
    without budgets or tolerance."""
    lines = [f"model = {_q(factory)}", f"description = {_q(description)}"]
    if targets:
        lines.append("targets = [" + ", ".join(_q(t) for t in targets) + "]")
    for i in inputs:
        shape = ", ".join(map(str, i.shape))
        lines += ["", "[[inputs]]", f"name = {_q(i.name)}", f"shape = [{shape}]",
                  f"dtype = {_q(i.dtype)}"]
        if i.layout:
            lines.append(f"layout = {_q(i.layout)}")
    lines += ["", "# The channels-last goal: every convolution runs NHWC with OHWI weights.",
              "[layout]"]
    lines += [f"{_q(op)} = [{', '.join(map(_q, lay))}]" for op, lay in GOAL.items()]
    return "\n".join(lines) + "\n"


#: The numerics rule init declares: no number to tune.
TOLERANCE = """
[tolerance]
# No number to tune: TVM's error against a float64 run at most 3x eager float32's.
# `cl-validate calibrate FILE --write` measures and writes rtol/atol instead.
reference = "float64"
"""


def _provenance(target: str) -> str:
    day = datetime.date.today().isoformat()
    versions = ", ".join(f"{d} {installed(d) or 'absent'}" for d in ("apache-tvm", "torch"))
    return f"{target}, cl-validate init {day}, {versions}"


def budgets_text(results: Sequence[CaseResult], targets: Sequence[str]) -> tuple[str, BudgetPlan]:
    """The ``[budget]`` table (the first target's figures) and a ``[targets_override.<t>]``
    budget for each other target whose figures differ, one comment per number; and the plan
    that `verify` holds the written file to."""
    by_target = {r.target: figures(r.kernels) for r in results if r.kernels is not None}
    primary = targets[0]
    base = by_target[primary]
    lines = ["", "[budget]"]
    lines += [f"{k} = {_literal(k, v)}  # {_provenance(primary)}" for k, v in base.items()]
    plan = BudgetPlan(results[0].case)
    plan.expected[(None, primary)] = dict(base)
    for t in targets[1:]:
        own = {k: v for k, v in by_target[t].items() if base.get(k) != v}
        if own:
            lines += ["", f"[targets_override.{t}.budget]"]
            lines += [f"{k} = {_literal(k, v)}  # {_provenance(t)}" for k, v in own.items()]
        plan.expected[(None, t)] = {**{k: v for k, v in base.items() if k in by_target[t]},
                                    **own}
    return "\n".join(lines) + "\n", plan


def _default_output(factory: str) -> Path:
    stem = re.sub(r"\W", "_", factory.rpartition(":")[2].rpartition(".")[2]).lower()
    return Path(DEFAULT_PATH) / f"{stem}.toml"


def main(args: argparse.Namespace) -> ExitCode:
    if not _FACTORY.match(args.factory):
        raise UsageError(f"{args.factory!r} is not MODULE:FACTORY",
                         hint="e.g. mypkg.models:small_net (a function or class returning "
                         "the torch.nn.Module)")
    names = [i.name for i in args.inputs]
    if len(set(names)) != len(names):
        raise UsageError("two --input share a name", hint="each input needs its own NAME")
    out = Path(args.output) if args.output else _default_output(args.factory)
    if out.suffix != ".toml":
        raise UsageError(f"{display_path(out)}: a case file ends in .toml")
    if (out.exists() or out.is_symlink()) and not args.force:
        raise UsageError(f"{display_path(out)} exists: not replaced",
                         hint="pass --force to replace it, or -o another FILE")
    description = args.description or f"{args.factory}, written by cl-validate init"
    text = skeleton(args.factory, args.inputs, args.targets, description)
    # Measured from a hidden copy next to FILE: the model is imported as it will be (next to
    # the case file), and FILE is written only once the numbers are known.
    out.parent.mkdir(parents=True, exist_ok=True)
    draft = out.with_name(f".{out.stem}.init-{os.getpid()}.toml")
    write_atomic(draft, f"name = {_q(out.stem)}\n" + text)
    # its place in the hidden copy is no place a user can open: the error alone is said
    at = re.compile(re.escape(display_path(draft)) + r":\d+: ")

    def tidy(message: str) -> str:
        return at.sub("", message)

    try:
        case = load_case(draft)
        ns = argparse.Namespace(targets=None, jobs=1, no_isolation=args.no_isolation)
        results = measure_static(case.expand(), ns, lambda r: (
            f"{len(r.kernels.runtime_transforms) if r.kernels else '?'} layout transforms, "
            f"{len(r.kernels) if r.kernels else '?'} kernels"), tidy=tidy)
    finally:
        draft.unlink(missing_ok=True)
    broken = [r for r in results if r.kernels is None]
    if broken:
        for r in broken:
            print(f"cl-validate init: {r.target}: {tidy(r.checks[0].message)}")
        print(f"cl-validate init: the model does not compile: {display_path(out)} not written")
        return ExitCode.CHECK_FAILED
    layouts = [r.check(LAYOUT) for r in results if _has(r, LAYOUT)]
    if layouts and all(c.kind == LayoutKind.MISSING for c in layouts):
        # no convolution in the model: no layout to declare
        text = text[:text.index("\n# The channels-last goal")] + "\n"
        layouts = []
    budget, plan = budgets_text(results, case.targets)
    text += budget + TOLERANCE
    if (out.exists() or out.is_symlink()) and not args.force:  # written meanwhile
        raise UsageError(f"{display_path(out)} exists: not replaced", hint="pass --force")
    verify(out, text, plan)
    write_atomic(out, text)
    print(f"wrote {display_path(out)}")
    for c in layouts:
        if c.status is Status.FAILED:  # the model does not reach channels-last: a finding
            print(f"  note: {c.message} (cl-validate show {display_path(out)})")
    print(f"next: cl-validate run {display_path(out)}")
    return ExitCode.OK


def _has(r: CaseResult, name: str) -> bool:
    return any(c.check == name for c in r.checks)
