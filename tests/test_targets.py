"""Named targets: declared in pyproject.toml or a case file, checked up front without TVM,
compiled by real TVM for what this machine can compile (aarch64, opencl; vulkan and rocm as
IR), and numerics placed where they can run (here, through an RPC tracker, or nowhere)."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
import tvm
from junitparser import Error, JUnitXml, Skipped
from tvm.support.rocm import find_rocm_path

from cl_validate.errors import ExitCode, UsageError
from cl_validate.spec import load_case
from cl_validate.spec.config import load_config
from cl_validate.spec.placement import RpcSettings, placement, rpc_settings
from cl_validate.spec.targets import BUILTIN, TargetDef
from tests.conftest import by_case, run_cli, tiny_case

DATA = Path(__file__).parent / "data"
ARM64 = ('[tool.cl_validate.targets.arm64]\n'
         'target = { kind = "llvm", mtriple = "aarch64-linux-gnu", mattr = ["+neon"] }\n')


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder (the working directory) whose pyproject.toml declares arm64, with
    the tiny models beside its cases."""
    shutil.copy(DATA / "tiny_models.py", tmp_path)
    (tmp_path / "pyproject.toml").write_text(ARM64)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _case(folder: Path, text: str, name: str = "case.toml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


# --------------------------------------------------------------------------------------------
# Declarations: what the parent checks, without TVM
# --------------------------------------------------------------------------------------------
def test_project_and_case_declarations(project):
    arm = load_config().targets["arm64"]
    assert arm.kind == "llvm" and arm.device == "cpu" and arm.triple == "aarch64-linux-gnu"
    assert arm.where() == "pyproject.toml:2" and arm.foreign("x86_64")
    assert not arm.foreign("arm64")  # uname -m on macOS says arm64 for aarch64
    case = load_case(_case(project, tiny_case(targets=("llvm", "arm64"))))
    assert case.targets == ("llvm", "arm64") and case.target_def("arm64") == arm
    assert case.target_def("llvm") is BUILTIN["llvm"]

    # Table form: the case runs on the tables' names, in order, declaring its own.
    text = tiny_case(targets=None).replace("[[inputs]]", textwrap.dedent('''\
        [targets.mali]
        target = { kind = "opencl", device = "mali" }
        host = { kind = "llvm", mtriple = "aarch64-linux-android" }
        rpc_key = "pixel"

        [targets.arm64]

        [targets_override.mali]
        tolerance = { rtol = 1e-3 }

        [[inputs]]'''))
    case = load_case(_case(project, text))
    mali = case.target_def("mali")
    assert case.targets == ("mali", "arm64")
    assert (mali.kind, mali.device, mali.rpc_key, mali.triple) == (
        "opencl", "opencl", "pixel", "aarch64-linux-android")
    assert mali.where() == "case.toml:4"  # its `target = {...}` line
    assert case.tolerance_for("mali")[0].rtol == 1e-3
    # A GPU kind without a host gets this machine's CPU as host, as cuda does.
    assert load_config().targets["arm64"].host is None
    assert BUILTIN["cuda"].host == {"kind": "llvm"}


@pytest.mark.parametrize(("decl", "line", "says"), [
    ('[targets.arm]\ntarget = { kind = "llvm" }\nrpc_kye = "x"\n', 4,
     "unknown key 'rpc_kye' in [targets.arm] (hint: did you mean 'rpc_key'?)"),
    ('[targets.arm]\ntarget = { kind = "lvm" }\n', 3,
     "unsupported target kind 'lvm' (hint: did you mean 'llvm'?)"),
    ('[targets."arm 64"]\ntarget = { kind = "llvm" }\n', 2,
     "target name 'arm 64' may only use letters, digits"),
    ('[targets.llvm]\ntarget = { kind = "llvm", mcpu = "znver4" }\n', 2,
     "target 'llvm' is built in and cannot be redeclared"),
    ('[targets.gpu]\ntarget = { kind = "cuda", host = { kind = "llvm" } }\n', 3,
     "host inside target (hint: write host = "),
    ('[targets.arm]\ntarget = { kind = "llvm", mcpu = { a = 1 } }\n', 3,
     "target.mcpu must be a string, number, boolean or an array of them"),
    ('[targets.arm]\nrpc_key = "x"\n', 2, "target 'arm' has no TVM target config"),
    ('[targets.arm]\ntarget = { kind = "llvm" }\nhost = { kind = "llvm" }\n', 4,
     "host only applies to GPU kinds"),
    ('[targets.arm]\ntarget = { kind = "llvm" }\nrpc_key = "a:b"\n', 4,
     "rpc_key 'a:b' may only use"),
    ('[targets.arm64]\ntarget = { kind = "llvm" }\n', 2,
     "target 'arm64' is already declared in pyproject.toml:2"),
    ('targets = ["llvm", "arm46"]\n', 2, "unknown target 'arm46' (hint: did you mean 'arm64'?)"),
    ('targets = ["llvm"]\n[targets_override.arm46]\ntolerance = { rtol = 1 }\n', 3,
     "unknown target 'arm46' in [targets_override] (hint: did you mean 'arm64'?)"),
])
def test_declaration_mistakes_are_one_line_at_their_line(project, decl, line, says):
    model, rest = tiny_case(targets=None).split("\n", 1)  # model on line 1, `decl` from 2
    path = _case(project, f"{model}\n{decl}{rest}")
    with pytest.raises(UsageError) as info:
        load_case(path)
    assert str(info.value).startswith(f"case.toml:{line}: "), str(info.value)
    assert says in str(info.value)


def test_pyproject_declaration_mistakes_point_into_pyproject(project):
    (project / "pyproject.toml").write_text(ARM64 + 'cc = "gcc"\nrpc_keys = "x"\n')
    with pytest.raises(UsageError) as info:
        load_config()
    assert str(info.value) == ("pyproject.toml:4: unknown key 'rpc_keys' in "
                               "[tool.cl_validate.targets.arm64] (hint: did you mean 'rpc_key'?)")
    case = _case(project, tiny_case(targets=("llvm",)))
    code, _, err = run_cli(["run", str(case)])
    assert code == ExitCode.USAGE_ERROR and err.startswith("cl-validate: error: pyproject.toml:4")


def test_unknown_target_on_the_command_line(project):
    case = _case(project, tiny_case(targets=("llvm",)))
    code, out, err = run_cli(["run", str(case), "--target", "arm46"])
    assert code == ExitCode.USAGE_ERROR and out == ""
    assert err == "cl-validate: error: unknown target 'arm46' (hint: did you mean 'arm64'?)\n"


# --------------------------------------------------------------------------------------------
# Where numerics run
# --------------------------------------------------------------------------------------------
def test_placement_rules():
    arm = TargetDef("arm64", {"kind": "llvm", "mtriple": "aarch64-linux-gnu"}, file="p", line=1)
    board = TargetDef("board", {"kind": "llvm"}, rpc_key="rk3588", file="p", line=1)
    cuda, llvm = BUILTIN["cuda"], BUILTIN["llvm"]
    tracker = ("127.0.0.1", 9190)
    none, gpu = RpcSettings(), (lambda d: d in ("cpu", "cuda"))

    def where(tdef: TargetDef, rpc: RpcSettings, have=lambda d: d == "cpu") -> str:
        p = placement(tdef, rpc, have)
        return p.describe() if p.runs else p.reason

    assert where(llvm, none) == "local"
    assert where(cuda, none) == "no cuda device on this machine: static checks only"
    assert where(cuda, none, gpu) == "local"
    assert where(arm, none) == ("no arm64 device (llvm, aarch64-linux-gnu) on this machine and "
                                "no RPC tracker (--rpc-tracker HOST:PORT --rpc-key KEY): "
                                "static checks only")
    assert where(arm, RpcSettings(tracker)).endswith(
        "and no RPC key for it (--rpc-key arm64=KEY): static checks only")
    # The run's default key goes to targets with no device here, never to llvm or a GPU here.
    assert where(arm, RpcSettings(tracker, "rk3588")) == "rpc:rk3588"
    assert where(cuda, RpcSettings(tracker, "rk3588"), gpu) == "local"
    assert where(llvm, RpcSettings(tracker, "rk3588")) == "local"
    # A key by name sends even llvm to the tracker; without one it cannot run anywhere.
    assert where(llvm, RpcSettings(tracker, keys=(("llvm", "x86"),))) == "rpc:x86"
    assert where(board, RpcSettings(tracker, "other")) == "rpc:rk3588"
    assert where(board, RpcSettings(tracker, keys=(("board", "b2"),))) == "rpc:b2"
    assert where(board, none) == ("board runs on RPC key 'rk3588' and no RPC tracker is "
                                  "configured (--rpc-tracker HOST:PORT): static checks only")


def test_rpc_settings_follow_tvm_environment_variables():
    env = {"TVM_TRACKER_HOST": "farm.local", "TVM_TRACKER_PORT": "9190",
           "RPC_DEVICE_KEY": "android", "TVM_TRACKER_KEY": "rk3588"}
    assert rpc_settings(None, None, env) == RpcSettings(("farm.local", 9190), "rk3588")
    del env["TVM_TRACKER_KEY"]  # TVM's device tests' name, when the runner's is not set
    assert rpc_settings(None, None, env).key == "android"
    # The command line wins; TARGET=KEY names one target's key.
    got = rpc_settings(("127.0.0.1", 9000), ["x86", "llvm=cpu-farm"], env)
    assert got == RpcSettings(("127.0.0.1", 9000), "x86", (("llvm", "cpu-farm"),))
    assert rpc_settings(None, None, {}) == RpcSettings()
    with pytest.raises(UsageError, match="TVM_TRACKER_PORT='' is not a port"):
        rpc_settings(None, None, {"TVM_TRACKER_HOST": "farm"})
    with pytest.raises(UsageError, match="two default RPC keys"):
        rpc_settings(None, ["a", "b"], {})


def test_rpc_options_on_the_command_line(project):
    case = _case(project, tiny_case(targets=("llvm", "arm64")))
    code, _, err = run_cli(["run", str(case), "--rpc-tracker", "farm"])
    assert code == ExitCode.USAGE_ERROR and "not HOST:PORT: 'farm'" in err
    code, _, err = run_cli(["run", str(case), "--rpc-key", "a b"])
    assert code == ExitCode.USAGE_ERROR and "not KEY or TARGET=KEY" in err


def test_require_device_for_a_board_without_a_tracker(project):
    case = _case(project, tiny_case(targets=("llvm", "arm64")))
    code, out, err = run_cli(["run", str(case), "--require-device", "--no-isolation"])
    assert code == ExitCode.USAGE_ERROR and out == ""
    assert err.startswith("cl-validate: error: --require-device: no arm64 device (llvm, "
                          "aarch64-linux-gnu) on this machine and no RPC tracker")
    assert err.count("\n") == 1 and "TVM_TRACKER_HOST" in err


# --------------------------------------------------------------------------------------------
# Real TVM compiles for the targets this machine can compile
# --------------------------------------------------------------------------------------------
@pytest.mark.compile
def test_an_aarch64_case_compiles_here_and_reports_its_kernel_list(project):
    case = _case(project, tiny_case(targets=("llvm", "arm64"), kernels=4))
    junit = project / "r.xml"
    code, out = run_cli(["run", str(case), "--no-isolation", "--junit", str(junit)]).both()
    assert code == ExitCode.OK, out
    assert "case [arm64] kernel list (4 kernels, >> = layout transform):" in out
    assert "fused_conv2d_add_relu" in out.split("[arm64] kernel list")[1]
    checks = by_case(JUnitXml.fromfile(str(junit)))["case"]
    arm = {tc.name: tc for s in JUnitXml.fromfile(str(junit)) for tc in s
           if tc.name.endswith("[arm64]")}
    assert set(arm) == {f"{c}[arm64]" for c in checks}  # every check, named by its target
    for name in ("compile", "layout", "layout_transforms", "kernels"):
        assert not arm[f"{name}[arm64]"].result, name  # passed
    (skip,) = arm["numerics[arm64]"].result
    assert isinstance(skip, Skipped) and skip.message.startswith("no arm64 device (llvm, "
                                                                 "aarch64-linux-gnu)")
    suites = [s.name for s in JUnitXml.fromfile(str(junit))]
    assert suites == ["cl_validate.llvm", "cl_validate.arm64"]


@pytest.mark.compile
def test_gpu_kinds_compile_here_as_far_as_this_tvm_can(project):
    """opencl builds (source codegen); vulkan (no SPIR-V codegen in this TVM) and rocm (no
    ROCm install here) get their static checks from the IR, and say why nothing was built."""
    text = tiny_case(targets=None).replace("[[inputs]]", textwrap.dedent('''\
        [targets.mali]
        target = { kind = "opencl" }
        host = { kind = "llvm", mtriple = "aarch64-linux-gnu" }

        [targets.vk]
        target = { kind = "vulkan" }

        [targets.amd]
        target = { kind = "rocm", mcpu = "gfx90a" }

        [[inputs]]'''))
    case = _case(project, text)
    junit = project / "r.xml"
    code, out = run_cli(["run", str(case), "--no-isolation", "--junit", str(junit)]).both()
    assert code == ExitCode.OK, out
    skips = {tc.name: tc.result[0].message for s in JUnitXml.fromfile(str(junit)) for tc in s
             if tc.name.startswith("numerics[")}
    for name, tc in ((tc.name, tc) for s in JUnitXml.fromfile(str(junit)) for tc in s):
        if name.split("[")[0] in ("compile", "layout", "layout_transforms"):
            assert not tc.result, name  # the static checks ran and passed on every kind
    assert skips["numerics[mali]"] == ("no mali device (opencl, aarch64-linux-gnu) on this "
                                       "machine and no RPC tracker (--rpc-tracker HOST:PORT "
                                       "--rpc-key KEY): static checks only")
    if tvm.get_global_func("target.build.vulkan", allow_missing=True) is None:
        assert "not built here: this TVM has no vulkan code generator" in skips["numerics[vk]"]
    try:
        find_rocm_path()
    except RuntimeError:
        assert "not built here: no ROCm installation" in skips["numerics[amd]"]


@pytest.mark.compile
def test_a_target_tvm_refuses_is_that_targets_error_at_its_line(project):
    text = tiny_case(targets=None).replace("[[inputs]]", textwrap.dedent('''\
        [targets.llvm]

        [targets.neon]
        target = { kind = "llvm", mtriple = "aarch64-linux-gnu", mattr = "+neon" }

        [[inputs]]'''))
    case = _case(project, text)
    junit = project / "r.xml"
    code, out = run_cli(["run", str(case), "--no-isolation", "--junit", str(junit)]).both()
    assert code == ExitCode.CHECK_FAILED, out
    by_name = {tc.name: tc for s in JUnitXml.fromfile(str(junit)) for tc in s}
    (error,) = by_name["compile[neon]"].result
    assert isinstance(error, Error) and error.type == "CaseFileError"
    assert error.message.startswith("case.toml:6: TVM refuses target 'neon': Option 'mattr': "
                                    "expected type 'Array<str>'")
    assert by_name["compile[neon]"]._elem.get("line") == "6"
    assert "Traceback" not in out and not by_name["numerics[llvm]"].result  # llvm unharmed


@pytest.mark.compile
def test_a_misspelled_tvm_attribute_gets_a_did_you_mean(project):
    (project / "pyproject.toml").write_text(ARM64.replace("mtriple", "mtripel"))
    case = _case(project, tiny_case(targets=("arm64",)))
    code, out = run_cli(["run", str(case), "--no-isolation"]).both()
    assert code == ExitCode.USAGE_ERROR, out  # the case's only target is unusable
    assert ("cl-validate: error: pyproject.toml:2: TVM refuses target 'arm64': unknown "
            "attribute 'mtripel' for kind 'llvm' (hint: did you mean 'mtriple'?)") in out


@pytest.mark.compile
def test_an_aarch64_module_is_cross_linked_for_upload(project, tmp_path):
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.case_session import CaseSession
    from cl_validate.session.inputs import make_inputs, torch_inputs
    from cl_validate.session.remote import RpcError, export
    from cl_validate.spec.options import RunOptions

    case = load_case(_case(project, tiny_case(targets=("arm64",))))
    model = CaseSession(case, RunOptions()).model
    front = export_and_import(model, case, torch_inputs(case, make_inputs(case)))
    compiled = compile_case(front, case, "arm64")
    arm = case.target_def("arm64")
    missing = TargetDef("arm64", arm.config, cc="no-such-gcc", file="p", line=1)
    with pytest.raises(RpcError) as info:
        export(compiled.executable, missing, tmp_path / "x.so")
    assert info.value.kind == "ExportError" and str(info.value) == (
        "cannot link the module for arm64: no compiler 'no-such-gcc' on this machine "
        "(install it, or set cc in [targets.arm64])")
    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("no aarch64-linux-gnu-gcc on this machine (bash tools/setup-cross.sh "
                    "installs Debian's gcc-aarch64-linux-gnu)")
    lib = export(compiled.executable, arm, tmp_path / "arm64.so")  # default: <mtriple>-gcc
    head = lib.read_bytes()[:20]
    assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == 0xB7  # AArch64


def test_the_docs_target_examples_are_valid(project):
    """What a user copies from the docs' "Targets beyond llvm and cuda" must load."""
    page = (Path(__file__).parents[1] / "docs" / "how-to" / "boards.md").read_text(
        encoding="utf-8")
    section = page.split("## Targets beyond llvm and cuda")[1].split("\n## ")[0]
    blocks = section.split("```toml\n")[1:]
    pyproject = next(b.split("```")[0] for b in blocks if b.startswith("# pyproject.toml"))
    case_part = next(b.split("```")[0] for b in blocks if b.startswith("# a case file"))
    (project / "pyproject.toml").write_text(pyproject)
    targets = load_config().targets
    assert targets["arm64"].triple == "aarch64-linux-gnu" and targets["arm64"].rpc_key is None
    assert targets["mali"].kind == "opencl" and targets["mali"].foreign("x86_64")
    model, rest = tiny_case(targets=None).split("\n", 1)
    case = load_case(_case(project, f"{model}\n{case_part}{rest}"))
    assert case.targets == ("llvm", "arm64", "sve")
    assert case.target_def("sve").config["mattr"] == ["+sve"]
    assert case.tolerance_for("sve")[0].rtol == 1e-4


def test_a_cuda_target_carries_the_gpus_limits(caplog):
    """dlight schedules by the target's limits; a target built from ``kind`` and ``arch``
    alone has none, and TVM warns and guesses for every kernel. Without a GPU here the
    limits come from TVM's tag of the architecture; a declared limit wins."""
    import logging

    import tvm

    from cl_validate.compile.devices import DeviceFacts
    from cl_validate.compile.tvm_targets import cuda_limits, make_target

    cuda = make_target(BUILTIN["cuda"])
    assert str(cuda.attrs["arch"]) == "sm_90"
    h100 = tvm.target.Target("nvidia/nvidia-h100")  # TVM's own figures for that architecture
    for key in ("max_shared_memory_per_block", "max_threads_per_block", "thread_warp_size",
                "max_num_threads", "registers_per_block"):
        assert int(cuda.attrs[key]) == int(h100.attrs[key]), key
    assert "l2_cache_size_bytes" not in cuda.attrs  # a chip's, not an architecture's
    own = TargetDef("cuda", {"kind": "cuda", "arch": "sm_80", "max_shared_memory_per_block": 1024})
    assert int(make_target(own).attrs["max_shared_memory_per_block"]) == 1024
    # a GPU at hand of the target's architecture gives its own figures, L2 included
    probed = {"arch": "sm_90a", "max_shared_memory_per_block": 49152,
              "max_threads_per_block": 1024, "l2_cache_size_bytes": 62914560}
    assert cuda_limits("sm_90", probed)["l2_cache_size_bytes"] == 62914560
    assert "l2_cache_size_bytes" not in cuda_limits("sm_80", probed)  # another architecture
    assert DeviceFacts(False).attrs == {}
    # and dlight no longer guesses
    from tvm.s_tir.dlight.analysis.common_analysis import get_max_shared_memory_per_block

    with caplog.at_level(logging.WARNING):
        assert get_max_shared_memory_per_block(cuda) == 49152
    assert "missing 'max_shared_memory_per_block'" not in caplog.text
