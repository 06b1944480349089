"""A run the cache will answer starts no worker processes (they would only take CPU from the
validation); a wrong prediction costs only that overlap, never a verdict."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cl_validate.cache import Cache, hint
from cl_validate.cli import main
from cl_validate.errors import ExitCode
from cl_validate.spec import load_case
from cl_validate.workers import WorkerPool

MODEL = """
import torch
from torch import nn


def net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
"""

CASE = """
model = "cache_model:net"
targets = ["llvm"]

[[inputs]]
name = "x"
shape = [1, 3, 8, 8]

[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]

[budget]
layout_transforms = 2
kernels = 3
"""


@pytest.fixture
def case_dir(tmp_path: Path) -> Path:
    (tmp_path / "cache_model.py").write_text(textwrap.dedent(MODEL).lstrip())
    (tmp_path / "case.toml").write_text(textwrap.dedent(CASE).lstrip())
    return tmp_path


@pytest.fixture
def prestarts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = WorkerPool.prestart

    def record(self: WorkerPool, n: int) -> None:
        calls.append(n)
        original(self, n)

    monkeypatch.setattr(WorkerPool, "prestart", record)
    return calls


def test_prediction_follows_the_case_file_and_the_stored_entry(tmp_path: Path,
                                                               case_dir: Path) -> None:
    case = load_case(case_dir / "case.toml")
    cache = Cache(tmp_path / "cache")
    h = hint(case, "llvm", False)
    assert not cache.predicts_hits([h])  # empty cache
    assert not cache.predicts_hits([])  # nothing to answer is no reason to skip workers
    k = "ab" * 32
    cache.remember(h, k)
    assert not cache.predicts_hits([h])  # the key it leads to is not stored
    cache.put(k, object())  # type: ignore[arg-type]
    assert cache.predicts_hits([h])
    assert hint(case, "cuda", False) != h and hint(case, "llvm", True) != h
    # Any edit of the case file (a budget too: cheap, but unknown until loaded) is a new hint.
    (case_dir / "case.toml").write_text(CASE.replace("kernels = 3", "kernels = 2"))
    assert hint(case, "llvm", False) != h
    # A hint that was overwritten with garbage predicts nothing.
    cache._hint_path(h).write_text("not a key")
    assert not cache.predicts_hits([h])


def test_remember_where_it_cannot_write_does_not_raise(tmp_path: Path, case_dir: Path) -> None:
    """A cache it cannot write hints into (here: `hints` is a file, which stops root too)
    still answers; it only predicts less."""
    root = tmp_path / "cache"
    root.mkdir()
    (root / "hints").write_text("in the way")
    h = hint(load_case(case_dir / "case.toml"), "llvm", False)
    Cache(root).remember(h, "cd" * 32)
    assert not Cache(root).predicts_hits([h])


@pytest.mark.compile
def test_warm_run_starts_no_workers_and_a_wrong_guess_still_measures(
        case_dir: Path, tmp_path: Path, prestarts: list[int],
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", str(case_dir / "case.toml"), "-j", "1", "--cache-dir", str(tmp_path / "c")]

    assert main(argv) == ExitCode.OK
    assert prestarts == [1]  # cold: workers import while the parent validates
    capsys.readouterr()

    assert main(argv) == ExitCode.OK
    assert prestarts == [1]  # warm: no worker started at all
    assert "cache: 1 of 1 case x target measurements reused" in capsys.readouterr().out

    # The model's code changes, the case file does not: the prediction says "warm", the real
    # key says "changed". The case is measured anyway, by a worker started when it is due.
    model = case_dir / "cache_model.py"
    model.write_text(model.read_text().replace("nn.ReLU()", "nn.ReLU(), nn.Conv2d(4, 4, 1)"))
    assert main(argv) == ExitCode.CHECK_FAILED  # one more conv: a kernel over the budget
    out = capsys.readouterr().out
    assert prestarts == [1]
    assert "reused" not in out and "FAIL" in out and "kernels" in out
