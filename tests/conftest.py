"""Shared fixtures. Tests run the real thing: real torch.export, real TVM compiles."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

DATA = Path(__file__).parent / "data"

warnings.filterwarnings("ignore", category=FutureWarning)

# Tests measure cold: a cached measurement would make a rerun trivially identical. Cache tests
# pass --cache-dir explicitly (which wins over this).
os.environ["CL_VALIDATE_NO_CACHE"] = "1"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the cores this process may run on. About a fifth of
    a worker's time is spent waiting (a case process starting, a pipe, a signal, a
    timeout), so on a 2-core runner two workers kept the CPUs busy 1.6 of 2: three took the
    suite from 19:55 to 16:37 on this project's 2-core machine (CPU 191%)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    return cores + 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest first: the modules with a ``slow`` test (a minute or more each), then those
    that compile models or run property tests (``fuzz``), then the rest, each module's tests
    kept together and in order. The
    suite runs on a worker per core (xdist hands out tests in this order): a minute-long
    test collected last kept one core busy after the other had finished everything else."""

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("slow"):
            return 0
        return 1 if item.get_closest_marker("compile") or item.get_closest_marker("fuzz") else 2

    by_module: dict[str, int] = {}
    for item in items:
        key = item.nodeid.split("::", 1)[0]
        by_module[key] = min(by_module.get(key, 2), rank(item))
    order = {key: i for i, key in enumerate(by_module)}
    items.sort(key=lambda it: (by_module[it.nodeid.split("::", 1)[0]],
                               order[it.nodeid.split("::", 1)[0]]))


@pytest.fixture(autouse=True, scope="session")
def _outside_github_actions():
    """The suite runs the CLI on failing tiny cases; under GitHub Actions that would append
    their reports to the real job summary. Tests of those outputs set the variables. The
    same for TVM's RPC tracker variables: tests that use one start their own."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE"):
            mp.delenv(name, raising=False)
        # A developer's RPC tracker must not turn the suite's skips into remote runs.
        for name in ("TVM_TRACKER_HOST", "TVM_TRACKER_PORT", "TVM_TRACKER_KEY",
                     "RPC_DEVICE_KEY"):
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


def tiny_case(budget: int | str = 2, *, kernels: int | None = None,
              model: str = "tiny_models:conv_relu", targets: tuple[str, ...] | None = ("llvm",),
              tolerance: tuple[float, float] | None = (1e-4, 1e-4), extra: str = "",
              comments: bool = False) -> str:
    """The small case file most tests run: tests/data/tiny_models.py's conv → ReLU → conv at
    1×3×16×16, NCHW in and out, so its whole budget is the two boundary transforms.

    Line numbers (no `extra`, no `comments`): model 1, targets 2, [budget] 11,
    layout_transforms 12, kernels 13 when given. `targets=None` leaves the default (llvm
    and cuda), `tolerance=None` the default tolerance; `extra` lines go after targets;
    `comments` adds a header comment and comments in [budget], as people write them (for the
    rewrites that must keep them; it shifts the lines by two).
    """
    lines = ["# Tiny conv-ReLU-conv; NCHW in and out."] if comments else []
    lines.append(f'model = "{model}"')
    if targets is not None:
        lines.append("targets = [" + ", ".join(f'"{t}"' for t in targets) + "]")
    if extra:
        lines.append(extra.rstrip("\n"))
    lines += ["", "[[inputs]]", 'name = "x"', "shape = [1, 3, 16, 16]", "", "[layout]",
              '"relax.nn.conv2d" = ["NHWC", "OHWI"]', "", "[budget]"]
    if comments:
        lines.append("# the two NCHW boundaries")
    lines.append(f"layout_transforms = {budget}" + ("   # boundaries" if comments else ""))
    if kernels is not None:
        lines.append(f"kernels = {kernels}")
    if tolerance is not None:
        lines += ["", "[tolerance]", f"rtol = {tolerance[0]:g}", f"atol = {tolerance[1]:g}"]
    return "\n".join(lines) + "\n"


#: The tiny case on both targets with the default tolerance (budget at line 11... see
#: `tiny_case`): what a minimal valid case file looks like.
MINIMAL = tiny_case(targets=None, tolerance=None)


class CliRun(NamedTuple):
    code: int
    out: str
    err: str

    def both(self) -> tuple[int, str]:
        """The exit code, and stdout and stderr together (for assertions that do not care
        which stream a line went to)."""
        return self.code, self.out + self.err


def run_cli(argv: list[str]) -> CliRun:
    """``cl-validate ARGV`` in this process, its stdout and stderr captured."""
    from cl_validate.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return CliRun(code, out.getvalue(), err.getvalue())


def by_case(xml: Any) -> dict[str, dict[str, Any]]:
    """A parsed JUnit report (junitparser) of a one-target run as case name → check →
    testcase (the testcase ``layout_transforms[llvm]`` under ``layout_transforms``)."""
    out: dict[str, dict[str, Any]] = {}
    for suite in xml:
        for tc in suite:
            out.setdefault(tc.classname, {})[tc.name.split("[")[0]] = tc
    return out


#: The parent of a real run, as the CLI runs it, in a process of its own; afterwards it says
#: which heavy modules it holds (it must hold none).
PARENT = ("import sys; from cl_validate.cli import main; code = main(sys.argv[1:]); "
          "print('PARENT-MODULES', sorted({m.split('.')[0] for m in sys.modules} & "
          "{'torch', 'tvm'})); sys.exit(code)")
#: Set to a fresh token in a run's environment: everything the run starts inherits it.
TOKEN_ENV = "CL_VALIDATE_TEST_RUN"


def left_behind(token: str) -> list[str]:
    """Processes of the run started with `token` still alive (`TOKEN_ENV`)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if f"{TOKEN_ENV}={token}".encode() in env.split(b"\0"):
            out.append(f"{pid}: {cmd.decode(errors='replace')}")
    return out


def run_parent(args: list[str], env: dict[str, str] | None = None, timeout: float = 300
               ) -> subprocess.CompletedProcess[str]:
    """``cl-validate ARGS`` as a run's parent of its own (`PARENT`), unbuffered, with `env`
    added to this process's environment."""
    full = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, "-c", PARENT, *args], capture_output=True,
                          text=True, timeout=timeout, env=full)


def passed(checks: dict[str, Any]) -> bool:
    """Every check of one case (`by_case`'s value) passed or was skipped."""
    return not any(tc.is_failure or tc.is_error for tc in checks.values())


def case_error(checks: dict[str, Any]) -> Any:
    """The error of a case that could not be measured (its compile check's only result)."""
    (error,) = checks["compile"].result
    return error


def benchmark_module(name: str) -> Any:
    """benchmarks/`name`.py loaded as a module (the benchmarks are scripts, not a package),
    for a test that pins what a benchmark measures."""
    import importlib.util

    path = Path(__file__).parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def git(repo: Path, *args: str) -> None:
    """``git ARGS`` in `repo`, with an author for commits; a failure raises."""
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                   check=True, capture_output=True)


def judge_check(name: str, case: Any, target: str, stale: Any = None, **measured: Any) -> Any:
    """One check's verdict on a hand-built measurement (`measured`: `Measurement` fields)."""
    from cl_validate.checks.registry import Judging, get
    from cl_validate.measurements.measurement import Measurement
    from cl_validate.spec.config import StalePolicy

    m = Measurement(target, **measured)
    return get(name).judge(Judging(case, m, stale or StalePolicy.FAIL))


def tvm_outputs(model: Any, x: Any, decompose: bool = False, dtype: str | None = None
                ) -> list[Any]:
    """`model` exported (with the pipeline's decompositions when `decompose`), imported with
    our converters, built for llvm and run on `x`: its outputs, as numpy arrays (`x` cast
    to `dtype` first, the outputs read as float32, where `dtype` is given)."""
    import torch
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map
    from cl_validate.compile.decompositions import decompositions

    if dtype is not None:
        x = x.to(getattr(torch, dtype))
    ep = torch.export.export(model, (x,))
    if decompose:
        ep = ep.run_decompositions(decompositions())
    mod = from_exported_program(ep, custom_convert_map=custom_convert_map())
    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})),
                              tvm.cpu())
    outs = [g.numpy() for g in vm["main"](tvm.runtime.tensor(x.numpy()))]
    return outs if dtype is None else [o.astype("float32") for o in outs]
