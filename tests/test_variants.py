"""Cases as deployed: shape variants ([[variants]]) and dynamic dimensions ([dynamic]).

A variant is a run of its own (compile, verdicts, report names ``check[<variant>-<target>]``);
a dynamic dimension is exported and compiled once, symbolically, and its numerics run at
several sizes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from cl_validate.errors import CaseFileError, ExitCode
from cl_validate.session.in_process import judge_in_process
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions
from cl_validate.suite.shard import _junit_timings
from tests.conftest import DATA, run_cli, tiny_case

SEQ = tiny_case(1, model="tiny_models:sequence_first").replace(
    "shape = [1, 3, 16, 16]", "shape = [1, 3, 8, 8]")
B8 = '\n[[variants]]\nname = "b8"\nshapes = { x = [8, 3, 8, 8] }\n'
DYNAMIC = tiny_case().replace("shape = [1, 3, 16, 16]", 'shape = ["batch", 3, 16, 16]') + \
    "\n[dynamic]\nbatch = { min = 1, max = 8 }\n"


# --------------------------------------------------------------------------------------------
# The case file (no compile)
# --------------------------------------------------------------------------------------------
def test_variants_expand_into_runs_with_their_own_shapes_budgets_and_lines(write_case):
    case = load_case(write_case(SEQ + B8 + "budget = { layout_transforms = 2 }\n"
                                "\n[variants.targets_override.llvm]\n"
                                "tolerance = { atol = 0.5 }\n"))
    base, b8 = case.expand()
    assert (base.label, b8.label) == ("case", "case[b8]")
    assert base.inputs[0].shape == (1, 3, 8, 8) and b8.inputs[0].shape == (8, 3, 8, 8)
    assert base.budget_for("llvm").get("layout_transforms") == 1
    assert b8.budget_for("llvm").get("layout_transforms") == 2
    assert b8.budget_for("llvm").line("layout_transforms") == 21
    assert b8.budget_source("llvm", "layout_transforms") == ("variants.b8", 21)
    tol, line = b8.tolerance_for("llvm")
    assert (tol.rtol, tol.atol, line) == (1e-4, 0.5, 24)
    assert base.tolerance_for("llvm")[0].atol == 1e-4


@pytest.mark.parametrize(("extra", "line", "says"), [
    (B8 + B8.replace('"b8"', '"b9"'), 22, "variant 'b9' runs the same shapes as variant 'b8'"),
    (B8.replace("[8, 3, 8, 8]", "[1, 3, 8, 8]"), 18, "same shapes as the case's own"),
    (B8 + B8, 23, "variant 'b8' is declared twice"),
    (B8.replace("x = ", "y = "), 20, "reshapes 'y', which is not an input (hint: inputs: x)"),
    (B8.replace("[8, 3, 8, 8]", "[8, 3, 8]"), 20, "gives 'x' 3 dimensions, the input has 4"),
    (B8.replace('name = "b8"\n', ""), 18, "a [[variants]] entry has no name"),
    (B8.replace('"b8"', '"../b8"'), 19, "variant name '../b8' may only use letters"),
    (B8.replace("shapes", "shape"), 20, "unknown key 'shape' in [[variants]] (hint: did you mean "
                                        "'shapes'?)"),
])
def test_impossible_variants_are_one_line_errors_at_their_line(write_case, extra, line, says):
    with pytest.raises(CaseFileError) as info:
        load_case(write_case(SEQ + extra))
    assert info.value.line == line and says in str(info.value)


@pytest.mark.parametrize(("dynamic", "line", "says"), [
    ("batch = { min = 8, max = 2 }", 19, "the range of 'batch' is empty: min 8 > max 2"),
    ("batch = { min = 1, max = 8, values = [1, 9] }", 19, "value 9 of 'batch' is outside"),
    ("batch = { min = 1 }", 19, "dynamic dimension 'batch' has no max"),
    ("batch = { min = 1, max = 8 }\nlen = { min = 1, max = 8 }", 20,
     "dynamic dimension 'len' is used by no shape"),
    ("bacth = { min = 1, max = 8 }", 6, "dimension 'batch' of 'x' is not declared in [dynamic] "
                                        "(hint: did you mean 'bacth'?)"),
])
def test_impossible_dynamic_dimensions_are_one_line_errors(write_case, dynamic, line, says):
    text = DYNAMIC.replace("batch = { min = 1, max = 8 }", dynamic)
    with pytest.raises(CaseFileError) as info:
        load_case(write_case(text))
    assert info.value.line == line and says in str(info.value), str(info.value)


def test_a_dynamic_dimension_runs_numerics_at_its_ends_and_between(write_case):
    case = load_case(write_case(DYNAMIC))
    assert case.sample_sizes() == [{"batch": 1}, {"batch": 4}, {"batch": 8}]
    assert case.example_sizes() == {"batch": 4}  # torch.export specializes a traced 1
    chosen = load_case(write_case(DYNAMIC.replace("max = 8 }", "max = 8, values = [2, 8] }")))
    assert chosen.sample_sizes() == [{"batch": 2}, {"batch": 8}]


# --------------------------------------------------------------------------------------------
# Real runs
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def seq_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The sequence-first model at batch 1 (the case) and batch 8 (a variant), budget 1."""
    root = tmp_path_factory.mktemp("variants")
    shutil.copy(DATA / "tiny_models.py", root)
    (root / "seq.toml").write_text(SEQ + B8)
    junit = root / "r.xml"
    run = run_cli(["run", str(root / "seq.toml"), "--no-isolation", "--no-cache", "--junit",
                   str(junit), "--markdown", str(root / "r.md")])
    return {"root": root, "run": run, "junit": ET.parse(junit).getroot()}


@pytest.mark.compile
def test_the_variant_whose_count_exceeds_the_budget_is_the_one_that_fails(seq_run):
    """Moving the batch axis is free at batch 1 and a transpose at batch 8."""
    run = seq_run["run"]
    assert run.code == ExitCode.CHECK_FAILED, run.text
    lines = [ln for ln in run.out.splitlines() if ln.startswith("[")]
    assert lines[0].split()[1:4] == ["PASS", "seq", "llvm"]
    assert lines[1].split()[1:4] == ["FAIL", "seq[b8]", "llvm"]
    assert ("FAILED seq[b8] [llvm] layout_transforms: layout_transforms 2 > budget 1 (llvm)"
            in run.out)


@pytest.mark.compile
def test_every_report_names_the_variant(seq_run):
    names = {tc.get("name"): tc for tc in seq_run["junit"].iter("testcase")}
    assert "layout_transforms[llvm]" in names and "layout_transforms[b8-llvm]" in names
    assert names["layout_transforms[b8-llvm]"].find("failure") is not None
    assert names["layout_transforms[llvm]"].find("failure") is None
    assert {tc.get("classname") for tc in names.values()} == {"seq"}
    markdown = (seq_run["root"] / "r.md").read_text()
    assert "`seq[b8]`" in markdown
    # Shard timings weigh each variant on its own.
    timings = _junit_timings(ET.tostring(seq_run["junit"], encoding="unicode"), "r.xml", None)
    assert set(timings) == {"seq", "seq[b8]"}


@pytest.mark.compile
def test_k_selects_one_variant_and_the_plugin_names_it_alike(seq_run):
    root = seq_run["root"]
    run = run_cli(["run", str(root / "seq.toml"), "-k", "seq[b8]", "--no-isolation",
                   "--no-cache"])
    assert [ln.split()[2] for ln in run.out.splitlines() if ln.startswith("[")] == ["seq[b8]"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co",
                           "-q", "seq.toml"], cwd=root, capture_output=True, text=True,
                          timeout=120)
    ids = {ln for ln in proc.stdout.splitlines() if "::" in ln}
    assert "seq.toml::seq::layout_transforms[b8-llvm]" in ids
    assert "seq.toml::seq::layout_transforms[llvm]" in ids


@pytest.mark.compile
def test_shards_split_a_case_by_variant_and_merge_joins_them(seq_run, tmp_path):
    root = seq_run["root"]
    reports = []
    for i in (1, 2):
        report = tmp_path / f"shard{i}.xml"
        run = run_cli(["run", str(root / "seq.toml"), "--shard", f"{i}/2", "--no-isolation",
                       "--no-cache", "--junit", str(report)])
        assert run.code in (ExitCode.OK, ExitCode.CHECK_FAILED), run.text
        reports.append(report)
    per_shard = [{tc.get("name") for tc in ET.parse(r).getroot().iter("testcase")}
                 for r in reports]
    assert all(per_shard) and not per_shard[0] & per_shard[1]  # one run each, no overlap
    merged = tmp_path / "merged.xml"
    assert run_cli(["merge", *map(str, reports), "-o", str(merged)]).code == ExitCode.OK
    names = sorted(tc.get("name") for tc in ET.parse(merged).getroot().iter("testcase"))
    assert names == sorted(tc.get("name") for tc in seq_run["junit"].iter("testcase"))


@pytest.mark.compile
def test_calibrate_writes_the_variants_tolerance_not_the_cases(tmp_path):
    shutil.copy(DATA / "tiny_models.py", tmp_path)
    case = tmp_path / "seq.toml"
    case.write_text(SEQ + B8)
    run = run_cli(["calibrate", str(case), "--variant", "b8", "--seeds", "2", "--write"])
    assert run.code == ExitCode.OK, run.text
    text = case.read_text()
    base, b8 = text.split("[[variants]]")
    assert "rtol = 0.0001\natol = 0.0001" in base  # the case's own tolerance is untouched
    assert "tolerance = { rtol = " in b8, b8
    calibrated = load_case(case).expand()[1].tolerance_for("llvm")[0]
    assert calibrated.atol >= 1e-6 and calibrated.rtol >= 1e-6
    unknown = run_cli(["calibrate", str(case), "--variant", "b9"])
    assert unknown.code == ExitCode.USAGE_ERROR and "b9" in unknown.err


@pytest.mark.compile
def test_tighten_gives_a_variant_its_own_budget_only_where_it_differs(tmp_path):
    shutil.copy(DATA / "tiny_models.py", tmp_path)
    case = tmp_path / "seq.toml"
    other = '\n[[variants]]\nname = "b1_16"\nshapes = { x = [1, 3, 16, 16] }\n'
    case.write_text(SEQ.replace("layout_transforms = 1", "layout_transforms = 3") + B8 + other)
    run = run_cli(["budget", "tighten", str(case), "--no-isolation"])
    assert run.code == ExitCode.OK, run.text
    text = case.read_text()
    assert "layout_transforms = 1\n" in text  # the case's own: 1
    assert 'name = "b8"\nshapes = { x = [8, 3, 8, 8] }\nbudget = { layout_transforms = 2 }' \
        in text  # b8 differs: its own
    assert "budget" not in text.split('name = "b1_16"')[1]  # b1_16 inherits the right 1
    again = run_cli(["run", str(case), "--no-isolation", "--no-cache"])
    assert again.code == ExitCode.OK, again.text


@pytest.mark.compile
def test_a_dynamic_batch_compiles_once_and_checks_numerics_at_three_sizes(write_case,
                                                                         monkeypatch):
    from cl_validate.session import case_session as measure

    compiled: list[str] = []
    compile_case = measure.compile_case

    def spy(front, case, target, *a, **kw):
        compiled.append(target)
        return compile_case(front, case, target, *a, **kw)

    monkeypatch.setattr(measure, "compile_case", spy)
    case = load_case(write_case(DYNAMIC))
    (result,) = judge_in_process([case], RunOptions(isolate=False))
    assert compiled == ["llvm"]
    assert all(c for c in result.checks), [(c.check, c.message) for c in result.checks]
    numerics = result.check("numerics")
    assert "over 3 samples (batch=1; batch=4; batch=8)" in numerics.message
    assert [ln.split(" shape")[0] for ln in numerics.body.splitlines()] == [
        "output 0 at batch=1", "output 0 at batch=4", "output 0 at batch=8"]
    assert result.kernels is not None and len(result.kernels.runtime_transforms) == 2
    # the symbolic program: every kernel's shape carries the case's name for the dimension
    shapes = [k.out_shape for k in result.kernels]
    assert shapes and all(s is not None and s[0] == "batch" for s in shapes), shapes
    assert "-> [batch, 16, 16, 8]" in result.kernels.render()


@pytest.mark.compile
def test_a_numerics_failure_names_the_size_it_failed_at(write_case):
    text = DYNAMIC.replace("rtol = 0.0001\natol = 0.0001", "rtol = 0\natol = 0").replace(
        "tiny_models:conv_relu", "tiny_models:classifier")
    (result,) = judge_in_process([load_case(write_case(text))], RunOptions(isolate=False))
    numerics = result.check("numerics")
    assert not numerics and "numerics output 0 at batch=" in numerics.message


@pytest.mark.compile
def test_a_dimension_the_model_fixes_is_a_case_file_error_at_its_line(write_case):
    case = load_case(write_case(DYNAMIC.replace("conv_relu", "fixed_batch")))
    (result,) = judge_in_process([case], RunOptions(isolate=False))
    error = result.check("compile")
    assert error.kind == "CaseFileError" and error.line == 19
    assert "cannot be exported with 'batch' dynamic: the model's code fixes it to 4" in \
        error.message


def test_the_cache_key_follows_a_dynamic_range(write_case):
    from cl_validate.measurements.cache import key

    a = load_case(write_case(DYNAMIC))
    b = load_case(write_case(DYNAMIC.replace("max = 8", "max = 16"), "other.toml"))
    assert key(a, "llvm", "w", True, "llvm") != key(b, "llvm", "w", True, "llvm")
