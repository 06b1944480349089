"""examples/adopter end to end, as another repository adopts cl_validate: the wheel built from
a tagged checkout, installed with the example's own package into a fresh virtual environment
outside this source tree, the example's cases green with the installed ``cl-validate``; then
a model edit that adds a permute, red, with the annotation on the case file's budget line.

Installing torch and TVM into the fresh environment from an index takes minutes (2 min 52 s
measured on a 2-core machine, most of it downloading torch's CPU wheel and TVM), too slow for
every test run. The fresh environment sees this environment's third-party packages instead,
through a folder of links to them that leaves out cl_validate itself (its editable install
here), so cl_validate can only come from the wheel: the test checks that it does, and pip
installs with ``--no-index`` (nothing downloaded: every dependency must already be there).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "adopter"
TAG = "9.8.7"  # the tag this test gives its copy of the source: the version the wheel gets
#: What the fresh environment must not see from this one.
OURS = ("cl_validate", "__editable__", "_cl_validate", "adopter_models")

pytestmark = [pytest.mark.slow, pytest.mark.compile]


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None,
         timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"{proc.args}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a process in the adopting repository: none of this checkout's
    PYTHONPATH (the suite runs with the source tree on it), no virtual environment."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_CONSTRAINT", "PYTHONHOME")}
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "CL_VALIDATE_NO_CACHE": "1", **extra}


def _tagged_copy(dest: Path) -> Path:
    """This checkout's files (committed or not, never the ignored ones) in a git repository
    of their own, tagged v`TAG`: what a tag of cl_validate's repository holds."""
    files = _ok(_run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT))
    for name in filter(None, files.split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    git = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "commit", "-q", "--no-verify", "-m", "release"],
                ["git", "tag", f"v{TAG}"]):
        _ok(_run(cmd, cwd=dest, env=git))
    return dest


def _dependency_links(dest: Path) -> Path:
    """A folder of links to this environment's third-party packages (torch, TVM, numpy, ...),
    without cl_validate, its editable install's hooks and any .pth file."""
    torch = importlib.util.find_spec("torch")
    assert torch is not None and torch.origin is not None
    site = Path(torch.origin).parents[1]
    dest.mkdir()
    for entry in site.iterdir():
        if entry.name.startswith(OURS) or entry.suffix == ".pth":
            continue
        (dest / entry.name).symlink_to(entry)
    return dest


class _Clock:
    """Each phase's seconds, printed (``pytest -s`` shows where the time goes)."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def __call__(self, phase: str) -> None:
        now = time.monotonic()
        print(f"[adopter] {phase}: {now - self.last:.1f} s")
        self.last = now


def test_the_adopter_example_green_then_red_from_an_installed_wheel(tmp_path):
    clock = _Clock()
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the wheel's version comes from a git tag")
    src = _tagged_copy(tmp_path / "src")
    wheels = tmp_path / "wheels"
    # The `test` extra brings setuptools-scm: no build environment to download.
    isolation = [] if importlib.util.find_spec("setuptools_scm") is None else [
        "--no-build-isolation"]
    _ok(_run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w",
              str(wheels), str(src)], cwd=tmp_path, env=_clean_env()))
    (wheel,) = wheels.glob("cl_validate-*.whl")
    assert wheel.name.startswith(f"cl_validate-{TAG}-"), wheel.name
    clock("tagged copy and wheel")

    venv = tmp_path / "venv"
    _ok(_run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path))
    py = venv / "bin" / "python"
    purelib = Path(_ok(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_path("
                                           "'purelib'))"], cwd=tmp_path)).strip())
    deps = _dependency_links(tmp_path / "deps")
    (purelib / "_test_dependencies.pth").write_text(f"{deps}\n")
    repo = tmp_path / "adopter"  # the adopting repository's checkout
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info",
                                                                 "build"))
    # cl_validate from the wheel, the team's package from its checkout; --no-index: every
    # dependency (torch, TVM, ...) must be satisfied by what is there, nothing downloaded
    _ok(_run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-index",
              "--no-build-isolation", str(wheel), str(repo)], cwd=tmp_path,
             env=_clean_env(), timeout=600))
    clock("fresh venv, wheel and example installed")

    env = _clean_env(GITHUB_ACTIONS="true", GITHUB_WORKSPACE=str(repo))
    env.pop("GITHUB_STEP_SUMMARY", None)
    where = _ok(_run([str(py), "-c", "import cl_validate; print(cl_validate.__file__)"],
                     cwd=repo, env=env)).strip()
    assert Path(where).is_relative_to(purelib), where  # the wheel's, not this source tree
    cli = str(venv / "bin" / "cl-validate")
    version = _ok(_run([cli, "--version"], cwd=repo, env=env))
    assert version.startswith(f"cl-validate {TAG} (apache-tvm "), version
    _ok(_run([cli, "pins", "--check"], cwd=repo, env=env))

    green = _run([cli, "run", "cases", "--target", "llvm", "--junit", "reports/cl.xml"],
                 cwd=repo, env=env, timeout=600)
    assert green.returncode == 0, green.stdout + green.stderr
    assert "0 failed, 0 errors" in green.stdout and "::error" not in green.stdout
    clock("green run")

    # The regression: the team's model now swaps H and W between its blocks.
    nets = repo / "adopter_models" / "nets.py"
    text = nets.read_text()
    assert "        x = self.block(x)\n" in text
    nets.write_text(text.replace("        x = self.block(x)\n",
                                 "        x = self.block(x.permute(0, 1, 3, 2))\n"))
    red = _run([cli, "run", "cases", "--target", "llvm", "--junit", "reports/cl.xml"],
               cwd=repo, env=env, timeout=600)
    assert red.returncode == 1, red.stdout + red.stderr
    case = (repo / "cases" / "small_net.toml").read_text().splitlines()
    line = next(i for i, ln in enumerate(case, 1) if ln.startswith("layout_transforms ="))
    assert re.search(rf"^::error file=cases/small_net\.toml,line={line},title=cl_validate "
                     r"small_net \[llvm\] layout_transforms failed::layout_transforms 2 > "
                     r"budget 1 \(llvm\)", red.stdout, flags=re.M), red.stdout
    # the hint names the case by its path: it lives outside model_cases/
    assert "cl-validate show cases/small_net.toml --target llvm" in red.stdout
    assert sysconfig.get_path("purelib") != str(purelib)
    clock("red run")
