"""Hostile inputs through the real CLI: every one gets its documented exit code, one line that
names the file (and the exact line), no traceback, and never a partial report.

Each case file in tests/corpus/ is wrong in one way (its first line says how); the tables
below hold what the CLI must say about it. A corpus file without an entry here fails
`test_every_corpus_file_is_covered`, so the corpus cannot grow untested.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import xmlschema
from junitparser import Error, Failure, JUnitXml, Skipped

from cl_validate.checks.registry import names
from cl_validate.checks.verdict import NOT_RUN_ERRORED
from cl_validate.errors import ExitCode
from tests.conftest import by_case, run_cli

CHECKS = names()
COMPILE = CHECKS[0]  # the case's own check

# torch is imported above, at collection, on purpose: its logging handler keeps the sys.stderr
# it finds at import, and if that were a test's capsys stream (closed after that test), a later
# export failure in this process would log "--- Logging error ---" with a traceback.

CORPUS = Path(__file__).parent / "corpus"
SCHEMA = Path(__file__).parent / "data" / "junit-cl_validate.xsd"
PREFIX = "cl-validate: error: "


@dataclass(frozen=True)
class Usage:
    """A case-file error: exit 2, ``<file>:<line>: <message>`` on stderr, nothing compiled."""

    line: int | None  # None: the error has no line (the file as a whole is wrong)
    says: str  # a fragment of the message, hint included where there is one


USAGE: dict[str, Usage] = {
    # TOML syntax
    "syntax_unterminated_string.toml": Usage(2, "unterminated string (hint: close the string"),
    "syntax_missing_equals.toml": Usage(6, "TOML syntax error: Expected '=' after a key"),
    "syntax_duplicate_key.toml": Usage(11, "a key is set twice (hint: keep one of them)"),
    "syntax_duplicate_table.toml": Usage(12, "table [budget] declared twice (hint: merge"),
    "syntax_unclosed_array.toml": Usage(7, "Unclosed array (hint: close it: ] ends an array"),
    "syntax_bare_word_value.toml": Usage(10, "Invalid value (hint: strings need quotes"),
    # misspelled keys, in every kind of table
    "key_top_level.toml": Usage(4, "unknown key 'descripton' in [case] (hint: did you mean "
                                   "'description'?)"),
    "key_inputs.toml": Usage(11, "unknown key 'shpe' in [[inputs]] (hint: did you mean "
                                 "'shape'?)"),
    "key_budget.toml": Usage(10, "unknown key 'layout_transform' in [budget] (hint: did you "
                                 "mean 'layout_transforms'?)"),
    "key_tolerance.toml": Usage(11, "unknown key 'atoll' in [tolerance] (hint: did you mean "
                                    "'atol'?)"),
    "key_targets_override.toml": Usage(9, "unknown key 'tolerence' in [targets_override.cuda]"),
    "key_targets_override_inline.toml": Usage(
        9, "unknown key 'kernel' in [targets_override.llvm.budget] (hint: did you mean "
           "'kernels'?)"),
    "key_override_target.toml": Usage(8, "unknown target 'cdua' in [targets_override] (hint: "
                                         "did you mean 'cuda'?)"),
    # wrong types
    "type_string_budget.toml": Usage(10, "layout_transforms must be an integer, got a string"),
    "type_float_dim.toml": Usage(7, "each dimension of 'x' must be an integer, got a number 3.0"),
    "type_table_for_array.toml": Usage(3, "targets must be a non-empty array of strings or "
                                          "[targets.<name>] tables (hint:"),
    "type_inputs_table.toml": Usage(5, "inputs must be a non-empty array of tables ([[inputs]])"),
    "type_model_integer.toml": Usage(2, "model must be a string, got an integer"),
    "type_budget_array.toml": Usage(4, "budget must be a table, got an array"),
    # values out of range
    "budget_negative.toml": Usage(10, "layout_transforms must be >= 0, got -1"),
    "budget_fractional.toml": Usage(11, "kernels must be an integer, got a number 2.5"),
    "budget_zero_kernels.toml": Usage(10, "kernels must be >= 1, got 0"),
    "shape_string.toml": Usage(7, "shape of 'x' must be an array of integers (hint:"),
    "shape_zero_dim.toml": Usage(7, "each dimension of 'x' must be >= 1, got 0"),
    "shape_absurd.toml": Usage(7, "input 'x' has 150,528,000,000 elements (hint: at most"),
    "shape_missing.toml": Usage(5, "input 'x' has no shape (hint: shape = ["),
    "dtype_unsupported.toml": Usage(8, "unsupported dtype 'complex64' (hint: use one of float32"),
    "dtype_typo.toml": Usage(8, "unsupported dtype 'flaot32' (hint: did you mean 'float32'?)"),
    "layout_unsupported.toml": Usage(8, "unsupported layout 'NCWH' (hint: did you mean"),
    "layout_not_4d.toml": Usage(8, "layout 'NHWC' needs a 4-D input, 'x' is 3-D"),
    "layout_op_name.toml": Usage(10, "[layout] key 'conv2d' is not a Relax op name"),
    "tolerance_negative.toml": Usage(11, "atol must be >= 0, got -1e-05"),
    "tolerance_nan.toml": Usage(10, "rtol must be finite, got nan"),
    "targets_empty.toml": Usage(3, "targets must be a non-empty array of strings or "
                                   "[targets.<name>] tables (hint: e.g."),
    "target_unknown.toml": Usage(3, "unknown target 'cpu' (hint: targets: llvm, cuda"),
    "pipeline_unknown.toml": Usage(4, "unknown pipeline 'nchw' (hint: registered: nhwc"),
    # names that would become hostile file names
    "name_path_separator.toml": Usage(2, "case name '../evil' may only use letters, digits"),
    "name_absolute.toml": Usage(2, "case name '/etc/passwd' may only use letters, digits"),
    "name_dotdot.toml": Usage(2, "case name '..' must not start with '.'"),
    "name_hidden.toml": Usage(2, "case name '.bashrc' must not start with '.'"),
    # files that are not case files at all
    "empty.toml": Usage(None, "case file is empty (hint: a case needs at least model ="),
    "comments_only.toml": Usage(None, "missing required key 'model' (hint:"),
    "non_utf8.toml": Usage(1, "not UTF-8 text (byte 0xff) (hint: case files are UTF-8 TOML"),
    "utf16_bom.toml": Usage(None, "is UTF-16 text, not UTF-8 (hint: TOML files are UTF-8: "
                                  "save it as UTF-8"),
    "utf16_no_bom.toml": Usage(None, "is UTF-16 text, not UTF-8 (hint: TOML files are UTF-8"),
    "utf32_bom.toml": Usage(None, "is UTF-32 text, not UTF-8 (hint: TOML files are UTF-8"),
    # a UTF-8 byte-order mark is accepted (Windows editors write one): the line stays right
    "utf8_bom_key.toml": Usage(10, "unknown key 'layout_transform' in [budget] (hint: did "
                                   "you mean 'layout_transforms'?)"),
    "nested_too_deep.toml": Usage(10, "arrays or inline tables nested more than 32 deep "
                                      "(hint: a case file needs a few levels at most"),
    "factory_malformed_ref.toml": Usage(2, "is not of the form 'module:callable'"),
}


#: Case-file mistakes only running the user's code shows (importing and calling the factory,
#: reading forward()'s signature): found in the worker, so the parent never runs model code.
#: Still one line with file:line and hint, as a `compile` error of kind CaseFileError.
WORKER_USAGE: dict[str, Usage] = {
    "factory_missing_module.toml": Usage(2, "no module named 'corpus_factoreis' (hint: the "
                                            "module is looked up next to the case file"),
    "factory_missing_attribute.toml": Usage(2, "'corpus_factories' has no attribute 'resnet'"),
    "factory_import_raises.toml": Usage(2, "importing 'corpus_broken_import' failed: "
                                           "ImportError: this module needs the 'timm' package"),
    "factory_raises.toml": Usage(2, "raised FileNotFoundError: checkpoint weights/conv.pt"),
    "factory_returns_function.toml": Usage(2, "returned function, not a torch.nn.Module (hint:"),
    "factory_returns_tensor.toml": Usage(2, "returned Tensor, not a torch.nn.Module (hint:"),
    "factory_not_callable.toml": Usage(2, "'corpus_factories:NOT_CALLABLE' is not callable "
                                          "(int) (hint:"),
    "inputs_too_many.toml": Usage(9, "forward(x) of 'corpus_factories:conv' takes 1 input, the "
                                     "case declares 2 [[inputs]] (hint: declare one"),
    "inputs_too_few.toml": Usage(5, "forward(x, y) of 'corpus_factories:two_inputs' takes 2 "
                                    "inputs, the case declares 1 [[inputs]]"),
}


@dataclass(frozen=True)
class Verdict:
    """A case that validates but cannot pass: exit 1, and a complete, valid JUnit report."""

    check: str  # the check whose verdict is asserted ("compile": the case errored)
    kind: type  # junitparser Error or Failure
    type: str  # failure@type
    says: tuple[str, ...]  # fragments of failure@message
    line: int  # testcase@line: the case-file line to look at


VERDICTS: dict[str, Verdict] = {
    "verdict_export_data_dependent.toml": Verdict(
        "compile", Error, "CompileError", ("export failed: GuardOnDataDependentSymNode",), 2),
    "verdict_import_unsupported_op.toml": Verdict(
        "compile", Error, "CompileError",
        ("import failed:", "Unsupported function types",
         "no converter for exp.default on complex tensors (hint:"), 2),
    "verdict_forward_raises.toml": Verdict(
        "compile", Error, "ModelError", ("PyTorch forward failed: RuntimeError",), 2),
    "verdict_outputs_too_many.toml": Verdict(
        "numerics", Error, "CaseFileError",
        ("case declares 2 [[outputs]] but the model returns 1",), 12),
    "verdict_nan_output.toml": Verdict(
        "numerics", Failure, "NonFinite", ("non-finite values: 256 in TVM, 256 in PyTorch",), 15),
}


def _assert_usage_error(code: int, out: str, err: str, where: str, says: str) -> None:
    assert code == ExitCode.USAGE_ERROR, out + err
    assert "Traceback" not in out + err
    assert out == ""  # nothing ran: no progress line, no table
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert err.startswith(f"{PREFIX}{where}: "), err
    assert says in err, err


def test_every_corpus_file_is_covered() -> None:
    files = {p.name for p in CORPUS.glob("*.toml")}
    assert files == set(USAGE) | set(WORKER_USAGE) | set(VERDICTS)
    assert len(files) + 2 >= 25  # + duplicate_names/ and the folder named *.toml below


@pytest.mark.parametrize("name", sorted(USAGE))
def test_case_file_error(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(CORPUS)
    expect = USAGE[name]
    reports = tmp_path / "reports"
    code, out, err = run_cli(["run", name, "--junit", str(reports / "r.xml")])
    where = name if expect.line is None else f"{name}:{expect.line}"
    _assert_usage_error(code, out, err, where, expect.says)
    assert not reports.exists()  # no report, no temporary file, not even the folder


def test_duplicate_case_names_across_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(CORPUS)
    code, out, err = run_cli(["run", "duplicate_names"])
    _assert_usage_error(code, out, err, "duplicate_names/second.toml:4",
                        "duplicate case name 'same' (also in duplicate_names/first.toml) "
                        "(hint: case names must be unique")


def test_folder_named_like_a_case_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cases" / "looks_like_a_case.toml").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["run", "cases"])
    _assert_usage_error(code, out, err, "cases/looks_like_a_case.toml",
                        "is a folder, not a case file (hint:")
    # Named directly, it is a folder of cases like any other: an empty one.
    code, out, err = run_cli(["run", "cases/looks_like_a_case.toml"])
    assert code == ExitCode.USAGE_ERROR and out == "" and err.count("\n") == 1
    assert "no case files found in cases/looks_like_a_case.toml" in err


@pytest.mark.parametrize("name", ["syntax_unterminated_string.toml", "non_utf8.toml",
                                  "factory_malformed_ref.toml"])
def test_no_traceback_reaches_the_terminal(name: str, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "cl_validate", "run", name, "--junit",
                           str(tmp_path / "r.xml")], capture_output=True, text=True,
                          cwd=CORPUS, timeout=120)
    expect = USAGE[name]
    _assert_usage_error(proc.returncode, proc.stdout, proc.stderr,
                        f"{name}:{expect.line}", expect.says)
    assert list(tmp_path.iterdir()) == []


def _assert_verdict(name: str, xml: JUnitXml) -> None:
    expect = VERDICTS[name]
    checks = by_case(xml)[Path(name).stem]
    tc = checks[expect.check]
    (result,) = tc.result  # type: ignore[attr-defined]
    assert isinstance(result, expect.kind), (name, tc.name, result)  # type: ignore[attr-defined]
    assert result.type == expect.type
    assert "\n" not in result.message
    for fragment in expect.says:
        assert fragment in result.message, result.message
    assert tc._elem.get("line") == str(expect.line)  # type: ignore[attr-defined]
    assert tc._elem.get("file").endswith(name)  # type: ignore[attr-defined]
    if expect.check == COMPILE:  # one error; the checks that could not run say so
        others = [c for n, c in checks.items() if n != COMPILE]
        assert len(others) == len(CHECKS) - 1
        for c in others:
            (skip,) = c.result  # type: ignore[attr-defined]
            assert isinstance(skip, Skipped) and skip.message == NOT_RUN_ERRORED


@pytest.mark.compile
@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_failing_verdict_writes_a_complete_valid_report(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(CORPUS)
    junit = tmp_path / "reports" / "r.xml"
    code, out, err = run_cli(["run", name, "--no-isolation", "--junit", str(junit)])
    assert code == ExitCode.CHECK_FAILED, out + err
    assert "Traceback" not in out + err
    expect = VERDICTS[name]
    status = "ERROR" if expect.kind is Error else "FAILED"
    check = expect.check
    stem = Path(name).stem
    summary = [ln for ln in out.splitlines() if ln.startswith(f"{status} {stem} [llvm] {check}:")]
    assert len(summary) == 1, out
    assert summary[0].endswith(f"({name}:{expect.line})")
    assert expect.says[0] in summary[0]
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(junit))
    assert [p.name for p in junit.parent.iterdir()] == ["r.xml"]  # no temporary file left
    _assert_verdict(name, JUnitXml.fromfile(str(junit)))


@pytest.mark.compile
def test_failing_verdicts_in_workers_print_no_traceback(tmp_path: Path) -> None:
    """The isolated path (worker processes), as CI runs it, in a separate process."""
    names = ["verdict_export_data_dependent.toml", "verdict_nan_output.toml"]
    junit = tmp_path / "r.xml"
    proc = subprocess.run([sys.executable, "-m", "cl_validate", "run", *names, "-j", "1",
                           "--junit", str(junit)], capture_output=True, text=True, cwd=CORPUS,
                          timeout=300, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == ExitCode.CHECK_FAILED, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stderr == ""  # torch's export diagnostics stay in the worker's log
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(junit))
    xml = JUnitXml.fromfile(str(junit))
    for name in names:
        _assert_verdict(name, xml)


def test_unsupported_ops_verdict_is_the_same_whatever_order_tvm_lists_them() -> None:
    """TVM builds the list from a set: its order changes between processes."""
    from cl_validate.compile.frontend import _unsupported_ops_summary

    a = _unsupported_ops_summary(AssertionError("Unsupported function types ['b.default', "
                                                "'a.default']"))
    b = _unsupported_ops_summary(AssertionError("Unsupported function types ['a.default', "
                                                "'b.default']"))
    assert a == b and a is not None and "no converter for a.default, b.default" in a
    assert _unsupported_ops_summary(AssertionError("something else")) is None
    assert _unsupported_ops_summary(ValueError("Unsupported function types ['x']")) is None


class _StableSort(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, dim=1, stable=True)[0]  # no converter in TVM 0.27


@pytest.mark.compile
def test_an_op_without_a_converter_is_named_with_the_models_line(tmp_path: Path) -> None:
    """The import failure names the op and the line of the model that calls it."""
    import inspect

    from cl_validate.compile.frontend import export_and_import
    from cl_validate.errors import CompileStageError
    from cl_validate.spec import load_case

    path = tmp_path / "c.toml"
    path.write_text('model = "x:y"\n[[inputs]]\nname = "x"\nshape = [1, 8]\n')
    with pytest.raises(CompileStageError) as info:
        export_and_import(_StableSort(), load_case(path), [torch.randn(1, 8)])
    lines, first = inspect.getsourcelines(_StableSort.forward)
    line = first + next(i for i, text in enumerate(lines) if "torch.sort(" in text)
    assert f"no converter for sort.stable (test_corpus.py:{line})" in str(info.value), \
        str(info.value)


# --------------------------------------------------------------------------------------------
# Case-file mistakes found in the worker
# --------------------------------------------------------------------------------------------
@pytest.mark.compile
def test_factory_mistakes_alone_are_usage_errors_with_line_and_a_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No case of the run can be used: exit 2, each file's one line (file:line, hint) on
    stderr, and a report whose `compile` testcase says the same at that line. One run for
    all of them (one zygote: a run of its own each cost about 10 s of the suite)."""
    monkeypatch.chdir(CORPUS)
    junit = tmp_path / "r.xml"
    names = sorted(WORKER_USAGE)
    code, out, err = run_cli(["run", *names, "--junit", str(junit), "-j", "2"])
    assert code == ExitCode.USAGE_ERROR, out + err
    assert "Traceback" not in out + err
    lines = err.splitlines()
    assert lines[-1] == f"{PREFIX}no case could be run: every case file above is unusable"
    cases = by_case(JUnitXml.fromfile(str(junit)))
    for name in names:
        expect = WORKER_USAGE[name]
        (line,) = [ln for ln in lines if ln.startswith(f"{PREFIX}{name}:")]
        assert line.startswith(f"{PREFIX}{name}:{expect.line}: ") and expect.says in line, line
        compile_tc = cases[Path(name).stem][COMPILE]
        (error,) = compile_tc.result  # type: ignore[attr-defined]
        assert isinstance(error, Error) and error.type == "CaseFileError", name
        assert expect.says in error.message, name
        assert compile_tc._elem.get("line") == str(expect.line)  # type: ignore[attr-defined]


@pytest.mark.compile
def test_a_factory_mistake_does_not_hide_the_other_cases(tmp_path: Path) -> None:
    """A usable case next to unusable ones: every case is reported, exit 1 (not 2)."""
    names = ["factory_raises.toml", "inputs_too_few.toml", "verdict_nan_output.toml"]
    junit = tmp_path / "r.xml"
    proc = subprocess.run([sys.executable, "-m", "cl_validate", "run", *names, "--junit",
                           str(junit)], capture_output=True, text=True, cwd=CORPUS,
                          timeout=300)
    assert proc.returncode == ExitCode.CHECK_FAILED, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    cases = by_case(JUnitXml.fromfile(str(junit)))
    assert set(cases) == {"factory_raises", "inputs_too_few", "verdict_nan_output"}
    for stem in ("factory_raises", "inputs_too_few"):
        (error,) = cases[stem][COMPILE].result  # type: ignore[attr-defined]
        assert error.type == "CaseFileError"
    _assert_verdict("verdict_nan_output.toml", JUnitXml.fromfile(str(junit)))
    assert "ERROR factory_raises [llvm] compile: factory_raises.toml:2: model factory " \
        "'corpus_factories:raises' raised" in proc.stdout
