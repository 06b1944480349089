"""The pytest plugin, run as a user runs it: ``pytest model_cases/`` in a subprocess on a
folder with a tiny passing case and a tiny over-budget case (real compiles), with pytest's
own ``--junitxml`` and with pytest-xdist ``-n 2``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cl_validate.checks.registry import names
from tests.conftest import tiny_case

CHECKS = names()

DATA = Path(__file__).parent / "data"


PASS_ID = "model_cases/ok.toml::ok::{check}[llvm]"
OVER_ID = "model_cases/over.toml::over::{check}[llvm]"


def _project(root: Path) -> Path:
    cases = root / "model_cases"
    cases.mkdir(parents=True)
    shutil.copy(DATA / "tiny_models.py", cases / "tiny_models.py")
    (cases / "ok.toml").write_text(tiny_case(2, kernels=4),
                                   encoding="utf-8")
    # Over budget, and no kernel budget: its `kernels` check skips.
    (cases / "over.toml").write_text(tiny_case(1), encoding="utf-8")
    # Its factory raises: one error (compile), the other checks not run.
    (cases / "broken.toml").write_text(tiny_case(model="tiny_models:raises"), encoding="utf-8")
    # TOML that is not a case: pytest must not choke on it, nor collect it.
    (cases / "settings.toml").write_text('title = "not a case"\n', encoding="utf-8")
    (root / "pyproject.toml").write_text('[project]\nname = "demo"\nversion = "0"\n',
                                         encoding="utf-8")
    return root


def _pytest(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env["COLUMNS"] = "200"  # the summary lines whole, not cut at 80 columns
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _outcomes(junit: Path) -> dict[str, tuple[str, ET.Element | None]]:
    """``classname::name`` -> (outcome, result element) from pytest's JUnit file."""
    out: dict[str, tuple[str, ET.Element | None]] = {}
    for tc in ET.parse(junit).getroot().iter("testcase"):
        kind, elem = "passed", None
        for tag in ("failure", "error", "skipped"):
            if (found := tc.find(tag)) is not None:
                kind, elem = tag, found
        out[f"{tc.get('classname')}::{tc.get('name')}"] = (kind, elem)
    return out


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _project(tmp_path_factory.mktemp("plugin"))


@pytest.fixture(scope="module")
def plain_run(project: Path) -> subprocess.CompletedProcess[str]:
    return _pytest(project, "model_cases", "-v", "-rfEs", "--junitxml=plain.xml")


@pytest.fixture(scope="module")
def xdist_run(project: Path) -> subprocess.CompletedProcess[str]:
    return _pytest(project, "model_cases", "-n", "2", "--dist", "loadscope",
                   "--junitxml=xdist.xml")



@pytest.mark.compile
def test_collects_case_target_check_items(plain_run):
    out = plain_run.stdout
    assert plain_run.returncode == 1, out + plain_run.stderr  # pytest: some test failed
    for check in ("layout", "layout_transforms", "kernels", "numerics"):
        assert f"{PASS_ID.format(check=check)} PASSED" in out, out
    assert f"{OVER_ID.format(check='layout_transforms')} FAILED" in out
    assert f"{OVER_ID.format(check='layout')} PASSED" in out
    assert f"collected {3 * len(CHECKS)} items" in out  # 3 cases x llvm x every check
    assert "settings.toml" not in out and "pyproject.toml::" not in out
    assert "plugins:" in out and "cl_validate" in out.split("plugins:")[1].splitlines()[0]


@pytest.mark.compile
def test_failure_message_is_the_cli_message_then_the_body(plain_run):
    out = plain_run.stdout
    assert ("FAILED model_cases/over.toml::over::layout_transforms[llvm] - "
            "layout_transforms 2 > budget 1 (llvm)") in out
    section = out.split("over::layout_transforms[llvm] _", 1)[1]
    lines = section.splitlines()
    assert lines[1].startswith("layout_transforms 2 > budget 1 (llvm)")  # no traceback first
    assert ">>" in section and "permute_dims" in section
    assert "Traceback" not in out and "pytest_plugin.py" not in out


@pytest.mark.compile
def test_skips_carry_the_reason_at_the_case_file_line(plain_run):
    out = plain_run.stdout
    assert f"{OVER_ID.format(check='kernels')} SKIPPED" in out
    skips = [ln for ln in out.splitlines() if ln.startswith("SKIPPED [")]
    assert any(ln.startswith("SKIPPED [1] model_cases/over.toml:11: no kernel budget declared")
               for ln in skips), skips
    assert all("pytest_plugin" not in ln for ln in skips)  # never a line of the plugin


@pytest.mark.compile
def test_junitxml_has_the_verdicts_and_messages(plain_run, project):
    results = _outcomes(project / "plain.xml")
    assert results["model_cases.ok.toml.ok::layout_transforms[llvm]"][0] == "passed"
    assert results["model_cases.ok.toml.ok::numerics[llvm]"][0] == "passed"
    kind, failure = results["model_cases.over.toml.over::layout_transforms[llvm]"]
    assert kind == "failure" and failure is not None
    message = failure.get("message") or ""
    assert message.splitlines()[0].startswith("layout_transforms 2 > budget 1 (llvm)")
    assert ">>" in (failure.text or "")
    root = ET.parse(project / "plain.xml").getroot()
    over = next(tc for tc in root.iter("testcase") if tc.get("classname") ==
                "model_cases.over.toml.over" and tc.get("name") == "layout_transforms[llvm]")
    props = {p.get("name"): p.get("value") for p in over.iter("property")}
    assert props["layout_transforms"] == "2" and props["budget"] == "1"
    errors = [k for k, (kind, _) in results.items() if kind == "error"]
    assert errors == ["model_cases.broken.toml.broken::compile[llvm]"]


@pytest.mark.compile
def test_a_case_that_errors_is_one_error_and_its_other_checks_are_not_run(plain_run, project):
    out = plain_run.stdout
    assert ("ERROR model_cases/broken.toml::broken::compile[llvm] - Failed: "
            "model_cases/broken.toml:1: "
            "model factory 'tiny_models:raises' raised RuntimeError: weights file missing") in out
    results = _outcomes(project / "plain.xml")
    for check in ("layout", "layout_transforms", "kernels", "kernel_list", "numerics"):
        kind, skip = results[f"model_cases.broken.toml.broken::{check}[llvm]"]
        assert kind == "skipped" and skip is not None
        assert skip.get("message") == "not run: the case errored"


@pytest.mark.compile
def test_worker_processes_give_the_same_verdicts(plain_run, project):
    """--cl-timeout runs each case in a worker process (as cl-validate run does), where a
    factory that raises is found too."""
    proc = _pytest(project, "model_cases", "--cl-timeout", "300", "--junitxml=isolated.xml")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    plain = {k: kind for k, (kind, _) in _outcomes(project / "plain.xml").items()}
    isolated = {k: kind for k, (kind, _) in _outcomes(project / "isolated.xml").items()}
    assert isolated == plain


@pytest.mark.compile
def test_xdist_gives_the_same_verdicts(plain_run, xdist_run, project):
    assert xdist_run.returncode == 1, xdist_run.stdout + xdist_run.stderr
    assert "2 workers" in xdist_run.stdout
    plain = {k: kind for k, (kind, _) in _outcomes(project / "plain.xml").items()}
    xdist = {k: kind for k, (kind, _) in _outcomes(project / "xdist.xml").items()}
    assert xdist == plain
    _, failure = _outcomes(project / "xdist.xml")[
        "model_cases.over.toml.over::layout_transforms[llvm]"]
    assert failure is not None
    assert (failure.get("message") or "").startswith("layout_transforms 2 > budget 1 (llvm)")


def test_a_node_id_from_the_report_selects_one_check(project):
    node = OVER_ID.format(check="layout_transforms")
    proc = _pytest(project, node, "--co", "-q")
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines()[0] == node and "1 test collected" in proc.stdout


def test_bad_case_file_is_a_one_line_collection_error(tmp_path):
    cases = tmp_path / "model_cases"
    cases.mkdir()
    (cases / "typo.toml").write_text("layuot = 1\n" + tiny_case(2),
                                     encoding="utf-8")
    proc = _pytest(tmp_path, "model_cases", "-q")
    assert proc.returncode == 2, proc.stdout  # pytest: interrupted by a collection error
    assert ("model_cases/typo.toml:1: unknown key 'layuot' in [case] "
            "(hint: did you mean 'layout'?)") in proc.stdout.splitlines(), proc.stdout
    assert "Traceback" not in proc.stdout


def test_case_toml_outside_case_folders_is_not_collected_and_nothing_heavy_loads(tmp_path):
    # As in this repository: tests/data holds case files that `pytest tests` must not run.
    fixtures = tmp_path / "tests" / "data"
    fixtures.mkdir(parents=True)
    (fixtures / "case.toml").write_text(tiny_case(2), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "pytest", "-p",
                           "no:cacheprovider", "--co", "-q", "tests"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 5, proc.stdout  # pytest: no tests collected
    imported = {ln.split("|")[-1].strip() for ln in proc.stderr.splitlines() if "|" in ln}
    assert "cl_validate.spec" in imported  # the plugin loaded (its own import is not logged:
    # pytest imports plugins through its assertion rewriter)
    assert not {m for m in imported if m.split(".")[0] in ("torch", "tvm")}
    # Named on the command line, the same file is a case.
    proc = _pytest(tmp_path, "tests/data/case.toml", "--co", "-q")
    assert "tests/data/case.toml::case::layout[llvm]" in proc.stdout


def test_an_unknown_cl_target_is_a_usage_error_not_an_empty_session(tmp_path):
    project = _project(tmp_path)
    proc = _pytest(project, "model_cases", "--cl-target", "lvm", "--collect-only", "-q")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "--cl-target: unknown target 'lvm' (hint: did you mean 'llvm'?)" in proc.stderr


@pytest.mark.compile
def test_a_models_text_is_printed_escaped_as_the_cli_prints_it(tmp_path):
    """A dict output's key and a factory's exception carry escape sequences, a bidi override,
    ``\\r`` and a line that is a GitHub workflow command: pytest's report shows them escaped,
    and no line of it is a workflow command (before: raw, so `::error file=...` annotated a
    file of the reviewer's choosing)."""
    cases = tmp_path / "model_cases"
    cases.mkdir()
    for f in ("tiny_models.py", "hostile_models.py"):
        shutil.copy(DATA / f, cases / f)
    (cases / "key.toml").write_text(tiny_case(model="hostile_models:evil_output_key"))
    (cases / "esc.toml").write_text(tiny_case(model="hostile_models:raises_escapes"))
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "d"\nversion = "0"\n')
    proc = _pytest(tmp_path, "model_cases", "-rfEs")
    out = proc.stdout + proc.stderr
    assert "numerics output \\x1b[2J" in out and "raised RuntimeError: \\x1b[2J" in out, out
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", out), repr(out)
    assert not [ln for ln in out.splitlines() if ln.lstrip().startswith("::")], out
