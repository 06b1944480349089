"""The command line: exit codes, one-line user errors, list/show, selection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cl_validate.cli import main
from cl_validate.errors import ExitCode
from tests.conftest import DATA, MINIMAL


def _run(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_bad_case_file_is_one_line_exit_2_without_traceback(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text(MINIMAL + "\n[layuot]\n")
    proc = subprocess.run([sys.executable, "-m", "cl_validate", "run", str(bad)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == ExitCode.USAGE_ERROR
    assert proc.stderr.strip() == ("cl-validate: error: bad.toml:14: unknown key 'layuot' in "
                                   "[case] (hint: did you mean 'layout'?)")
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize(
    ("model", "fragment"),
    [
        ("nowhere:factory", "cannot import 'nowhere'"),
        ("tiny_models:missing", "has no attribute 'missing'"),
        ("tiny_models:not_a_module", "returned list, not a torch.nn.Module"),
        ("tiny_models:raises", "raised RuntimeError: weights file missing"),
    ],
)
def test_bad_factories_exit_2_with_model_line(write_case, capsys, model, fragment):
    path = write_case(MINIMAL.replace("tiny_models:conv_relu", model))
    code, out, err = _run(["run", str(path)], capsys)
    assert code == ExitCode.USAGE_ERROR
    assert err.count("\n") == 1 and fragment in err
    assert f"{path.name}:1:" in err or ":1: " in err
    assert out == ""  # nothing compiled, no progress line


def test_usage_errors(capsys, tmp_path):
    code, _, err = _run(["run", str(tmp_path / "missing")], capsys)
    assert code == ExitCode.USAGE_ERROR and "no such case file or folder" in err
    code, _, err = _run(["run", "--target", "tpu", str(DATA)], capsys)
    assert code == ExitCode.USAGE_ERROR and "invalid choice: 'tpu'" in err
    code, _, err = _run(["run", str(DATA), "-k", "zzz"], capsys)
    assert code == ExitCode.USAGE_ERROR and "matches no case" in err


def test_require_device_without_gpu_is_an_error(capsys):
    from cl_validate.pipeline import device_available

    if device_available("cuda"):
        pytest.skip("this machine has a CUDA device")
    code, out, err = _run(["run", str(DATA / "conv_relu.toml"), "--target", "cuda",
                           "--require-device"], capsys)
    assert code == ExitCode.USAGE_ERROR
    assert "--require-device: no cuda device" in err and out == ""


def test_list(capsys):
    code, out, _ = _run(["list", str(DATA)], capsys)
    assert code == ExitCode.OK
    assert "conv_relu" in out and "transforms<=2" in out and "kernels<=4" in out


@pytest.mark.compile
def test_show_prints_stage_counts_and_marked_kernel_list(capsys):
    code, out, _ = _run(["show", str(DATA / "conv_relu.toml")], capsys)
    assert code == ExitCode.OK
    assert "convert_layout" in out and "fuse_tir" in out
    assert ">>   0  transpose" in out
    assert "2 runtime layout transforms (budget 2)" in out


@pytest.mark.compile
def test_show_stage_ir_and_unknown_stage(capsys):
    code, out, _ = _run(["show", str(DATA / "conv_relu.toml"), "--stage", "convert_layout"],
                        capsys)
    assert code == ExitCode.OK
    assert "R.permute_dims" in out and 'data_layout="NHWC"' in out
    code, _, err = _run(["show", str(DATA / "conv_relu.toml"), "--stage", "nope"], capsys)
    assert code == ExitCode.USAGE_ERROR and "stages: import, convert_layout" in err


@pytest.mark.compile
def test_run_selects_with_k_and_target(capsys):
    code, out, _ = _run(["run", str(DATA), "-k", "conv_*", "--target", "llvm"], capsys)
    assert code == ExitCode.OK, out
    assert "[1/1] PASS  conv_relu  llvm" in out


def test_console_script_entry_point_help():
    proc = subprocess.run([sys.executable, "-m", "cl_validate", "--help"], capture_output=True,
                          text=True)
    assert proc.returncode == 0 and "run" in proc.stdout and "show" in proc.stdout


@pytest.mark.compile
def test_show_diff_between_two_stages(capsys):
    code, out, _ = _run(["show", str(DATA / "conv_relu.toml"), "--diff", "import",
                         "convert_layout"], capsys)
    assert code == ExitCode.OK
    assert out.startswith("--- import\n+++ convert_layout")
    assert "+" in out and "R.permute_dims" in out and 'data_layout="NHWC"' in out
    code, out, _ = _run(["show", str(DATA / "conv_relu.toml"), "--diff", "fuse", "fuse"],
                        capsys)
    assert code == ExitCode.OK and "no difference between fuse and fuse" in out


@pytest.mark.compile
def test_show_names_each_transforms_source(capsys):
    code, out, _ = _run(["show", str(DATA / "conv_relu.toml")], capsys)
    assert code == ExitCode.OK
    assert "graph input boundary, from input 'x'" in out
    assert "graph output boundary, from conv2" in out
