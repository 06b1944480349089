"""Reference text generated from the code, so the docs cannot drift from it.

Each generated block sits in a Markdown page between two markers::

    <!-- generated: checks (python -m cl_validate.cli.reference --write docs) -->
    ...
    <!-- /generated: checks -->

and holds what `BLOCKS` renders: the check table and the failure kinds (from the check
registry), the case-file keys (from the validator's key tuples, `cl_validate.spec.key_docs`
and the ``[budget]`` keys the checks declare), the exit codes (`ExitCode` and its member
docstrings), the JUnit shape (a report `cl_validate.report.junit` builds for a sample case) and,
added by `cl_validate.cli.reference`, every subcommand's arguments (from ``cl-validate``'s own
argparse parsers, which this layer may not import).

``python -m cl_validate.cli.reference --write docs`` rewrites every block of every
page under that folder (``... FILE ...``: the blocks of those files); ``--check`` instead exits
1 naming each stale page. The test suite fails when a page differs from what is generated.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import itertools
import re
import tempfile
import xml.dom.minidom
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from cl_validate import errors
from cl_validate.checks.ratchet import RatchetKind
from cl_validate.checks.registry import checks
from cl_validate.checks.verdict import CaseResult, CheckResult, Status
from cl_validate.errors import ExitCode
from cl_validate.report.escape import md_trusted
from cl_validate.report.junit import build_junit
from cl_validate.spec.budget_keys import budget_keys
from cl_validate.spec.key_docs import tables
from cl_validate.spec.validate import load_case

COMMAND = "python -m cl_validate.cli.reference --write docs"
_BEGIN = re.compile(r"<!-- generated: ([a-z_-]+) \(.*?\) -->\n")


def _begin(name: str) -> str:
    return f"<!-- generated: {name} ({COMMAND}) -->\n"


def _end(name: str) -> str:
    return f"<!-- /generated: {name} -->"


# --------------------------------------------------------------------------------------------
# checks and failure kinds
# --------------------------------------------------------------------------------------------
def checks_table() -> str:
    """Every check in report order: its name, when it passes, the case-file key that
    declares it, and its failure kinds (the JUnit ``type``)."""
    rows = ["| check | passes when | declared by | fails as (JUnit `type`) |",
            "| --- | --- | --- | --- |"]
    for c in checks():
        table, *keys = c.declared_by
        where = f"`[{table}] {'.'.join(keys)}`" if keys else f"`{table}`"
        kinds = ", ".join(dict.fromkeys(f"`{k.value}`" for group in c.kinds for k in group))
        rows.append(f"| `{c.name}` | {md_trusted(c.summary)} | {where} | {kinds or '–'} |")
    return "\n".join(rows)


def failure_kinds() -> str:
    """Every failure kind of every check with what it means."""
    rows = ["| check | type | means |", "| --- | --- | --- |"]
    for c in checks():
        for group in c.kinds:
            for k in group:
                rows.append(f"| `{c.name}` | `{k.value}` | {md_trusted(k.doc)} |")
    return "\n".join(rows)


# --------------------------------------------------------------------------------------------
# case-file keys
# --------------------------------------------------------------------------------------------
def budget_table() -> str:
    """The ``[budget]`` keys, as the checks declare them (each value as its kind of value
    describes it)."""
    by_key = {c.budget.name: c for c in checks() if c.budget is not None}
    rows = ["| key | value | judged by | passes when | kept exact by `budget tighten` |",
            "| --- | --- | --- | --- | --- |"]
    for k in budget_keys():
        check = by_key.get(k.name)
        value = k.kind.doc + (f", default {k.default}" if k.default is not None else "")
        rows.append(f"| `{k.name}` | {value} | "
                    f"{f'`{check.name}`' if check else '–'} | "
                    f"{md_trusted(check.summary) if check else '–'} | "
                    f"{'yes' if k.exact else 'no: a ceiling'} |")
    rows.append("| `reason` | text | – | why a budget went up (`budget tighten "
                "--allow-increase --reason`), for the reviewer | – |")
    return "\n".join(rows)


def case_keys() -> str:
    """Every table of a case file (and ``[tool.cl_validate]``) with its keys."""
    parts = []
    for t in tables():
        rows = [f"**{t.heading}**", "", "| key | means |", "| --- | --- |"]
        rows += [f"| `{k}` | {md_trusted(doc)} |" for k, doc in t.keys]
        parts.append("\n".join(rows))
        if t.heading.startswith("top level"):
            parts.append("**[budget]** (and `budget` in `[targets_override.<target>]` and "
                         "`[[variants]]`)\n\n" + budget_table())
    return "\n\n".join(parts)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
def _flag(a: argparse.Action) -> str:
    if not a.option_strings:
        name = a.metavar if isinstance(a.metavar, str) else a.dest.upper()
        return f"`{name} ...`" if a.nargs in ("*", "+") else f"`{name}`"
    if a.nargs == 0:
        return ", ".join(f"`{o}`" for o in a.option_strings)
    if isinstance(a.metavar, tuple):
        meta = " ".join(a.metavar)
    else:
        meta = a.metavar or a.dest.upper()
    return ", ".join(f"`{o} {meta}`" for o in a.option_strings)


def _help(a: argparse.Action, prog: str) -> str:
    text = a.help or ""
    if "%" in text:
        params = {**vars(a), "prog": prog}
        params = {k: getattr(v, "__name__", v) for k, v in params.items()}
        text = text % params
    repeat = " (repeatable)" if isinstance(a, argparse._AppendAction) and \
        "repeatable" not in text else ""
    return md_trusted(text + repeat)


def _commands(parser: argparse.ArgumentParser, prefix: str
              ) -> Iterable[tuple[str, argparse.ArgumentParser]]:
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield f"{prefix} {name}", sub
                yield from _commands(sub, f"{prefix} {name}")


def cli_reference(parser: argparse.ArgumentParser) -> str:
    """Every subcommand of `parser` with its description and arguments, from the parsers
    themselves (`cl_validate.cli.reference` passes ``cl-validate``'s)."""
    parts = []
    for prog, p in _commands(parser, parser.prog):
        actions = [a for a in p._actions if not isinstance(a, argparse._HelpAction)]
        nested = any(isinstance(a, argparse._SubParsersAction) for a in actions)
        desc = " ".join(inspect.cleandoc(p.description or "").split("\n\n")[0].split())
        lines = [f"### `{prog}`", "", desc.replace("``", "`")]
        if nested:
            subs = next(a for a in actions if isinstance(a, argparse._SubParsersAction))
            lines += ["", "Subcommands: " + ", ".join(f"`{prog} {n}`" for n in subs.choices)
                      + "."]
        else:
            lines += ["", "| argument | what it does |", "| --- | --- |"]
            lines += [f"| {_flag(a)} | {_help(a, prog)} |" for a in actions]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


# --------------------------------------------------------------------------------------------
# exit codes
# --------------------------------------------------------------------------------------------
def _member_docs(cls: type) -> dict[str, str]:
    """The docstring under each member of an enum's class body (as Sphinx reads them)."""
    tree = ast.parse(inspect.getsource(errors))
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__]
    out, body = {}, node.body
    for stmt, nxt in itertools.pairwise(body):
        if isinstance(stmt, ast.Assign) and isinstance(nxt, ast.Expr) and \
                isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
            out[stmt.targets[0].id] = inspect.cleandoc(nxt.value.value)  # type: ignore[attr-defined]
    return out


def exit_codes() -> str:
    docs = _member_docs(ExitCode)
    rows = ["| code | name | when |", "| --- | --- | --- |"]
    for code in ExitCode:
        if code.name not in docs:
            raise ValueError(f"ExitCode.{code.name} has no docstring (cl_validate/errors.py)")
        rows.append(f"| **{int(code)}** | `{code.name}` | {md_trusted(docs[code.name])} |")
    return "\n".join(rows)


# --------------------------------------------------------------------------------------------
# JUnit shape
# --------------------------------------------------------------------------------------------
_SAMPLE_CASE = """\
model = "zoo.my_net:my_net"
targets = ["llvm"]

[[inputs]]
name = "x"
shape = [1, 3, 32, 32]

[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]

[budget]
{budget} = 1
"""


def junit_sample() -> str:
    """The report `build_junit` writes for a sample case whose budget is exceeded: one
    failure, the other checks passed or skipped (hostname and timestamp masked)."""
    failed = next(c for c in checks() if c.budget is not None)  # the first budgeted check
    assert failed.budget is not None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "my_net.toml"
        path.write_text(_SAMPLE_CASE.format(budget=failed.budget.name), encoding="utf-8")
        case = load_case(path, project={})
    case = replace(case, path=Path("model_cases/my_net.toml"))
    results = []
    for c in checks():
        if c is failed:
            results.append(CheckResult(c.name, Status.FAILED, f"{c.name} 2 > budget 1 (llvm)",
                                       kind=RatchetKind.EXCEEDED.value, line=12,
                                       body="transforms after each stage ...\n>>   0  ..."))
        elif c.name in ("compile", "layout"):
            results.append(CheckResult(c.name, Status.PASSED, "ok", line=1, seconds=1.5))
        else:
            results.append(CheckResult(c.name, Status.SKIPPED, "(why it was skipped)",
                                       line=1))
    xml = build_junit([CaseResult(case, "llvm", results)])
    root = xml._elem
    for suite in root.iter("testsuite"):
        suite.set("hostname", "HOST")
        suite.set("timestamp", "2026-01-01T00:00:00+00:00")
    text = xml_pretty(ET.tostring(root, encoding="unicode"))
    return f"```xml\n{text}\n```"


def xml_pretty(text: str) -> str:
    pretty = xml.dom.minidom.parseString(text).toprettyxml(indent="  ")
    return "\n".join(line for line in pretty.splitlines()[1:] if line.strip())


# --------------------------------------------------------------------------------------------
# pages
# --------------------------------------------------------------------------------------------
BLOCKS: dict[str, Callable[[], str]] = {
    "checks": checks_table,
    "failure-kinds": failure_kinds,
    "case-keys": case_keys,
    "exit-codes": exit_codes,
    "junit-sample": junit_sample,
}


def replace_blocks(text: str, blocks: dict[str, Callable[[], str]] | None = None) -> str:
    """`text` with every generated block replaced by what the code generates now
    (`blocks`: the renderers by name, default `BLOCKS`)."""
    blocks = BLOCKS if blocks is None else blocks
    out, pos = [], 0
    for m in _BEGIN.finditer(text):
        if m.start() < pos:
            continue
        name = m.group(1)
        if name not in blocks:
            raise ValueError(f"unknown generated block '{name}' (known: {', '.join(blocks)})")
        end = text.find(_end(name), m.end())
        if end < 0:
            raise ValueError(f"generated block '{name}' has no end marker ({_end(name)})")
        out += [text[pos:m.start()], _begin(name), blocks[name](), "\n"]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def blocks_in(text: str) -> list[str]:
    return [m.group(1) for m in _BEGIN.finditer(text)]


def pages(paths: Iterable[str]) -> list[Path]:
    out: list[Path] = []
    for name in paths:
        p = Path(name)
        out += sorted(p.rglob("*.md")) if p.is_dir() else [p]
    return out


def main(argv: list[str], blocks: dict[str, Callable[[], str]]) -> int:
    """The regenerating command (``python -m cl_validate.cli.reference``, which adds the
    CLI's block to `BLOCKS`)."""
    ap = argparse.ArgumentParser(prog="python -m cl_validate.cli.reference",
                                 description="Rewrite the generated blocks of Markdown pages.")
    ap.add_argument("--write", metavar="DIR", action="append", default=[],
                    help="every page under DIR (repeatable)")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 naming every stale page")
    ap.add_argument("files", nargs="*", help="pages to rewrite")
    args = ap.parse_args(argv)
    stale = 0
    for path in pages([*args.write, *args.files]):
        old = path.read_text(encoding="utf-8")
        new = replace_blocks(old, blocks)
        if new == old:
            continue
        stale += 1
        if args.check:
            print(f"stale: {path} (regenerate: {COMMAND})")
        else:
            path.write_text(new, encoding="utf-8")
            print(f"updated {path}")
    return 1 if args.check and stale else 0

