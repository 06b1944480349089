"""Every file cl_validate writes is written atomically, with the mode a plain write gives it."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from cl_validate.atomic import write_atomic
from cl_validate.errors import ExitCode
from tests.conftest import DATA, run_cli, tiny_case


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _plain_write_mode(folder: Path) -> int:
    """What ``open(path, "w")`` gives a new file here, under this process's umask."""
    probe = folder / ".plain-write-probe"
    with open(probe, "w", encoding="utf-8") as f:
        f.write("x")
    mode = _mode(probe)
    probe.unlink()
    return mode


def test_a_new_file_gets_the_plain_write_mode_and_no_temporary_is_left(tmp_path: Path):
    target = write_atomic(tmp_path / "sub" / "r.txt", "päyload\n")
    assert target.read_bytes() == "päyload\n".encode()
    assert _mode(target) == _plain_write_mode(tmp_path)  # not mkstemp's 0600
    assert sorted(p.name for p in target.parent.iterdir()) == ["r.txt"]


def test_a_replaced_file_keeps_its_own_mode(tmp_path: Path):
    target = tmp_path / "case.toml"
    target.write_text("old\n")
    target.chmod(0o640)
    write_atomic(target, b"new\n")
    assert target.read_text() == "new\n" and _mode(target) == 0o640


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path):
    target = tmp_path / "r.xml"
    target.write_text("old\n")

    with pytest.raises(TypeError):  # fails while writing the temporary file
        write_atomic(target, object())  # type: ignore[arg-type]
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.xml"]


def test_a_link_is_written_through_to_its_target_with_the_targets_mode(tmp_path: Path):
    """Renaming over the link would make it a regular file and leave the real file stale."""
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "case.toml"
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "case.toml"
    link.symlink_to("real/case.toml")
    assert write_atomic(link, "new\n") == target
    assert link.is_symlink() and target.read_text() == "new\n"
    assert _mode(target) == 0o640
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["case.toml", "case.toml", "real"]


def test_a_link_loop_is_an_os_error_and_writes_nothing(tmp_path: Path):
    loop = tmp_path / "loop.xml"
    loop.symlink_to("loop.xml")
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        write_atomic(loop, "x")
    assert [p.name for p in tmp_path.iterdir()] == ["loop.xml"] and loop.is_symlink()


@pytest.mark.compile
def test_reports_merged_reports_and_tightened_case_files_have_plain_write_modes(tmp_path):
    """The files issue #12 found 0600: --markdown, merge -o, budget tighten (and --junit)."""
    cases = tmp_path / "cases"
    cases.mkdir()
    shutil.copy(DATA / "tiny_models.py", cases)
    case = cases / "tiny.toml"
    case.write_text(tiny_case(3))  # the tiny case needs 2: tighten will rewrite it
    case.chmod(0o664)
    reports = tmp_path / "reports"
    plain = _plain_write_mode(tmp_path)

    r = run_cli(["run", str(case), "--no-isolation", "--junit", str(reports / "r.xml"),
                 "--markdown", str(reports / "r.md")])
    assert r.code == ExitCode.CHECK_FAILED, r.text  # stale budget
    r = run_cli(["merge", str(reports / "r.xml"), "-o", str(reports / "merged.xml")])
    assert r.code == ExitCode.OK, r.text
    for name in ("r.xml", "r.md", "merged.xml"):
        assert _mode(reports / name) == plain, name

    r = run_cli(["budget", "tighten", str(case), "--no-isolation"])
    assert r.code == ExitCode.OK, r.text
    assert "layout_transforms = 2" in case.read_text()
    assert _mode(case) == 0o664  # as a plain rewrite of an existing file leaves it
    assert {p for p in os.listdir(cases) if p != "__pycache__"} == {"tiny.toml", "tiny_models.py"}
