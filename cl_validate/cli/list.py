"""``cl-validate list [PATH ...]``: the cases found, with their targets and budgets."""

from __future__ import annotations

import argparse

from cl_validate.cli.common import DEFAULT_PATH, add_paths
from cl_validate.errors import ExitCode
from cl_validate.paths import display_path
from cl_validate.spec import load_cases
from cl_validate.spec.budget_keys import budget_key

HELP = "list the cases found under PATHs"


def configure(parser: argparse.ArgumentParser) -> None:
    add_paths(parser)


def main(args: argparse.Namespace) -> ExitCode:
    cases = load_cases(args.paths or [DEFAULT_PATH])
    width = max(len(c.name) for c in cases)
    for c in cases:
        budgets = " ".join(budget_key(k).format(v) for k, v in c.budget.declared().items())
        extra = ""
        if c.variants:
            extra += "  variants: " + ", ".join(v.name for v in c.variants)
        if c.dynamic:
            extra += "  dynamic: " + ", ".join(f"{d.name} {d.min}..{d.max}"
                                              for d in c.dynamic.values())
        print(f"{c.name:<{width}}  {','.join(c.targets):<9}  {budgets}  {c.model}  "
              f"({display_path(c.path)}){extra}")
    return ExitCode.OK
