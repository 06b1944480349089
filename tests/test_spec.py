"""The case-file loader: the v1 contract, and one-line errors with file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from cl_validate.errors import CaseFileError, UsageError
from cl_validate.spec import load_case, load_cases, locate_lines
from tests.conftest import MINIMAL


def test_minimal_case_defaults(write_case):
    case = load_case(write_case(MINIMAL, "mini.toml"))
    assert case.name == "mini"
    assert case.targets == ("llvm", "cuda")
    assert case.pipeline == "nhwc"
    assert case.inputs[0].shape == (1, 3, 16, 16)
    assert case.inputs[0].dtype == "float32"
    assert case.inputs[0].layout is None
    assert case.layout == {"relax.nn.conv2d": ("NHWC", "OHWI")}
    assert case.budget.get("layout_transforms") == 2
    assert case.budget.line("layout_transforms") == 11
    assert case.budget.get("kernels") is None


def test_design_example_parses(write_case):
    case = load_case(write_case('''
        name = "resnet50"                     # comment
        model = "zoo.resnet:resnet50"
        description = "ResNet-50, NCHW in and out"
        targets = ["llvm", "cuda"]

        [[inputs]]
        name = "x"
        shape = [1, 3, 224, 224]
        dtype = "float32"
        layout = "NCHW"
        range = [-1.0, 1.0]

        [layout]
        "relax.nn.conv2d" = ["NHWC", "OHWI"]

        [budget]
        layout_transforms = 2
        kernels = 110

        [tolerance]
        rtol = 1e-5
        atol = 1e-5

        [targets_override.cuda]
        tolerance = { rtol = 1e-3, atol = 1e-3 }
        budget = { layout_transforms = 3 }
    '''))
    assert case.name == "resnet50"
    assert case.inputs[0].range == (-1.0, 1.0)
    tol, line = case.tolerance_for("cuda")
    assert (tol.rtol, tol.atol) == (1e-3, 1e-3) and line == 25
    tol, line = case.tolerance_for("llvm")
    assert (tol.rtol, tol.atol) == (1e-5, 1e-5) and line == 20
    assert case.budget_for("cuda").get("layout_transforms") == 3
    assert case.budget_for("cuda").line("layout_transforms") == 26
    assert case.budget_for("llvm").get("layout_transforms") == 2
    assert case.budget_for("llvm").get("kernels") == 110


def test_per_output_tolerance_precedence(write_case):
    case = load_case(write_case(MINIMAL + '''
        [tolerance]
        rtol = 1e-5
        atol = 1e-5

        [[outputs]]
        name = "logits"
        tolerance = { atol = 1e-2 }
        targets_override = { cuda = { tolerance = { rtol = 0.5 } } }

        [[outputs]]
        name = "aux"
    '''))
    t0, _ = case.tolerance_for("llvm", 0)
    assert (t0.rtol, t0.atol) == (1e-5, 1e-2)
    t0c, _ = case.tolerance_for("cuda", 0)
    assert (t0c.rtol, t0c.atol) == (0.5, 1e-2)
    t1, _ = case.tolerance_for("cuda", 1)
    assert (t1.rtol, t1.atol) == (1e-5, 1e-5)


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        (MINIMAL + "\n[layuot]\n", 13,
         "unknown key 'layuot' in [case] (hint: did you mean 'layout'?)"),
        (MINIMAL.replace("shape = [1, 3, 16, 16]", "shape = [1, 3, 16, 16]\nshpae = [1]"),
         6, "did you mean 'shape'?"),
        (MINIMAL.replace("layout_transforms = 2", "layout_transforms = -1"), 11, ">= 0"),
        (MINIMAL.replace("layout_transforms = 2", "layout_transforms = 1.5"), 11,
         "must be an integer"),
        (MINIMAL.replace("layout_transforms = 2", 'layout_transforms = "2"'), 11,
         "must be an integer"),
        (MINIMAL.replace("[1, 3, 16, 16]", "[1, 0, 16, 16]"), 5, "must be >= 1"),
        (MINIMAL.replace("[1, 3, 16, 16]", "{ n = 1 }"), 5, "must be an array of integers"),
        (MINIMAL.replace("[1, 3, 16, 16]", "[100000, 100000, 3, 3]"), 5, "elements"),
        (MINIMAL.replace('name = "x"', 'name = "x"\ndtype = "float33"'), 5,
         "did you mean 'float32'?"),
        (MINIMAL.replace('name = "x"', 'name = "x"\nlayout = "NWHC"'), 5, "unsupported layout"),
        (MINIMAL.replace('model = "tiny_models:conv_relu"', 'model = "tiny_models"'), 1,
         "not of the form 'module:callable'"),
        (MINIMAL.replace('model = "tiny_models:conv_relu"', ""), None, "missing required key"),
        (MINIMAL + '\n[tolerance]\nrtol = -1e-3\n', 14, "rtol must be >= 0"),
        (MINIMAL + '\n[targets_override.cdua]\nbudget = { layout_transforms = 1 }\n', 13,
         "did you mean 'cuda'?"),
        ('targets = ["llvm", "tpu"]\n' + MINIMAL, 1, "unknown target 'tpu'"),
        ('name = "a/b"\n' + MINIMAL, 1, "may only use letters"),
        (MINIMAL + '\nbroken = = 1\n', 13, "TOML syntax error"),
    ],
)
def test_bad_case_files_name_file_and_line(write_case, text, line, fragment):
    path = write_case(text, "bad.toml")
    with pytest.raises(CaseFileError) as info:
        load_case(path)
    err = info.value
    assert err.line == line, str(err)
    assert fragment in str(err)
    assert str(err).startswith(str(err.file))
    assert "\n" not in str(err)


def test_layout_on_non_image_input_is_an_error(write_case):
    text = MINIMAL.replace("[1, 3, 16, 16]", "[1, 16]").replace(
        'name = "x"', 'name = "x"\nlayout = "NHWC"')
    with pytest.raises(CaseFileError, match="needs a 4-D input"):
        load_case(write_case(text))


def test_nhwc_input_and_output_layouts(write_case):
    text = MINIMAL.replace('name = "x"', 'name = "x"\nlayout = "NHWC"') + \
        '\n[[outputs]]\nlayout = "NHWC"\n'
    case = load_case(write_case(text))
    assert case.inputs[0].layout == "NHWC"
    assert case.output_layout(0) == "NHWC"
    assert case.output_layout(1) is None


def test_duplicate_case_names(tmp_path: Path):
    (tmp_path / "a.toml").write_text('name = "same"\n' + MINIMAL)
    (tmp_path / "b.toml").write_text('name = "same"\n' + MINIMAL)
    with pytest.raises(CaseFileError, match="duplicate case name 'same'"):
        load_cases([tmp_path])


def test_missing_path_and_empty_folder(tmp_path: Path):
    with pytest.raises(UsageError, match="no such case file"):
        load_cases([tmp_path / "nope"])
    with pytest.raises(UsageError, match="no case files found"):
        load_cases([tmp_path])


def test_locate_lines_handles_tables_arrays_and_inline_tables():
    lines = locate_lines(
        'a = 1\n[[inputs]]\nname = "x"\n[[inputs]]\nname = "y"\n'
        '[targets_override.cuda]\ntolerance = { rtol = 1, atol = 2 }\n'
        'arr = [\n  "name = 3",\n]\nafter = 1\n')
    assert lines[("a",)] == 1
    assert lines[("inputs", "0", "name")] == 3
    assert lines[("inputs", "1", "name")] == 5
    assert lines[("targets_override", "cuda", "tolerance", "atol")] == 7
    assert lines[("targets_override", "cuda", "after")] == 11
    assert ("targets_override", "cuda", "name") not in lines
