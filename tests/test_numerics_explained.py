"""Numerics that explain themselves: the stage that broke them (bisection), a float64
reference that needs no tuning, and several input seeds."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from cl_validate.checks.verdict import Status
from cl_validate.errors import CaseFileError, ExitCode
from cl_validate.measurements.bisection import Bisection, StageResult
from cl_validate.measurements.error_stats import compare
from cl_validate.session.in_process import judge_in_process
from cl_validate.spec import Tolerance, load_case
from cl_validate.spec.options import RunOptions
from tests.conftest import run_cli, tiny_case

PERTURBED = tiny_case(extra='pipeline = "perturb_pipeline:nhwc_perturbed"')
FLOAT64 = '[tolerance]\nreference = "float64"\n'


def _float64(text: str) -> str:
    """The case judged against float64, its rtol/atol gone."""
    return text.replace("[tolerance]\nrtol = 0.0001\natol = 0.0001\n", FLOAT64)


# --------------------------------------------------------------------------------------------
# The float64 rule, on numbers
# --------------------------------------------------------------------------------------------
def _draws(n: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    ref64 = rng.normal(size=n)
    eager = (ref64 + rng.normal(scale=1e-3, size=n)).astype(np.float32)
    return ref64, eager


def test_float64_rule_bounds_tvm_by_a_multiple_of_eager_float32s_error():
    ref64, eager = _draws()
    tol = Tolerance(0.0, 0.0, reference="float64")  # rtol/atol are not the rule here
    noise = np.random.default_rng(1).normal(scale=1e-3, size=ref64.size)
    as_good = compare((ref64 + 1.5 * noise).astype(np.float32), eager, tol, reference64=ref64)
    assert as_good and 1.3 < as_good.ratio < 1.7 and as_good.eager_rmse == pytest.approx(
        1e-3, rel=0.05)
    worse = compare((ref64 + 4 * noise).astype(np.float32), eager, tol, reference64=ref64)
    assert not worse and 3.6 < worse.ratio < 4.4
    assert "against float64" in worse.summary() and "allowed 3x + 1e-05" in worse.summary()
    looser = compare((ref64 + 4 * noise).astype(np.float32), eager,
                     Tolerance(0, 0, reference="float64", multiplier=5), reference64=ref64)
    assert looser
    tighter = compare((ref64 + 1.5 * noise).astype(np.float32), eager,
                      Tolerance(0, 0, reference="float64", multiplier=1.2), reference64=ref64)
    assert not tighter


def test_float64_rule_has_a_floor_and_never_hides_nan():
    ref64 = np.linspace(-1, 1, 100)
    exact = ref64.astype(np.float32)  # eager float32 is as close as float32 gets
    tol = Tolerance(0, 0, reference="float64")
    assert compare(exact + np.float32(5e-6), exact, tol, reference64=ref64)  # under the floor
    assert not compare(exact + np.float32(5e-5), exact, tol, reference64=ref64)
    nan = exact.copy()
    nan[3] = np.nan
    assert not compare(nan, exact, Tolerance(0, 0, "float64", floor=1e9), reference64=ref64)


@pytest.mark.parametrize(("tolerance", "line", "says"), [
    ('reference = "float46"', 15, "unknown reference 'float46' (hint: did you mean 'float64'?)"),
    ('reference = "float64"\nmultiplier = 0.5', 16, "multiplier must be >= 1, got 0.5"),
    ("floor = -1", 15, "floor must be >= 0"),
])
def test_impossible_float64_settings_are_one_line_errors(write_case, tolerance, line, says):
    with pytest.raises(CaseFileError) as info:
        load_case(write_case(tiny_case().replace("rtol = 0.0001\natol = 0.0001", tolerance)))
    assert info.value.line == line and says in str(info.value), str(info.value)


def test_seeds_make_samples_of_their_own(write_case):
    case = load_case(write_case("seeds = 3\nseed = 5\n" + tiny_case()))
    assert [(s.label, s.seed) for s in case.samples()] == [
        ("seed=5", 5), ("seed=6", 6), ("seed=7", 7)]
    for bad, says in (("seeds = 0", "seeds must be >= 1"), ("seeds = 64", "at most 32")):
        with pytest.raises(CaseFileError) as info:
            load_case(write_case(bad + "\n" + tiny_case(), "bad.toml"))
        assert info.value.line == 1 and says in str(info.value)


def test_a_bisection_names_the_first_stage_out_and_the_last_one_in():
    tol = Tolerance(1e-4, 1e-4)

    def ran(name: str, err: float) -> StageResult:
        got = np.array([err], dtype=np.float32)
        return StageResult(name, (compare(got, np.zeros(1, np.float32), tol),))

    b = Bisection("llvm", "", (ran("import", 1e-6), StageResult("odd", note="not run: x"),
                               ran("cleanup", 2e-6), ran("fold", 0.03), ran("fuse", 0.03)))
    assert b.first_break == "fold"
    assert b.summary() == ("first break after `fold` (max abs 0.03; after `cleanup`: "
                           "max abs 2e-06)")
    assert "not run: x" in b.render() and "BREAKS" in b.render()
    none = Bisection("llvm", "", (ran("import", 1e-6),))
    assert none.first_break is None and "building the final program" in none.summary()


# --------------------------------------------------------------------------------------------
# Real runs
# --------------------------------------------------------------------------------------------
@pytest.mark.compile
def test_a_stage_that_corrupts_numerics_is_named_in_every_report(write_case, data_dir,
                                                                 tmp_path):
    import shutil

    shutil.copy(data_dir / "perturb_pipeline.py", tmp_path)
    case = write_case(PERTURBED)
    run = run_cli(["run", str(case), "--no-isolation", "--no-cache", "--junit",
                   str(tmp_path / "r.xml"), "--markdown", str(tmp_path / "r.md")])
    assert run.code == ExitCode.CHECK_FAILED, run.out + run.err
    failed = [ln for ln in run.out.splitlines() if ln.startswith("FAILED")]
    assert len(failed) == 1 and "numerics" in failed[0]
    assert "first break after `perturb` (max abs" in failed[0]
    assert "after `fold_params`: max abs" in failed[0]
    numerics = next(tc for tc in ET.parse(tmp_path / "r.xml").getroot().iter("testcase")
                    if tc.get("name") == "numerics[llvm]")
    props = {p.get("name"): p.get("value") for p in numerics.iter("property")}
    assert props["first_break"] == "perturb"
    body = numerics.find("failure").text
    table = body.split("stage bisection on llvm")[1].split("\n\n")[0]
    rows = [ln.split() for ln in table.splitlines()[1:]]
    assert [r[0] for r in rows] == ["import", "normalize_axes", "raise_attention",
                                    "unfold_filters", "convert_layout", "cleanup", "fold_flatten",
                                    "conv_transpose", "integer_compute", "strided_products",
                                    "sink_views", "decompose",
                                    "fold_params", "perturb"]  # it stops at the break
    assert [r[4] for r in rows if r[0] != "perturb"] == ["ok"] * 13 and rows[-1][4] == "BREAKS"
    markdown = (tmp_path / "r.md").read_text()
    assert "first break after `perturb`" in markdown and "| `perturb` |" in markdown


@pytest.mark.compile
def test_show_bisect_runs_every_stage_on_demand(write_case, data_dir, tmp_path):
    import shutil

    shutil.copy(data_dir / "perturb_pipeline.py", tmp_path)
    run = run_cli(["show", str(write_case(PERTURBED)), "--bisect"])
    assert run.code == ExitCode.OK, run.err
    rows = {ln.split()[0]: ln for ln in run.out.splitlines() if ln.startswith("  ")}
    assert list(rows)[-1] == "fuse_tir"  # all of them, past the break
    assert "BREAKS" in rows["perturb"] and "off" in rows["fuse_tir"]
    assert "same IR as `cleanup`" in rows["decompose"]  # not built twice
    assert run.out.rstrip().splitlines()[-1].startswith("first break after `perturb` (max abs")


@pytest.mark.compile
def test_bisection_costs_nothing_when_numerics_pass(write_case, monkeypatch):
    from cl_validate.session import first_break as bisect

    built: list[object] = []
    monkeypatch.setattr(bisect, "build_stage", lambda mod: built.append(mod))
    (result,) = judge_in_process([load_case(write_case(tiny_case()))], RunOptions(isolate=False))
    assert result.check("numerics") and result.bisection is None and built == []


@pytest.mark.compile
def test_a_bisection_out_of_time_says_so_and_the_verdict_stands(write_case, data_dir,
                                                                 tmp_path):
    import shutil

    shutil.copy(data_dir / "perturb_pipeline.py", tmp_path)
    case = load_case(write_case(PERTURBED))
    # In this process nothing stops a case at its timeout; the bisection still gives up at
    # three quarters of it, long passed here.
    (result,) = judge_in_process([case], RunOptions(isolate=False, timeout=0.01))
    numerics = result.check("numerics")
    assert not numerics and numerics.kind == "NumericsMismatch"
    found = re.search(r"before the bisection stopped \(out of time after 0 of (\d+) stages",
                      numerics.message)
    assert found, numerics.message
    # of every stage the case's pipeline recorded (the import, the nhwc stages, the perturbing)
    from cl_validate.session.case_session import CaseSession

    session = CaseSession(case, RunOptions(isolate=False))
    assert session.prepare() is None
    assert int(found.group(1)) == len(session.compiled("llvm", build=False).stages)


@pytest.mark.compile
def test_float64_reference_accepts_what_float32_cannot_do_better(write_case):
    """A model whose float32 error is large, but no worse in TVM than in eager float32: a
    tight rtol fails it, the float64 reference passes it with no tolerance set."""
    tight = tiny_case(model="tiny_models:cancelling", tolerance=(1e-6, 1e-6))
    (strict,) = judge_in_process([load_case(write_case(tight, "tight.toml"))],
                               RunOptions(isolate=False))
    assert not strict.check("numerics")
    assert strict.check("numerics").figures.max_abs > 1e-4
    ref64 = tight.replace("[tolerance]\nrtol = 1e-06\natol = 1e-06\n", FLOAT64)
    (f64,) = judge_in_process([load_case(write_case(ref64, "f64.toml"))],
                            RunOptions(isolate=False))
    numerics = f64.check("numerics")
    assert numerics, numerics.message
    ratio = numerics.figures.float64_ratio
    assert ratio is not None and ratio <= 3.0
    assert "against float64" in numerics.message and "eager float32" in numerics.message
    assert "reference=float64" in numerics.body and "eager_rmse=" in numerics.body


@pytest.mark.compile
def test_float64_reference_catches_a_broken_stage_too(write_case, data_dir, tmp_path):
    import shutil

    shutil.copy(data_dir / "perturb_pipeline.py", tmp_path)
    (result,) = judge_in_process([load_case(write_case(_float64(PERTURBED)))],
                               RunOptions(isolate=False))
    numerics = result.check("numerics")
    assert not numerics and "first break after `perturb` (RMSE" in numerics.message


@pytest.mark.compile
def test_a_model_that_cannot_run_in_float64_is_an_error_at_its_reference_line(write_case):
    text = _float64(tiny_case(2, model="tiny_models:float32_checked"))
    (result,) = judge_in_process([load_case(write_case(text))], RunOptions(isolate=False))
    numerics = result.check("numerics")
    assert numerics.kind == "Float64ReferenceError" and numerics.line == 14  # [tolerance]
    assert "cannot run in float64" in numerics.message and "rtol/atol" in numerics.message
    assert "float32 input expected, got torch.float64" in numerics.message
    assert result.check("layout_transforms")  # the static checks stand


def test_float32_tensors_a_model_makes_itself_follow_the_float64_run(write_case):
    """A forward that makes a float32 tensor of its own (a diffusion model's timestep
    embedding, ``arange(dtype=float32)``) met the float64 copy's weights in an op that does
    not promote, and the case could not be judged against float64 ("mat1 and mat2 must have
    the same dtype"): the reference runs with that tensor made float64."""
    # budget 1: the NCHW input; the flatten's transpose folds into the constant matrix.
    text = _float64(tiny_case(1, model="tiny_models:float32_only"))
    (result,) = judge_in_process([load_case(write_case(text))], RunOptions(isolate=False))
    numerics = result.check("numerics")
    assert numerics.status is Status.PASSED, numerics.message
    assert "against float64" in numerics.message, numerics.message


@pytest.mark.compile
def test_several_seeds_each_checked(write_case):
    (result,) = judge_in_process([load_case(write_case("seeds = 3\n" + tiny_case()))],
                               RunOptions(isolate=False))
    numerics = result.check("numerics")
    assert numerics and "over 3 samples (seed=0; seed=1; seed=2)" in numerics.message
    assert [ln.split(" shape")[0] for ln in numerics.body.splitlines()] == [
        "output 0 at seed=0", "output 0 at seed=1", "output 0 at seed=2"]
