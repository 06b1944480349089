"""``cl-validate calibrate``: the proposal rule on known errors, and a real tiny model whose
tolerance is measured, proposed and written back without losing a comment."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from cl_validate.checks.calibration import FLOOR, nice_ceil, observe, propose
from cl_validate.errors import ExitCode
from cl_validate.paths import repo_path
from cl_validate.spec import load_case
from cl_validate.spec.casefile import toml_number
from tests.conftest import DATA, run_cli, tiny_case


def test_nice_ceil_rounds_up_to_one_two_five():
    assert [nice_ceil(x) for x in (1.1e-5, 2e-5, 3e-5, 4.9e-7, 0.3, 7.0)] == \
        [2e-5, 2e-5, 5e-5, 5e-7, 0.5, 10.0]
    assert nice_ceil(0.0) == 0.0


def test_toml_number_is_short_and_exact():
    assert [toml_number(x) for x in (5e-6, 1e-4, 1.5e-5, 0.01)] == ["5e-6", "1e-4", "1.5e-5",
                                                                     "0.01"]
    assert float(toml_number(1.234567e-7)) == 1.234567e-7


def test_proposal_covers_the_observed_error_with_headroom():
    rng = np.random.default_rng(0)
    ref = rng.uniform(-1, 1, size=1000)
    err = 3e-6 * np.abs(ref) + 2e-7 * rng.uniform(-1, 1, size=1000)  # relative + absolute
    obs = observe([(0, 0, 0, ref + err, ref), (0, 1, 0, ref - err, ref)])
    assert len(obs.samples) == 2 and obs.samples[0].max_abs == pytest.approx(
        np.abs(err).max())
    rtol, atol = propose(obs, 4.0)
    assert np.all(np.abs(err) * 4 <= atol + rtol * np.abs(ref))
    assert rtol <= 2e-5 and atol <= 5e-6  # headroom, not a blanket loosening
    assert propose(observe([(0, 0, 0, ref, ref)]), 4.0) == (FLOOR, FLOOR)  # never zero


def test_non_finite_outputs_are_counted():
    ref = np.ones(4)
    obs = observe([(0, 0, 0, np.array([1.0, np.nan, 1.0, np.inf]), ref)])
    assert obs.nonfinite == 2




# Both targets (default), and a tolerance copied from another case: far too loose.
CASE = tiny_case(kernels=4, targets=None, tolerance=(1e-2, 1e-2), comments=True).replace(
    "[tolerance]\nrtol = 0.01",
    "[tolerance]\n# copied from another case\nrtol = 1e-2   # far too loose")


@pytest.mark.compile
def test_calibrate_proposes_then_writes_only_when_asked(tmp_path):
    shutil.copy(DATA / "tiny_models.py", tmp_path)
    case = tmp_path / "tiny.toml"
    case.write_text(CASE)
    code, out = run_cli(["calibrate", str(case), "--seeds", "3"]).both()
    assert code == ExitCode.OK, out
    rows = [ln.split() for ln in out.splitlines() if ln.split()[:1] == ["0"]]
    assert [r[1] for r in rows] == ["0", "1", "2"]  # one row per input seed
    assert "max over samples: max_abs" in out
    proposal = next(ln for ln in out.splitlines() if ln.startswith("proposed"))
    assert "rtol = " in proposal and "tiny.toml:16): rtol = 0.01, atol = 0.01" in out
    assert case.read_text() == CASE  # no --write: nothing written

    code, out = run_cli(["calibrate", str(case), "--seeds", "3", "--write"]).both()
    assert code == ExitCode.OK, out
    text = case.read_text()
    rtol = proposal.split("rtol = ")[1].split(",")[0]
    atol = proposal.split("atol = ")[1].strip()
    assert f"rtol = {rtol}   # far too loose\n" in text and f"atol = {atol}\n" in text
    assert "# copied from another case" in text
    # cuda inherited [tolerance] and was not measured: it keeps the old value
    assert text.endswith("[targets_override.cuda]\ntolerance = { rtol = 0.01, atol = 0.01 }\n")
    spec = load_case(case)
    assert spec.tolerance_for("llvm")[0].rtol == float(rtol) < 1e-2
    assert spec.tolerance_for("cuda")[0].rtol == 1e-2
    code, out = run_cli(["run", str(case), "--no-isolation", "--target", "llvm"]).both()
    assert code == ExitCode.OK, out  # the written tolerance holds on the run's own sample


@pytest.mark.compile
def test_calibrate_writes_through_a_link_keeping_crlf_and_the_bom(tmp_path, monkeypatch):
    """--write rewrites the case file as its author saved it: the link stays a link and its
    target is written, CRLF stays CRLF, the UTF-8 BOM stays."""
    shared, cases = tmp_path / "elsewhere", tmp_path / "cases"
    shared.mkdir()
    cases.mkdir()
    shutil.copy(DATA / "tiny_models.py", shared)
    target = shared / "tiny.toml"
    target.write_bytes(b"\xef\xbb\xbf" + CASE.replace("\n", "\r\n").encode())
    (cases / "tiny.toml").symlink_to("../elsewhere/tiny.toml")
    monkeypatch.chdir(tmp_path)
    code, out = run_cli(["calibrate", "cases/tiny.toml", "--seeds", "1", "--write"]).both()
    assert code == ExitCode.OK, out
    assert "wrote cases/tiny.toml -> elsewhere/tiny.toml:" in out
    assert "(CRLF line ends and the UTF-8 byte-order mark kept)" in out
    assert (cases / "tiny.toml").is_symlink()
    data = target.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and b"\r\n" in data
    assert data.count(b"\n") == data.count(b"\r\n")  # every line, the added ones too
    text = data.decode("utf-8-sig").replace("\r\n", "\n")
    assert "rtol = 1e-2   # far too loose" not in text and "# copied from another case" in text
    assert text.endswith("[targets_override.cuda]\ntolerance = { rtol = 0.01, atol = 0.01 }\n")


def test_calibrate_usage_errors(tmp_path):
    from cl_validate.compile.tvm_targets import device_available

    code, out = run_cli(["calibrate", str(tmp_path / "nope.toml")]).both()
    assert code == ExitCode.USAGE_ERROR and "case file not found" in out
    if not device_available("cuda"):
        shutil.copy(DATA / "tiny_models.py", tmp_path)
        case = tmp_path / "tiny.toml"
        case.write_text(CASE)
        code, out = run_cli(["calibrate", str(case), "--target", "cuda"]).both()
        assert code == ExitCode.USAGE_ERROR and "no cuda device" in out


FLOAT64 = tiny_case(targets=("llvm",)).replace("[tolerance]\nrtol = 0.0001\natol = 0.0001\n",
                                               '[tolerance]\nreference = "float64"\n')


@pytest.mark.compile
def test_a_float64_case_is_reported_by_its_own_rule_and_never_written(tmp_path):
    """A case judged against float64 has nothing to tune: calibrate shows each sample's RMSE
    against float64 beside eager float32's, their ratio and the bound, and refuses --write
    (rtol/atol there would never be judged by) with the file and line, before compiling."""
    shutil.copy(DATA / "tiny_models.py", tmp_path)
    case = tmp_path / "tiny.toml"
    case.write_text(FLOAT64)
    code, out = run_cli(["calibrate", str(case), "--seeds", "2"]).both()
    assert code == ExitCode.OK, out
    assert "against the float64 reference (TVM's RMSE <= 3 x eager float32's + 1e-05)" in out
    head = out.splitlines().index(next(ln for ln in out.splitlines() if "tvm_rmse" in ln))
    rows = [ln.split() for ln in out.splitlines()[head + 1:head + 3]]
    assert [r[1] for r in rows] == ["0", "1"]
    for r in rows:
        tvm, eager, ratio, allowed = (float(x) for x in r[3:7])
        assert ratio == pytest.approx(tvm / eager, rel=0.02) and allowed > 3 * eager
    assert "nothing to tune" in out and "proposed" not in out

    code, out = run_cli(["calibrate", str(case), "--write"]).both()
    assert code == ExitCode.USAGE_ERROR
    assert "tiny.toml:14: case 'tiny' is judged against float64 on llvm" in out
    assert "Traceback" not in out and case.read_text() == FLOAT64


@pytest.mark.compile
def test_a_float64_case_that_exceeds_its_bound_fails_and_says_how_to_find_the_stage(tmp_path):
    for f in ("tiny_models.py", "perturb_pipeline.py"):
        shutil.copy(DATA / f, tmp_path)
    case = tmp_path / "tiny.toml"
    case.write_text(FLOAT64.replace('targets = ["llvm"]', 'targets = ["llvm"]\npipeline = '
                                    '"perturb_pipeline:nhwc_perturbed"'))
    code, out = run_cli(["calibrate", str(case), "--seeds", "2"]).both()
    assert code == ExitCode.CHECK_FAILED, out
    assert out.count("EXCEEDS") == 2 and "2 of 2 exceed the bound" in out
    assert f"cl-validate show {repo_path(case)} --bisect" in out
