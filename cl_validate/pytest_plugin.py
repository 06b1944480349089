"""pytest plugin: ``pytest model_cases/`` runs every case's checks as pytest tests.

Each case file is a collector holding its case; the case's items are ``check[target]``, so
node ids read ``model_cases/resnet50.toml::resnet50::layout_transforms[llvm]`` — the target
is the parameter, at the end, where pytest expects one: such an id can be passed back to
pytest to re-run one check, and ``--junitxml`` writes classname ``model_cases.resnet50.toml.
resnet50`` and name ``layout_transforms[llvm]``. (An id with the bracket in the middle,
``resnet50[llvm]::layout_transforms``, is neither selectable nor named right in JUnit by
pytest 9.) The verdicts and one-line messages are the CLI's: a failed check fails with the
check's message followed by its body (kernel list, error figures), a skipped check skips
with its reason, and a check that errored (the compile failed, the factory raised) is a
pytest error.

The compile runs once per case × target: the first item of a target runs it and the case
collector keeps the `CaseResult` for that target's other checks. Under pytest-xdist use
``--dist loadscope`` (or ``loadfile``), which sends every item of one case to the same
worker; with the default ``--dist load`` the verdicts are the same, but a case may compile
on two workers.

Which TOML files are cases: a ``*.toml`` with a top-level ``model`` key that is named on the
command line or lies in a folder named by the ``cl_validate_case_dirs`` ini option
(default: ``model_cases``). So ``pytest tests`` never compiles a fixture case lying in
``tests/data``, and pyproject.toml is never read as a case.

Cases run in the pytest process (no timeout or memory cap) unless ``--cl-timeout`` or
``--cl-max-memory-mb`` is given: then each case runs in processes of its own with those
limits, as under ``cl-validate run``. Disable the plugin with ``-p no:cl_validate``.

Imports nothing heavy at startup: torch and TVM load only when a case item runs.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cl_validate.checks.judge import declaring_line
from cl_validate.checks.registry import names
from cl_validate.checks.verdict import CaseResult, CheckResult, Status, check_id
from cl_validate.errors import UsageError
from cl_validate.paths import read_regular
from cl_validate.report.escape import log_text, one_line
from cl_validate.spec import CaseSpec, load_case, tomllib
from cl_validate.spec.lines import toml_text
from cl_validate.spec.options import (
    RunOptions,
    add_to_pytest,
    check_target_names,
    run_options,
    selected_targets,
)
from cl_validate.suite.driver import Measurer, run_suite
from cl_validate.suite.pool import WorkerPool

CASE_DIRS_INI = "cl_validate_case_dirs"
_options_key = pytest.StashKey["RunOptions"]()
_pool_key = pytest.StashKey["WorkerPool"]()
_cases_key = pytest.StashKey[list[CaseSpec]]()  # every case collected (--cl-target's check)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_to_pytest(parser.getgroup("cl_validate", "cl_validate model cases"))
    parser.addini(CASE_DIRS_INI, type="args", default=["model_cases"],
                  help="folder names whose *.toml files with a `model` key are collected as "
                  "cl_validate cases (default: model_cases)")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> CaseFile | None:
    if file_path.suffix != ".toml":
        return None
    explicit = parent.session.isinitpath(file_path)
    dirs = set(parent.config.getini(CASE_DIRS_INI))
    if not explicit and not dirs.intersection(file_path.parent.parts):
        return None
    if not _looks_like_case(file_path):
        return None
    return CaseFile.from_parent(parent, path=file_path)


def _looks_like_case(path: Path) -> bool:
    """A case file has a top-level ``model`` key. One that does not parse is collected
    anyway, so its syntax error is reported (with the line) rather than silently skipped."""
    try:  # never opens a FIFO or a device named *.toml (collected: loading it says what it is)
        data = tomllib.loads(toml_text(read_regular(path), str(path)))
    except (OSError, UsageError, tomllib.TOMLDecodeError, RecursionError):
        return True
    return "model" in data


def pytest_collection_finish(session: pytest.Session) -> None:
    """A ``--cl-target`` that no collected case, the project or cl_validate knows is a usage
    error, as under ``cl-validate run`` — not a session that quietly runs nothing of it."""
    try:
        cases: list[CaseSpec] = session.config.stash.get(_cases_key, [])
        check_target_names(cases, _run_options(session.config))
    except UsageError as exc:
        raise pytest.UsageError(f"--cl-target: {exc}") from None


def pytest_sessionfinish(session: pytest.Session) -> None:
    pool = session.config.stash.get(_pool_key, None)
    if pool is not None:
        pool.shutdown()
        del session.config.stash[_pool_key]


def _run_options(config: pytest.Config) -> RunOptions:
    """The shared run options from ``--cl-*`` and ``[tool.cl_validate]`` (read once)."""
    if _options_key not in config.stash:
        def get(dest: str) -> Any:
            return config.getoption(f"cl_{dest}", default=None)

        isolate = get("timeout") is not None or get("max_memory_mb") is not None
        config.stash[_options_key] = replace(
            run_options(get, in_process_default=not isolate), jobs=1)
    return config.stash[_options_key]


class CheckFailed(Exception):
    """A check's verdict was FAILED: its message, then its body."""


def _one_line(excinfo: pytest.ExceptionInfo[BaseException]) -> str | None:
    """Our own errors print as the CLI prints them: one line, no traceback."""
    return str(excinfo.value) if isinstance(excinfo.value, UsageError) else None


class CaseFile(pytest.File):
    """One case file: validated on collection (a bad file is a one-line collection error)."""

    def collect(self) -> Iterator[CaseNode]:
        case = load_case(self.path)
        _run_options(self.config)  # a bad [tool.cl_validate] is this file's one-line error
        self.config.stash.setdefault(_cases_key, []).append(case)
        yield CaseNode.from_parent(self, name=case.name, case=case)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> Any:
        return _one_line(excinfo) or super().repr_failure(excinfo)


class CaseNode(pytest.Collector):
    """One case: a ``check[target]`` item per selected target and check, and a
    ``check[variant-target]`` one per [[variants]] entry. Compiles each run × target on first
    use and keeps the result for its other checks."""

    def __init__(self, *, case: CaseSpec, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self._results: dict[tuple[str, str], CaseResult | BaseException] = {}

    def collect(self) -> Iterator[CheckItem]:
        for run in self.case.expand():
            variant = run.variant.name if run.variant else None
            for target in selected_targets(run, _run_options(self.config)):
                for check in names():
                    yield CheckItem.from_parent(self, name=check_id(check, target, variant),
                                                check=check, target=target, run=run)

    def check(self, run: CaseSpec, target: str, name: str) -> CheckResult:
        key = (run.label, target)
        if key not in self._results:
            try:
                self._results[key] = self._run(run, target)
            except Exception as exc:  # every check of this run × target reports it
                self._results[key] = exc
        result = self._results[key]
        if isinstance(result, BaseException):
            raise result
        return result.check(name)

    def _run(self, run: CaseSpec, target: str) -> CaseResult:
        options = replace(_run_options(self.config), targets=(target,))
        with warnings.catch_warnings():  # as the CLI: torch.export's noise is not ours
            warnings.simplefilter("ignore", FutureWarning)
            warnings.filterwarnings("ignore", category=UserWarning, module="torch")
            results: list[CaseResult] = []
            run_suite([run], options, results.append, self._measurer(options))
        (result,) = [r for r in results if r.target == target]
        return result

    def _measurer(self, options: RunOptions) -> Measurer:
        """This process (the default), or the session's case processes under --cl-timeout or
        --cl-max-memory-mb."""
        if not options.isolate:
            # lazy: torch and TVM (the case is measured in the pytest process)
            from cl_validate.session.in_process import InProcess

            return InProcess(options)
        pool = self.config.stash.get(_pool_key, None)
        if pool is None:
            pool = self.config.stash[_pool_key] = WorkerPool(options)
        else:
            pool.options = options
        return pool


class CheckItem(pytest.Item):
    """One check of one case × target: passes, fails, errors or skips as the CLI's verdict."""

    parent: CaseNode

    def __init__(self, *, check: str, target: str, run: CaseSpec, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.check, self.target, self.run = check, target, run

    def setup(self) -> None:
        # Failing in setup makes pytest report an error, as the CLI's JUnit has <error>.
        # pytrace=False: the message is the report, a traceback into the plugin is noise.
        try:
            self._check = self.parent.check(self.run, self.target, self.check)
        except UsageError as exc:  # the factory or pipeline cannot be used, no device
            unusable = str(exc)
        else:
            unusable = ""
        if unusable:
            pytest.fail(unusable, pytrace=False)
        self.user_properties.extend(self._check.figures.properties())
        if self._check.status is Status.ERROR:  # the compile or the model failed
            pytest.fail(_text(self._check), pytrace=False)

    def runtest(self) -> None:
        c = self._check
        if c.status is Status.FAILED:
            raise CheckFailed(_text(c))
        if c.status is Status.SKIPPED:
            # Reported at the case file's line, not at this line of the plugin.
            raise pytest.skip.Exception(one_line(c.message), _use_item_location=True)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> Any:
        # A failed check reports its text as it stands: the first line is the CLI's message
        # (pytest's summary line and its JUnit failure message start with it), then the body.
        if isinstance(excinfo.value, CheckFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        check = getattr(self, "_check", None)
        line = (check.line if check is not None else None) or \
            declaring_line(self.run, self.check)
        return self.path, line - 1, f"{self.parent.name}::{self.name}"


def _text(c: CheckResult) -> str:
    """What pytest prints of a failed check, escaped as the CLI escapes it (a model's text is
    in it: an output's name, an exception): the message one line, the body line by line, no
    line a workflow command."""
    return one_line(c.message) + (f"\n\n{log_text(c.body)}" if c.body else "")
