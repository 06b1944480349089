"""The same case gives the same verdicts, kernel list and numerics on every run.

A gate that flips between runs is worse than none: reviewers learn to re-run until green.
Two CLI runs of the same cases, in separate processes with different hash seeds (so any
dependence on set or dict ordering of hashed names would show), must write JUnit reports that
agree on everything but timings and timestamps.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cl_validate.errors import ExitCode

pytestmark = pytest.mark.compile
DATA = Path(__file__).parent / "data"

CASES = {
    "conv_nhwc.toml": """
model = "tiny_models:conv_relu"
targets = ["llvm"]

[[inputs]]
name = "x"
shape = [1, 3, 16, 16]
layout = "NHWC"

[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]

[budget]
layout_transforms = 1
kernels = 3

[tolerance]
rtol = 1e-4
atol = 1e-4
""",
    "classifier.toml": """
model = "tiny_models:classifier"
targets = ["llvm"]

[[inputs]]
name = "x"
shape = [1, 3, 16, 16]
range = [-4.0, 4.0]

[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]

[budget]
layout_transforms = 1

[tolerance]
rtol = 1e-4
atol = 1e-4
""",
}
_VOLATILE = ("time", "timestamp", "hostname")
#: Figures that are timings and memory, as variable as ``time`` (the compile testcase's).
_VOLATILE_FIGURES = ("compile_seconds", "peak_rss_mb")


def _testcases(path: Path) -> dict[tuple[str, str, str], str]:
    """Each testcase as canonical XML, keyed by (suite, case, check), timings removed."""
    out: dict[tuple[str, str, str], str] = {}
    for suite in ET.parse(path).getroot().iter("testsuite"):
        for tc in suite.iter("testcase"):
            for attr in _VOLATILE:
                tc.attrib.pop(attr, None)
            for props in tc.findall("properties"):
                for p in props.findall("property"):
                    if p.get("name") in _VOLATILE_FIGURES:
                        props.remove(p)
            out[(suite.get("name", ""), tc.get("classname", ""), tc.get("name", ""))] = (
                ET.canonicalize(ET.tostring(tc, encoding="unicode")))
    return out


def _properties(path: Path, check: str) -> dict[str, dict[str, str]]:
    root = ET.parse(path).getroot()
    return {tc.get("classname", ""): {p.get("name", ""): p.get("value", "")
                                      for p in tc.iter("property")}
            for tc in root.iter("testcase") if tc.get("name", "").split("[")[0] == check}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("determinism")
    cases = root / "cases"
    cases.mkdir()
    shutil.copy(DATA / "tiny_models.py", cases / "tiny_models.py")
    for name, text in CASES.items():
        (cases / name).write_text(text.lstrip(), encoding="utf-8")
    reports = [root / f"run{seed}" / "r.xml" for seed in (1, 2)]
    # Each run is its own process (--no-isolation: no worker on top, to keep this fast).
    procs = [subprocess.Popen([sys.executable, "-m", "cl_validate", "run", str(cases),
                               "--no-isolation", "--junit", str(report)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              cwd=root, env={**os.environ, "PYTHONHASHSEED": str(seed)})
             for seed, report in zip((1, 2), reports, strict=True)]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == ExitCode.OK, out
    return reports[0], reports[1]


def test_reports_agree_on_everything_but_timings(two_runs: tuple[Path, Path]) -> None:
    first, second = (_testcases(r) for r in two_runs)
    assert set(first) == set(second)
    assert len(first) >= 8  # two cases, every check
    for key in first:
        assert first[key] == second[key], key


def test_kernel_lists_are_identical_and_complete(two_runs: tuple[Path, Path]) -> None:
    bodies = []
    for report in two_runs:
        root = ET.parse(report).getroot()
        (tc,) = [tc for tc in root.iter("testcase") if tc.get("classname") == "conv_nhwc"
                 and tc.get("name") == "layout_transforms[llvm]"]
        body = tc.findtext("system-out") or ""
        assert "kernel list (3 kernels" in body and "fused_conv2d" in body
        bodies.append(body)
    assert bodies[0] == bodies[1]


def test_numerics_figures_are_bit_for_bit_the_same(two_runs: tuple[Path, Path]) -> None:
    first, second = (_properties(r, "numerics") for r in two_runs)
    assert set(first) == {"conv_nhwc", "classifier"}
    for case in first:
        assert first[case]["max_abs"] == second[case]["max_abs"]
        assert first[case]["max_rel"] == second[case]["max_rel"]
    kernels = [_properties(r, "kernels") for r in two_runs]
    assert kernels[0] == kernels[1] and kernels[0]["conv_nhwc"]["kernels"] == "3"
