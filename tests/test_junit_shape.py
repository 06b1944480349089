"""The JUnit shape the publishers depend on (EnricoMi/publish-unit-test-result-action,
mikepenz/action-junit-report, dorny/test-reporter), asserted on real runs:

- a test is keyed by (classname, name) across all suites, so the target is in the name
  (``layout_transforms[llvm]``), the same id as the pytest plugin's items;
- ``file`` is relative to the repository root with forward slashes, from any working
  directory (annotations are resolved against the checkout);
- every testcase has a ``line``, skipped ones too;
- the testcases' times add up to the run's wall time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cl_validate.checks.registry import names
from cl_validate.errors import ExitCode
from tests.conftest import DATA, run_cli, tiny_case

CHECKS = names()

pytestmark = pytest.mark.compile
NAME = re.compile(rf"^({'|'.join(CHECKS)})\[(llvm|cuda)\]$")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository (it has .git) with its cases one folder down."""
    root = tmp_path_factory.mktemp("repo")
    (root / ".git").mkdir()
    cases = root / "model_cases"
    cases.mkdir()
    shutil.copy(DATA / "tiny_models.py", cases)
    (cases / "ok.toml").write_text(tiny_case(targets=("llvm", "cuda")))
    (cases / "over.toml").write_text(tiny_case(1, kernels=4))
    (cases / "broken.toml").write_text(tiny_case(model="tiny_models:raises"))
    return root


@pytest.fixture(scope="module")
def from_subfolder(repo: Path) -> tuple[ET.Element, float]:
    """``cd model_cases && cl-validate run .`` — the report, and the run's wall time."""
    junit = repo / "r.xml"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cl_validate", "run", ".", "-j", "1",
                           "--no-cache", "--junit", str(junit)], cwd=repo / "model_cases",
                          capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "GITHUB_WORKSPACE"})
    wall = time.perf_counter() - t0
    assert proc.returncode == ExitCode.CHECK_FAILED, proc.stdout + proc.stderr
    return ET.parse(junit).getroot(), wall


def _testcases(root: ET.Element) -> list[tuple[str, ET.Element]]:
    return [(s.get("name", ""), tc) for s in root.iter("testsuite") for tc in s.iter("testcase")]


def test_names_carry_the_target_and_every_test_is_unique_by_classname_and_name(from_subfolder):
    root, _ = from_subfolder
    keys = []
    for suite, tc in _testcases(root):
        m = NAME.match(tc.get("name", ""))
        assert m, tc.get("name")
        assert suite == f"cl_validate.{m.group(2)}"  # the name's target is the suite's
        keys.append((tc.get("classname"), tc.get("name")))
    assert len(keys) == len(set(keys))
    # ok.toml on both targets, over and broken on llvm: 4 case x target runs, 6 checks each
    assert len(keys) == 4 * len(CHECKS)
    assert ("ok", "numerics[cuda]") in keys and ("ok", "numerics[llvm]") in keys


def test_file_is_relative_to_the_repository_root_from_a_subfolder(from_subfolder, repo):
    root, _ = from_subfolder
    files = {tc.get("file") for _, tc in _testcases(root)}
    assert files == {"model_cases/ok.toml", "model_cases/over.toml", "model_cases/broken.toml"}
    for f in files:
        assert (repo / f).is_file() and "\\\\" not in f and not f.startswith("/")


def test_github_workspace_wins_over_the_git_top_level(repo, tmp_path):
    junit = tmp_path / "r.xml"
    env = {**os.environ, "GITHUB_WORKSPACE": str(repo / "model_cases")}
    proc = subprocess.run([sys.executable, "-m", "cl_validate", "run", "model_cases/over.toml",
                           "--no-cache", "-j", "1", "--junit", str(junit)], cwd=repo,
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == ExitCode.CHECK_FAILED, proc.stdout + proc.stderr
    assert {tc.get("file") for _, tc in _testcases(ET.parse(junit).getroot())} == {
        "over.toml"}


def test_every_testcase_has_a_line_that_declares_what_it_checks(from_subfolder, repo):
    root, _ = from_subfolder
    for _, tc in _testcases(root):
        line = tc.get("line")
        assert line and int(line) >= 1, (tc.get("classname"), tc.get("name"))
        text = (repo / tc.get("file", "")).read_text().splitlines()
        assert int(line) <= len(text)
    skipped = {(tc.get("classname"), tc.get("name")): tc for _, tc in _testcases(root)
               if tc.find("skipped") is not None}
    # A skip points at what it is about: no kernel budget -> the [budget] table.
    over = skipped[("over", "kernel_list[llvm]")]
    assert over.find("skipped").get("message", "").startswith("no baseline")
    ok_kernels = skipped[("ok", "kernels[llvm]")]
    ok_text = (repo / "model_cases/ok.toml").read_text().splitlines()
    assert ok_text[int(ok_kernels.get("line")) - 1] == "[budget]"
    assert "no kernel budget declared" in ok_kernels.find("skipped").get("message", "")
    cuda = skipped[("ok", "numerics[cuda]")]
    assert "no cuda device on this machine" in cuda.find("skipped").get("message", "")


def test_testcase_times_add_up_to_the_run(from_subfolder):
    """-j 1: every second the one worker spent (its start, each case x target) belongs to a
    testcase; the rest is this process starting and writing the reports."""
    root, wall = from_subfolder
    total = sum(float(tc.get("time", "0")) for _, tc in _testcases(root))
    suites = sum(float(s.get("time", "0")) for s in root.iter("testsuite"))
    assert abs(suites - total) < 0.01
    # The gap is cl-validate's own start and the reports: under a second here, a few on a
    # loaded machine; a run reporting a fraction of its time (what #14 found) fails.
    assert total <= wall and wall - total < max(3.0, 0.2 * wall), (total, wall)


def test_every_suite_has_all_five_counts_and_the_root_adds_them_up(from_subfolder):
    """EnricoMi's junitparser recomputes a suite (its time too) when any of tests, failures,
    errors, skipped, time is missing; dorny shows the root's time, EnricoMi the suites' sum,
    mikepenz the testcases' sum: they must all agree."""
    root, _ = from_subfolder
    suites = list(root.iter("testsuite"))
    for s in suites:
        tcs = s.findall("testcase")
        assert {k: s.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
            "tests": str(len(tcs)),
            "failures": str(sum(tc.find("failure") is not None for tc in tcs)),
            "errors": str(sum(tc.find("error") is not None for tc in tcs)),
            "skipped": str(sum(tc.find("skipped") is not None for tc in tcs))}
        assert abs(float(s.get("time", "nan")) - sum(float(tc.get("time", "0"))
                                                     for tc in tcs)) < 0.01
    assert abs(float(root.get("time", "nan")) - sum(float(s.get("time", "0"))
                                                    for s in suites)) < 0.01


def test_the_cli_and_the_plugin_name_a_check_alike(repo, tmp_path):
    """The same ids: ``<check>[<target>]`` under the case."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co",
                           "-q", "model_cases/over.toml"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)
    items = {ln.rsplit("::", 1)[-1] for ln in proc.stdout.splitlines() if "::" in ln}
    code, _, _ = run_cli(["run", str(repo / "model_cases" / "over.toml"), "--no-isolation",
                          "--no-cache", "--junit", str(tmp_path / "r.xml")])
    assert code == ExitCode.CHECK_FAILED
    names = {tc.get("name") for _, tc in _testcases(ET.parse(tmp_path / "r.xml").getroot())}
    assert names == items and len(names) == len(CHECKS)
