"""``cl-validate init``: a first case file with measured budgets, each number saying where it
came from; ``budget tighten`` flagging the comments next to the numbers it changed; hints that
name a case outside ``model_cases/`` by its path."""

from __future__ import annotations

import datetime
import shutil
from pathlib import Path

import pytest

from cl_validate import load_case
from cl_validate.errors import ExitCode
from cl_validate.spec.budgets import flag_comments
from cl_validate.spec.casefile import load_text_as_case
from tests.conftest import DATA, run_cli, tiny_case


@pytest.mark.compile
def test_init_writes_a_case_with_measured_budgets_that_then_passes(tmp_path, monkeypatch):
    shutil.copy(DATA / "tiny_models.py", tmp_path)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "cases" / "first.toml"
    code, text = run_cli(["init", "tiny_models:conv_relu", "--input", "x:1x3x16x16", "-o",
                          str(out), "--target", "llvm", "--no-isolation"]).both()
    assert code == ExitCode.OK, text
    assert "wrote cases/first.toml" in text and "next: cl-validate run cases/first.toml" in text
    written = out.read_text()
    case = load_case(out)
    # conv_relu: NCHW in and out, so the two boundary transforms; conv, relu+conv fused
    budget = case.budget_for("llvm")
    assert budget.get("layout_transforms") == 2 and budget.get("kernels") == 4
    assert (budget.get("layout_transform_bytes") or 0) > 0
    assert case.layout == {"relax.nn.conv2d": ("NHWC", "OHWI")}
    today = datetime.date.today().isoformat()
    for key in ("layout_transforms", "kernels", "layout_transform_bytes"):
        (line,) = [ln for ln in written.splitlines() if ln.startswith(f"{key} =")]
        assert f"# llvm, cl-validate init {today}, apache-tvm " in line and "torch " in line
    assert not list(out.parent.glob(".*"))  # the draft is gone
    code, text = run_cli(["run", str(out), "--no-isolation"]).both()
    assert code == ExitCode.OK, text  # green as written

    # never overwrites what a user wrote without --force
    out.write_text(written + "# mine\n")
    code, text = run_cli(["init", "tiny_models:conv_relu", "--input", "x:1x3x16x16", "-o",
                          str(out), "--target", "llvm", "--no-isolation"]).both()
    assert code == ExitCode.USAGE_ERROR
    assert "cases/first.toml exists: not replaced (hint: pass --force" in text
    assert out.read_text().endswith("# mine\n")


@pytest.mark.compile
def test_init_measures_each_target_and_overrides_where_they_differ(tmp_path, monkeypatch):
    shutil.copy(DATA / "tiny_models.py", tmp_path)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "c.toml"
    code, text = run_cli(["init", "tiny_models:conv_relu", "--input", "x:1x3x16x16", "-o",
                          str(out), "--no-isolation"]).both()
    assert code == ExitCode.OK, text
    case = load_case(out)
    assert case.targets == ("llvm", "cuda")
    # dlight's Fallback count exists on cuda only: in cuda's override, said to be cuda's
    assert case.budget_for("llvm").get("fallback_kernels") is None
    assert case.budget_for("cuda").get("fallback_kernels") == 2  # the two boundary transposes
    (line,) = [ln for ln in out.read_text().splitlines() if ln.startswith("fallback_kernels")]
    assert "# cuda, cl-validate init" in line


@pytest.mark.compile
def test_init_of_a_model_without_convolutions_declares_no_layout(tmp_path, monkeypatch):
    (tmp_path / "mlp.py").write_text(
        "import torch\n\n\ndef mlp():\n    return torch.nn.Sequential(torch.nn.Linear(8, 4), "
        "torch.nn.ReLU())\n")
    monkeypatch.chdir(tmp_path)
    code, text = run_cli(["init", "mlp:mlp", "--input", "x:2x8", "--target", "llvm",
                          "--no-isolation"]).both()
    assert code == ExitCode.OK, text
    out = tmp_path / "model_cases" / "mlp.toml"  # the default place
    case = load_case(out)
    assert case.layout == {} and "[layout]" not in out.read_text()
    assert case.budget_for("llvm").get("layout_transforms") == 0
    assert (case.budget_for("llvm").get("kernels") or 0) >= 1


@pytest.mark.compile
def test_init_of_a_model_that_does_not_compile_writes_nothing(tmp_path, monkeypatch):
    shutil.copy(DATA / "tiny_models.py", tmp_path)
    monkeypatch.chdir(tmp_path)
    code, text = run_cli(["init", "tiny_models:raises", "--input", "x:1x3x8x8",
                          "--target", "llvm", "--no-isolation"]).both()
    assert code != ExitCode.OK
    assert "raised" in text and "Traceback" not in text
    assert ".init-" not in text, text  # the hidden copy it measured is no place to look
    assert not (tmp_path / "model_cases").exists() or not list(
        (tmp_path / "model_cases").iterdir())


@pytest.mark.parametrize(("arg", "says"), [
    ("x", "not NAME:SHAPE[:LAYOUT][:DTYPE]"),
    ("x:1x0x4", "is not positive integers"),
    ("x:1x3x4x4:NCWH", "'NCWH' is neither a layout (NCHW, NHWC) nor a dtype"),
    ("x:1x3x4:NHWC", "a layout needs a 4-D shape"),
    ("x:1x3x4x4:int64:float16", "'float16' is neither a layout"),
    ("t:scalar:NCHW", "a layout needs a 4-D shape"),
])
def test_init_refuses_a_bad_input_in_one_line(tmp_path, arg, says):
    code, text = run_cli(["init", "m:f", "--input", arg, "-o", str(tmp_path / "a.toml")]).both()
    assert code == ExitCode.USAGE_ERROR and says in text and "Traceback" not in text
    assert not (tmp_path / "a.toml").exists()


def test_init_declares_each_inputs_dtype_and_a_0_d_input(tmp_path, monkeypatch):
    """A token-id input and a diffusion sampler's timestep: ``ids:1x8:int64`` and
    ``t:scalar:int64`` are written as the case file declares them (dtype, ``shape = []``);
    a layout and a dtype go in either order."""
    from cl_validate.cli.init import parse_input, skeleton

    inputs = [parse_input(a) for a in ("x:1x3x8x8:float16:NHWC", "ids:1x8:int64",
                                       "t:scalar:int64", "s:[]")]
    assert [(i.shape, i.layout, i.dtype) for i in inputs] == [
        ((1, 3, 8, 8), "NHWC", "float16"), ((1, 8), None, "int64"), ((), None, "int64"),
        ((), None, "float32")]
    case = load_text_as_case(tmp_path / "c.toml", skeleton("m:f", inputs, ["llvm"], "d"))
    assert [(i.name, i.shape, i.dtype, i.layout) for i in case.inputs] == [
        ("x", (1, 3, 8, 8), "float16", "NHWC"), ("ids", (1, 8), "int64", None),
        ("t", (), "int64", None), ("s", (), "float32", None)]


def test_tighten_flags_the_comment_next_to_each_changed_number():
    old = tiny_case(3, kernels=5, comments=True)
    new = old.replace("layout_transforms = 3", "layout_transforms = 2").replace(
        "kernels = 5", "kernels = 4")
    day = datetime.date(2026, 1, 2)
    got = flag_comments(old, new, day)
    # a trailing comment gets the marker; no comment at all: nothing to flag
    assert ("layout_transforms = 2   # boundaries [tighten 2026-01-02: was "
            "`layout_transforms = 3`: check this comment]\n") in got
    assert "kernels = 4\n" in got
    assert got.count("[tighten") == 1
    # a line with only a comment block above: the marker goes between them
    old2 = "[budget]\n# one permute: the input boundary\nkernels = 3\n"
    got2 = flag_comments(old2, old2.replace("= 3", "= 2"), day)
    assert got2 == ("[budget]\n# one permute: the input boundary\n# ^ [tighten 2026-01-02: "
                    "was `kernels = 3`: check this comment]\nkernels = 2\n")
    # a comment flagged already keeps the value it was written for
    again = flag_comments(got2, got2.replace("= 2", "= 1"), datetime.date(2026, 2, 3))
    assert again == got2.replace("= 2", "= 1")
    # a line tighten adds beside a changed one (raised: its reason) is not a change
    old3 = "[budget]\nlayout_transforms = 1   # boundaries\nkernels = 4\n"
    got3 = flag_comments(old3, old3.replace("= 1   # boundaries\n",
                                            '= 2   # boundaries\nreason = "r"\n'), day)
    assert got3 == ("[budget]\nlayout_transforms = 2   # boundaries [tighten 2026-01-02: was "
                    "`layout_transforms = 1`: check this comment]\nreason = \"r\"\nkernels = 4\n")
    # the flagged text still means the new numbers
    assert load_text_as_case(Path("t.toml"), got).budget_for("llvm").get("layout_transforms") == 2


def test_a_hint_names_a_case_outside_model_cases_by_its_path(tmp_path, monkeypatch):
    inside = tmp_path / "model_cases"
    inside.mkdir()
    (inside / "a.toml").write_text(tiny_case())
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "b.toml").write_text(tiny_case())
    monkeypatch.chdir(tmp_path)
    assert load_case(inside / "a.toml").ref == "a"
    b = load_case(tmp_path / "elsewhere" / "b.toml")
    assert b.ref == "elsewhere/b.toml"
    # and what the hint names, `show` finds (no compile: a target the case lacks)
    code, text = run_cli(["show", b.ref, "--target", "nope"]).both()
    assert code == ExitCode.USAGE_ERROR and "has no target 'nope'" in text, text
