"""The command line: exit codes, one-line user errors, list/show, selection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cl_validate.errors import ExitCode
from tests.conftest import DATA, MINIMAL, run_cli


def test_bad_case_file_is_one_line_exit_2_without_traceback(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text(MINIMAL + "\n[layuot]\n")
    proc = subprocess.run([sys.executable, "-m", "cl_validate", "run", str(bad)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == ExitCode.USAGE_ERROR
    assert proc.stderr.strip() == ("cl-validate: error: bad.toml:13: unknown key 'layuot' in "
                                   "[case] (hint: did you mean 'layout'?)")
    assert "Traceback" not in proc.stderr and proc.stdout == ""


BAD_FACTORIES = {"nowhere:factory": "cannot import 'nowhere'",
                 "tiny_models:missing": "has no attribute 'missing'",
                 "tiny_models:not_a_module": "returned list, not a torch.nn.Module",
                 "tiny_models:raises": "raised RuntimeError: weights file missing"}


def test_bad_factories_exit_2_with_model_line(write_case):
    """Found in a worker (the parent never runs model code), said in one line each with the
    model's line; no case is usable, so the run is a usage error. One run for the four (a
    zygote each cost about 10 s of the suite)."""
    paths = {write_case(MINIMAL.replace("tiny_models:conv_relu", model), f"bad{i}.toml"): says
             for i, (model, says) in enumerate(BAD_FACTORIES.items())}
    code, out, err = run_cli(["run", *map(str, paths), "-j", "2"])
    assert code == ExitCode.USAGE_ERROR, out + err
    *firsts, last = err.splitlines()
    assert len(firsts) == len(paths), err
    for path, fragment in paths.items():
        (first,) = [line for line in firsts if f"{path.name}:1: " in line]
        assert fragment in first, first
        assert f"ERROR {path.stem} [llvm] compile: " in out, out
    assert last == "cl-validate: error: no case could be run: every case file above is unusable"
    assert "Traceback" not in out + err


def test_usage_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no project targets: the built-in ones only
    code, _, err = run_cli(["run", str(tmp_path / "missing")])
    assert code == ExitCode.USAGE_ERROR and "no such case file or folder" in err
    code, _, err = run_cli(["run", "--target", "tpu", str(DATA)])
    assert code == ExitCode.USAGE_ERROR and err == (
        "cl-validate: error: unknown target 'tpu' (hint: targets: llvm, cuda)\n")
    code, _, err = run_cli(["run", "--target", "cdua", str(DATA)])
    assert "unknown target 'cdua' (hint: did you mean 'cuda'?)" in err
    code, _, err = run_cli(["run", str(DATA), "-k", "zzz"])
    assert code == ExitCode.USAGE_ERROR and "matches no case" in err


def test_require_device_without_gpu_is_an_error():
    from cl_validate.compile.tvm_targets import device_available

    if device_available("cuda"):
        pytest.skip("this machine has a CUDA device")
    code, out, err = run_cli(["run", str(DATA / "conv_relu.toml"), "--target", "cuda",
                           "--require-device"])
    assert code == ExitCode.USAGE_ERROR
    assert "--require-device: no cuda device" in err and out == ""


def test_require_device_fails_before_the_zygote_is_asked_where_no_driver_loads(monkeypatch):
    """A GPU job on a runner without a GPU: where the device type's driver libraries do not
    load, the run fails at once; it used to wait for the zygote's answer (its imports and
    warm-up, about 10 s)."""
    from cl_validate.suite import pool
    from cl_validate.suite.zygote_client import ZygoteClient

    def asked(self: object) -> dict[str, bool]:
        raise AssertionError("the zygote was asked")

    monkeypatch.setattr(ZygoteClient, "wait_for_devices", asked)
    monkeypatch.setattr(pool, "driver_loads", lambda device: device == "cpu")
    code, out, err = run_cli(["run", str(DATA / "conv_relu.toml"), "--target", "cuda",
                              "--require-device"])
    assert code == ExitCode.USAGE_ERROR, out + err
    assert err.startswith("cl-validate: error: --require-device: no cuda device") and out == ""


def test_a_device_type_has_no_device_only_where_none_of_its_driver_libraries_loads(
        monkeypatch):
    from cl_validate.spec import placement

    monkeypatch.setattr(placement, "DRIVERS", {"cuda": ("libcl-validate-absent.so.1",),
                                               "opencl": ("libcl-validate-absent.so",
                                                          "libc.so.6")})
    assert placement.driver_loads("cpu") and placement.driver_loads("metal")  # not known
    assert placement.driver_loads("opencl")  # one of its libraries loads
    assert placement.driver_loads("cuda") is not sys.platform.startswith("linux")


def test_list():
    code, out, _ = run_cli(["list", str(DATA)])
    assert code == ExitCode.OK
    assert "conv_relu" in out and "transforms<=2" in out and "kernels<=4" in out


@pytest.mark.compile
def test_show_prints_stage_counts_and_marked_kernel_list():
    code, out, _ = run_cli(["show", str(DATA / "conv_relu.toml")])
    assert code == ExitCode.OK
    assert "convert_layout" in out and "fuse_tir" in out
    assert ">>   0  transpose" in out
    assert "2 runtime layout transforms (budget 2)" in out


@pytest.mark.compile
def test_show_stage_ir_and_unknown_stage():
    code, out, _ = run_cli(["show", str(DATA / "conv_relu.toml"), "--stage", "convert_layout"])
    assert code == ExitCode.OK
    assert "R.permute_dims" in out and 'data_layout="NHWC"' in out
    code, _, err = run_cli(["show", str(DATA / "conv_relu.toml"), "--stage", "nope"])
    assert code == ExitCode.USAGE_ERROR
    assert "stages: import, normalize_axes, raise_attention, unfold_filters, convert_layout" in err


@pytest.mark.compile
def test_run_selects_with_k_and_target():
    code, out, _ = run_cli(["run", str(DATA), "-k", "conv_*", "--target", "llvm"])
    assert code == ExitCode.OK, out
    assert "[1/1] PASS  conv_relu  llvm" in out


def test_console_script_entry_point_help():
    proc = subprocess.run([sys.executable, "-m", "cl_validate", "--help"], capture_output=True,
                          text=True)
    assert proc.returncode == 0 and "run" in proc.stdout and "show" in proc.stdout


@pytest.mark.compile
def test_show_diff_between_two_stages():
    code, out, _ = run_cli(["show", str(DATA / "conv_relu.toml"), "--diff", "import",
                         "convert_layout"])
    assert code == ExitCode.OK
    assert out.startswith("--- import\n+++ convert_layout")
    assert "+" in out and "R.permute_dims" in out and 'data_layout="NHWC"' in out
    code, out, _ = run_cli(["show", str(DATA / "conv_relu.toml"), "--diff", "fuse", "fuse"])
    assert code == ExitCode.OK and "no difference between fuse and fuse" in out


@pytest.mark.compile
def test_show_names_each_transforms_source():
    code, out, _ = run_cli(["show", str(DATA / "conv_relu.toml")])
    assert code == ExitCode.OK
    assert "graph input boundary, from input 'x'" in out
    assert "graph output boundary, from conv2" in out
