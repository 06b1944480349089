"""Shared fixtures. Tests run the real thing: real torch.export, real TVM compiles."""

from __future__ import annotations

import os
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"

warnings.filterwarnings("ignore", category=FutureWarning)

# Tests measure cold: a cached measurement would make a rerun trivially identical. Cache tests
# pass --cache-dir explicitly (which wins over this).
os.environ["CL_VALIDATE_NO_CACHE"] = "1"


@pytest.fixture(autouse=True, scope="session")
def _outside_github_actions():
    """The suite runs the CLI on failing tiny cases; under GitHub Actions that would append
    their reports to the real job summary. Tests of those outputs set the variables."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE"):
            mp.delenv(name, raising=False)
        yield


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def write_case(tmp_path: Path) -> Callable[..., Path]:
    """Write a case file into tmp_path (models from tests/data/tiny_models.py importable)."""

    def write(text: str, name: str = "case.toml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
        return path

    import sys

    if str(DATA) not in sys.path:
        sys.path.insert(0, str(DATA))
    return write


MINIMAL = """
model = "tiny_models:conv_relu"

[[inputs]]
name = "x"
shape = [1, 3, 16, 16]

[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]

[budget]
layout_transforms = 2
"""
