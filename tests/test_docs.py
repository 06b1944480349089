"""The docs cannot drift from the code:

- every generated block of every page (the reference's check table, failure kinds, case-file
  keys, CLI, exit codes, JUnit sample) is what `cl_validate.cli.reference` generates now;
- every ```console block of the docs is a transcript that is run here: ``$ `` lines are
  commands (run in order, page by page, in a copy of the bundled cases), the lines under one
  its expected output, where a line ``...`` stands for any lines and ``...`` inside a line for
  any text, and durations (``34.4s``) match any duration. Commands that need the network, a
  GPU, a board or a tracker go in ```bash blocks, which are not run;
- the site builds with MkDocs in strict mode (a broken link or anchor fails), when MkDocs is
  installed (``tox -e docs`` always builds it).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cl_validate.cli import reference as cli_reference
from cl_validate.report import reference
from cl_validate.spec import key_docs

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
DATA = Path(__file__).parent / "data"


# --------------------------------------------------------------------------------------------
# generated reference
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_generated_blocks_are_current(page: Path):
    text = page.read_text(encoding="utf-8")
    assert reference.replace_blocks(text, cli_reference.BLOCKS) == text, \
        f"{page.relative_to(ROOT)} is stale: run {reference.COMMAND}"


def test_every_generated_block_is_on_a_reference_page():
    found = [b for p in (DOCS / "reference").glob("*.md")
             for b in reference.blocks_in(p.read_text(encoding="utf-8"))]
    assert sorted(found) == sorted(cli_reference.BLOCKS)


def test_the_reference_names_every_subcommand_flag_and_budget():
    """Spot checks that the generated text comes from the code, not from a copy."""
    from cl_validate.cli.main import _parser
    from cl_validate.spec.budget_keys import budget_keys

    cli = cli_reference.cli_block()
    for action in _parser()._actions:
        for name in getattr(action, "choices", None) or {}:
            assert f"### `cl-validate {name}`" in cli
    assert "`--shard-timings FILE`" in cli and "`--dry-run`" in cli
    keys = reference.case_keys()
    for k in budget_keys():
        assert f"| `{k.name}` |" in keys


def test_a_key_the_validator_accepts_must_be_described(monkeypatch):
    accepted = dict(key_docs.ACCEPTED)
    accepted["[[inputs]]"] = (*accepted["[[inputs]]"], "strides")
    monkeypatch.setattr(key_docs, "ACCEPTED", accepted)
    with pytest.raises(ValueError, match=r"\[\[inputs\]\].*'strides'"):
        key_docs.tables()


def test_an_exit_code_needs_a_docstring():
    docs = reference._member_docs(reference.ExitCode)
    assert set(docs) == {c.name for c in reference.ExitCode}
    assert "traceback" in docs["INTERNAL_ERROR"]


def test_the_check_command_reports_a_stale_page(tmp_path: Path, capsys):
    page = tmp_path / "checks.md"
    page.write_text(f"# x\n\n{reference._begin('exit-codes')}| old |\n"
                    f"{reference._end('exit-codes')}\n", encoding="utf-8")
    assert cli_reference.main(["--check", str(page)]) == 1
    assert "stale:" in capsys.readouterr().out and "| old |" in page.read_text()
    assert cli_reference.main([str(page)]) == 0
    assert cli_reference.main(["--check", str(page)]) == 0
    assert "| **130** | `INTERRUPTED` |" in page.read_text()


def test_the_junit_sample_validates_against_the_public_junit_schema():
    import xmlschema

    text = reference.junit_sample().split("\n", 1)[1].rsplit("\n```", 1)[0]
    tree = ET.ElementTree(ET.fromstring(text))
    xmlschema.XMLSchema(str(DATA / "junit-cl_validate.xsd")).validate(tree)
    for tc in tree.iter("testcase"):  # our documented extras, which junit-10 does not know
        tc.attrib.pop("file", None)
        tc.attrib.pop("line", None)
    xmlschema.XMLSchema(str(DATA / "junit-10.xsd")).validate(tree)


# --------------------------------------------------------------------------------------------
# console transcripts
# --------------------------------------------------------------------------------------------
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
_DURATION = re.compile(r"\b\d+(?:\.\d+)?(?:ms|s)\b")


def console_blocks(text: str) -> list[str]:
    return [m.group(2) for m in _FENCE.finditer(text) if m.group(1) == "console"]


def transcript(block: str) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for each ``$ `` line of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif not steps:
            raise ValueError(f"a console block must start with a '$ ' command, not {line!r} "
                             "(commands that are not run by the tests go in ```bash blocks)")
        else:
            steps[-1][1].append(line)
    return steps


def matches(expected: list[str], actual: str) -> bool:
    """`actual` fits `expected`: ``...`` lines stand for any lines, ``...`` in a line for any
    text, durations for any duration; trailing spaces do not count."""
    def norm(line: str) -> str:
        return _DURATION.sub("<t>", line.rstrip())

    parts = []
    for line in expected:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*".join(re.escape(p) for p in norm(line).split("...")) + r"\n")
    lines = actual.rstrip("\n").split("\n") if actual.strip() else []
    body = "".join(norm(x) + "\n" for x in lines)
    return re.fullmatch("".join(parts), body) is not None


def test_transcripts_match_with_elisions_and_masked_times():
    assert matches(["a ... c", "...", "end 1.5s"], "a b c\nx\ny\nend 34.4s\n")
    assert matches(["a", "...", "b"], "a\nb\n")
    assert matches([], "") and not matches([], "noise\n")
    assert not matches(["a", "b"], "a\nc\n")
    assert not matches(["a ... c"], "a b d\n")
    with pytest.raises(ValueError, match="```bash"):
        transcript("tox -e cpu\n")


def _pages_with_transcripts() -> list[Path]:
    return [p for p in [*PAGES, ROOT / "README.md"]
            if console_blocks(p.read_text(encoding="utf-8"))]


@pytest.mark.compile
@pytest.mark.parametrize("page", _pages_with_transcripts(),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_console_examples_run_as_shown(page: Path, tmp_path: Path):
    """Run in a copy of the bundled cases (and pyproject.toml, which declares their
    targets), with its own cache (the suite's CL_VALIDATE_NO_CACHE is not passed on: a
    transcript shows what a user sees), ``cl-validate`` being this checkout's."""
    work = tmp_path / "repo"
    shutil.copytree(ROOT / "model_cases", work / "model_cases",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", work)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "cl-validate"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cl_validate "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GITHUB_", "TVM_TRACKER", "RPC_DEVICE", "CL_VALIDATE_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT),
               COLUMNS="200")
    for block in console_blocks(page.read_text(encoding="utf-8")):
        for command, expected in transcript(block):
            proc = subprocess.run(["bash", "-c", command], cwd=work, env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=600)
            assert matches(expected, proc.stdout), (
                f"{page.relative_to(ROOT)}: `$ {command}` printed\n{proc.stdout}\n"
                "which does not match the page's\n" + "\n".join(expected))
            if proc.returncode and not any("exit code" in e for e in expected):
                pytest.fail(f"{page.relative_to(ROOT)}: `$ {command}` exited "
                            f"{proc.returncode}; show it (`; echo \"exit code $?\"`) if meant")


# --------------------------------------------------------------------------------------------
# the site
# --------------------------------------------------------------------------------------------
def test_every_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in PAGES:
        assert f" {page.relative_to(DOCS).as_posix()}\n" in nav, page


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                    reason="MkDocs is not installed (tox -e docs installs it and builds)")
def test_the_site_builds_strict(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()
    bench = (tmp_path / "site" / "benchmarks" / "index.html").read_text(encoding="utf-8")
    assert "What the gate costs in CI" in bench  # BENCHMARKS.md is included, not copied
