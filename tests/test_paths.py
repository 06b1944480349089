"""File names made from case names, and report paths: nothing lands outside the chosen folder.

Case files may come from a pull request; a name in one must never become ``../../x``, a hidden
file, or a name the file system refuses.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from cl_validate.cli import main
from cl_validate.errors import CaseFileError, ExitCode, UsageError
from cl_validate.paths import MAX_NAME, inside, report_file, safe_filename
from cl_validate.spec import load_case
from tests.conftest import tiny_case

DATA = Path(__file__).parent / "data"
_SAFE = re.compile(r"^[A-Za-z0-9_.-]+$")

HOSTILE = ["..", ".", ".bashrc", "../evil", "/etc/passwd", "a/b", "a\\b", "a_b", "a:b", "",
           "CON", "nul.txt", "x" * 300, "x" * 301, "résumé", "tab\there", "nul\0byte", "-rf"]


@pytest.mark.parametrize("name", ["resnet50", "two_conv_nhwc", "mobilenet-v2.int8", "A.b-c_9"])
def test_safe_names_come_back_unchanged(name: str) -> None:
    assert safe_filename(name) == name


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_become_one_plain_component(name: str, tmp_path: Path) -> None:
    safe = safe_filename(name)
    assert _SAFE.match(safe), safe
    assert not safe.startswith(".") and safe not in (".", "..")
    assert len(safe) <= MAX_NAME
    assert safe.split(".")[0].upper() not in ("CON", "NUL")
    assert safe_filename(name) == safe  # deterministic: the same case, the same file
    target = inside(tmp_path, safe + ".txt")
    assert target.parent == tmp_path.resolve()
    target.write_text("ok")  # the file system accepts it
    assert [p.name for p in tmp_path.iterdir()] == [safe + ".txt"]


def test_different_names_never_share_a_file() -> None:
    safe = [safe_filename(n) for n in HOSTILE]
    assert len(set(safe)) == len(HOSTILE)


def test_inside_accepts_paths_within_the_base(tmp_path: Path) -> None:
    assert inside(tmp_path, "a/b.txt") == tmp_path.resolve() / "a" / "b.txt"
    assert inside(tmp_path, tmp_path / "c.txt") == tmp_path.resolve() / "c.txt"
    assert inside(tmp_path, "a/../d.txt") == tmp_path.resolve() / "d.txt"


@pytest.mark.parametrize("path", ["../x.txt", "a/../../x.txt", "/etc/passwd", ".."])
def test_inside_refuses_paths_that_escape(path: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="outside") as info:
        inside(tmp_path / "reports", path)
    assert "\n" not in str(info.value)


def test_inside_refuses_a_symlink_out_of_the_base(tmp_path: Path) -> None:
    (tmp_path / "reports").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "reports" / "link")
    with pytest.raises(UsageError, match="outside"):
        inside(tmp_path / "reports", "link/x.txt")




@pytest.mark.parametrize("name", [".", "..", ".hidden", "../evil", "a/b", "a b"])
def test_spec_refuses_names_that_are_not_plain_file_names(name: str, tmp_path: Path) -> None:
    path = tmp_path / "case.toml"
    path.write_text(f'name = "{name}"\n' + tiny_case(tolerance=None))
    with pytest.raises(CaseFileError) as info:
        load_case(path)
    assert info.value.line == 1 and "case name" in info.value.message


def test_a_very_long_name_is_valid_and_its_file_name_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "case.toml"
    name = "very_long_case_name." * 20
    path.write_text(f'name = "{name}"\n' + tiny_case(tolerance=None))
    case = load_case(path)
    assert case.name == name
    safe = safe_filename(case.name)
    assert len(safe) <= MAX_NAME and safe != safe_filename(name + "x")


def test_report_file_accepts_a_new_nested_path_without_creating_it(tmp_path: Path) -> None:
    p = tmp_path / "new" / "nested" / "r.xml"
    assert report_file(p, "--junit") == p
    assert list(tmp_path.iterdir()) == []


def test_report_file_refuses_a_folder_and_a_file_as_parent(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is a folder, not a file"):
        report_file(tmp_path, "--junit")
    (tmp_path / "plain").write_text("")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        report_file(tmp_path / "plain" / "r.xml", "--junit")


@pytest.fixture
def case_dir(tmp_path: Path) -> Path:
    cases = tmp_path / "cases"
    cases.mkdir()
    shutil.copy(DATA / "tiny_models.py", cases / "tiny_models.py")
    (cases / "tiny.toml").write_text('name = "tiny"\n' + tiny_case(tolerance=None))
    return cases


def _files(root: Path) -> set[str]:
    # __pycache__: Python caches the imported factory module next to it; not ours to write.
    return {str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


@pytest.mark.compile
def test_junit_into_a_new_nested_folder_writes_only_the_report(
        case_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _files(tmp_path)
    junit = tmp_path / "out" / "deep" / "er" / "r.xml"
    code = main(["run", str(case_dir), "--no-isolation", "--junit", str(junit)])
    out = capsys.readouterr().out
    assert code == ExitCode.OK, out
    assert junit.read_text().startswith("<?xml")
    assert _files(tmp_path) - before == {"out/deep/er/r.xml"}


@pytest.mark.parametrize("where", ["folder", "under_a_file"])
def test_junit_path_that_cannot_be_a_file_is_one_line_before_any_compile(
        where: str, case_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "reports").mkdir()
    (tmp_path / "plain").write_text("keep me")
    junit = tmp_path / "reports" if where == "folder" else tmp_path / "plain" / "r.xml"
    before = _files(tmp_path)
    code = main(["run", str(case_dir), "--junit", str(junit)])
    captured = capsys.readouterr()
    assert code == ExitCode.USAGE_ERROR
    assert captured.out == ""  # nothing compiled
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert captured.err.startswith(f"cl-validate: error: --junit {junit}: ")
    assert "(hint: " in captured.err
    assert _files(tmp_path) == before and (tmp_path / "plain").read_text() == "keep me"
