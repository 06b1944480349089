"""What cl_validate prints of text it did not write — a model's exception, a module name, a key
in a case file — reaches the terminal with its control characters escaped: an escape sequence
cannot clear or recolour the screen, ``\\r`` cannot overwrite a line, and a newline cannot
start a forged ``::error`` workflow command in a one-line message.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from cl_validate.errors import ExitCode
from cl_validate.report.console import one_line, printable
from tests.conftest import DATA, run_cli, tiny_case

#: Any control character a terminal acts on (newline and tab aside), and bidi controls.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_printable_escapes_controls_and_keeps_lines() -> None:
    text = "a\x1b[31mb\rc\x07\x9b\u202ed\n\te"
    assert printable(text) == "a\\x1b[31mb\\x0dc\\x07\\x9b\\u202ed\n\te"
    assert one_line(text) == "a\\x1b[31mb\\x0dc\\x07\\x9b\\u202ed\\n\\te"
    assert printable("résumé — ok") == "résumé — ok"  # printable text is left alone


def test_a_hostile_key_in_a_case_file_is_one_escaped_line(tmp_path: Path) -> None:
    case = tmp_path / "case.toml"
    case.write_text('"\\u001b[2J\\u001b[31mevil\\r\\nsecond" = 1\n' + tiny_case())
    code, out, err = run_cli(["run", str(case)])
    assert code == ExitCode.USAGE_ERROR and out == ""
    assert not RAW.search(err) and err.count("\n") == 1, repr(err)
    assert "case.toml: unknown key '\\x1b[2J\\x1b[31mevil\\x0d\\nsecond' in [case]" in err


@pytest.fixture
def cases(tmp_path: Path) -> Path:
    folder = tmp_path / "cases"
    folder.mkdir()
    for f in ("tiny_models.py", "hostile_models.py"):
        shutil.copy(DATA / f, folder)
    return folder


@pytest.mark.compile
def test_a_models_exception_text_is_printed_escaped(cases: Path) -> None:
    """The factory raises with escape sequences, a bell, a bidi override and more lines, one
    of them a workflow command: the summary's failure line and the unusable-case line on
    stderr show it escaped, each still one line (the message is the first line)."""
    case = cases / "esc.toml"
    case.write_text(tiny_case(model="hostile_models:raises_escapes"))
    code, out, err = run_cli(["run", str(case), "-j", "1"])
    assert code == ExitCode.USAGE_ERROR, out + err  # its only case is unusable
    assert not RAW.search(out + err), repr(out + err)
    escaped = "raised RuntimeError: \\x1b[2J\\x1b[31mred\\x07 \\u202eexe.txt"
    (failure,) = [ln for ln in out.splitlines() if ln.startswith("ERROR esc [llvm] compile:")]
    assert escaped in failure
    assert escaped in err.splitlines()[0]
    assert not any(ln.startswith("::error file=x.toml") for ln in (out + err).splitlines())


@pytest.mark.compile
def test_show_prints_module_names_escaped(cases: Path) -> None:
    """Kernel attributions name the model's modules, and a module may be named anything."""
    case = cases / "named.toml"
    case.write_text(tiny_case(model="hostile_models:escapes_in_module_names"))
    code, out, err = run_cli(["show", str(case)])
    assert code == ExitCode.OK, out + err
    assert not RAW.search(out + err), repr(out)
    assert "graph output boundary, from \\x1b[31mconv\\u202e (convolution)" in out
