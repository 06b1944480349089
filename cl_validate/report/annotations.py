"""GitHub Actions annotations: each failing check shows up on the case-file line it violates.

A workflow command printed to stdout, ``::error file=F,line=L,title=T::message``, makes GitHub
annotate line L of file F in the pull request's "Files changed" view and in the run summary, so
a reviewer sees ``layout_transforms 3 > budget 2 (cuda)`` right on ``layout_transforms = 2``.
Failed and errored checks become ``error`` annotations; a budget that passes but is stale
(``stale_budget = "warn"``) becomes a ``warning`` on its line.

Escaping follows GitHub's toolkit (``@actions/core`` command.ts): ``%``, CR and LF in the
message; those and ``:`` and ``,`` in property values (`cl_validate.report.escape`, where
every output's escaping is). Unescaped, a case name or a message with a colon would cut the
command short, and a newline would end it.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from cl_validate.checks.ratchet import BudgetCheck
from cl_validate.checks.registry import get
from cl_validate.checks.verdict import CaseResult, CheckResult, Status
from cl_validate.paths import repo_path
from cl_validate.report.escape import escape_data, escape_property

#: Annotations of each kind GitHub shows per step (more are dropped without a word).
SHOWN_PER_STEP = 10


def annotation_path(path: Path, env: Mapping[str, str] | None = None) -> str:
    """The case file as GitHub resolves annotation paths: relative to the checkout
    (``$GITHUB_WORKSPACE``), as the JUnit ``file`` names it (`paths.repo_path`)."""
    return repo_path(path, env)


def _command(kind: str, result: CaseResult, check: CheckResult,
             env: Mapping[str, str] | None) -> str:
    props = [("file", annotation_path(result.case.path, env))]
    if check.line:
        props.append(("line", str(check.line)))
    what = {Status.FAILED: "failed", Status.ERROR: "error"}.get(check.status, "warning")
    props.append(("title", f"cl_validate {result.case.label} [{result.target}] "
                           f"{check.check} {what}"))
    head = ",".join(f"{k}={escape_property(v)}" for k, v in props)
    message = check.message
    if result.kernels is not None and isinstance(get(check.check), BudgetCheck):
        message += (f"\ncl-validate show {shlex.quote(repo_path(result.case.path))} --target "
                    f"{result.target} lists the stages and the kernels")
    return f"::{kind} {head}::{escape_data(message)}"


def github_annotations(results: Sequence[CaseResult],
                       env: Mapping[str, str] | None = None) -> list[str]:
    """One workflow command per failed or errored check (and per stale-budget warning)."""
    out: list[str] = []
    for r in results:
        for c in r.checks:
            if c.status.bad:
                out.append(_command("error", r, c, env))
            elif c.status is Status.PASSED and c.figures.stale:
                out.append(_command("warning", r, c, env))
    return out


def emit_annotations(results: Sequence[CaseResult], stream: TextIO | None = None,
                     env: Mapping[str, str] | None = None) -> int:
    """Print the annotations when running under GitHub Actions (``GITHUB_ACTIONS=true``);
    anywhere else they would be noise. Returns how many were printed."""
    env = os.environ if env is None else env
    if env.get("GITHUB_ACTIONS") != "true":
        return 0
    stream = sys.stdout if stream is None else stream
    lines = github_annotations(results, env)
    for kind in ("error", "warning"):
        n = sum(1 for line in lines if line.startswith(f"::{kind} "))
        if n > SHOWN_PER_STEP:  # GitHub drops the rest silently; say so where it shows
            lines.append(f"::notice title=cl_validate::{n} {kind} annotations: GitHub shows "
                         f"{SHOWN_PER_STEP} per step; the job summary and the JUnit report "
                         "list them all")
    for line in lines:
        print(line, file=stream)
    stream.flush()
    return len(lines)
