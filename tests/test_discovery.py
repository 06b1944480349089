"""Finding case files never hangs and never tracebacks, whatever a case folder holds.

What cannot be committed to tests/corpus/ — a FIFO, a device, symbolic link loops, a broken
link — is made here, in a temporary folder. Commands that used to hang on them run in a
process of their own under a timeout, so a regression fails the test instead of stalling the
suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cl_validate.errors import ExitCode
from tests.conftest import DATA, run_cli, tiny_case

PREFIX = "cl-validate: error: "


@pytest.fixture
def cases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with one good case, the working directory its parent."""
    folder = tmp_path / "cases"
    folder.mkdir()
    shutil.copy(DATA / "tiny_models.py", folder)
    (folder / "good.toml").write_text(tiny_case())
    monkeypatch.chdir(tmp_path)
    return folder


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real CLI in a process of its own: a hang is a test failure, not a stuck suite."""
    return subprocess.run([sys.executable, "-m", "cl_validate", *args], capture_output=True,
                          text=True, timeout=timeout)


def _one_line(proc: subprocess.CompletedProcess[str], where: str, says: str) -> None:
    assert proc.returncode == ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"{PREFIX}{where}: "), proc.stderr
    assert says in proc.stderr, proc.stderr


@pytest.mark.parametrize("command", ["list", "run"])
def test_a_fifo_named_like_a_case_is_named_not_opened(cases: Path, command: str) -> None:
    os.mkfifo(cases / "pipe.toml")  # opening it for reading would wait for a writer forever
    proc = _cli(command, "cases")
    _one_line(proc, "cases/pipe.toml", "is a FIFO (named pipe), not a case file (hint: a case "
              "file is a plain TOML file")


def test_a_device_named_like_a_case_is_never_read(cases: Path) -> None:
    os.symlink("/dev/zero", cases / "zeros.toml")  # reading it would never end
    _one_line(_cli("list", "cases"), "cases/zeros.toml", "is a character device, not a case "
              "file")
    _one_line(_cli("list", "cases/zeros.toml"), "cases/zeros.toml", "is a character device")


def test_a_symlink_loop_named_like_a_case_is_one_line(cases: Path) -> None:
    os.symlink("loop.toml", cases / "loop.toml")
    _one_line(_cli("list", "cases"), "cases/loop.toml", "is a symbolic link loop, not a case "
              "file")
    code, out, err = run_cli(["list", "cases/loop.toml"])
    assert code == ExitCode.USAGE_ERROR and out == "" and err.count("\n") == 1
    assert err.startswith(f"{PREFIX}cases/loop.toml: is a symbolic link loop")


def test_a_broken_link_named_like_a_case_is_one_line(cases: Path) -> None:
    os.symlink("gone.toml", cases / "broken.toml")
    code, out, err = run_cli(["list", "cases"])
    assert code == ExitCode.USAGE_ERROR and out == "" and err.count("\n") == 1
    assert err.startswith(f"{PREFIX}cases/broken.toml: is a broken symbolic link")


def test_links_to_folders_are_followed_once_even_in_a_loop(cases: Path) -> None:
    """A link back up the tree (``cases/up -> ..``) and one to itself: every case is found
    once, and the walk ends."""
    os.symlink("..", cases / "up")
    os.symlink("self", cases / "self")  # a loop that is not named *.toml: not a case
    elsewhere = cases.parent / "more"
    elsewhere.mkdir()
    (elsewhere / "other.toml").write_text(tiny_case().replace('model = "', 'name = "other"\n'
                                                              'model = "', 1))
    os.symlink("../more", cases / "more")
    proc = _cli("list", "cases")
    assert proc.returncode == ExitCode.OK, proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    assert sorted(names) == ["good", "other"]


def test_a_fifo_given_to_merge_is_refused_without_waiting(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "shard.xml")
    proc = _cli("merge", str(tmp_path / "shard.xml"), "-o", str(tmp_path / "out.xml"))
    assert proc.returncode == ExitCode.USAGE_ERROR, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "cannot read report: a FIFO (named pipe), not a regular file" in proc.stderr
    assert not (tmp_path / "out.xml").exists()


def test_a_utf8_byte_order_mark_is_accepted(cases: Path) -> None:
    """Windows editors save UTF-8 with a BOM; TOML is UTF-8, so the case loads as it is."""
    (cases / "good.toml").write_bytes(b"\xef\xbb\xbf" + tiny_case().encode())
    code, out, err = run_cli(["list", "cases"])
    assert code == ExitCode.OK, err
    assert out.startswith("good  llvm") and "transforms<=2" in out
