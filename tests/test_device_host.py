"""A device host (`cl_validate.session.device_host`) runs a compiled program in a fresh
process and answers as the program run in this process would; what goes wrong there is named
for the target's verdict, and the host serves on or says how it died.

No GPU is needed to test the way there and back: a host runs the CPU's programs the same way
(``device_host.DeviceHost("cpu")``, or ``CL_VALIDATE_HOST_CPU=1`` for a whole run)."""

from __future__ import annotations

import os
import shutil
import signal

import numpy as np
import pytest
from junitparser import JUnitXml

from cl_validate.compile.tvm_targets import device_for
from cl_validate.errors import ExitCode
from cl_validate.session import device_host, sandbox
from cl_validate.session.case_session import CaseSession
from cl_validate.session.device_host import DeviceHost, DeviceHostError
from cl_validate.session.execute import run_tvm
from cl_validate.session.inputs import program_arrays
from cl_validate.session.kernel_check import wrong_kernels
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions
from tests.conftest import DATA, by_case, case_error, passed, run_parent, tiny_case
from tests.test_kernel_check import _compiled

pytestmark = pytest.mark.compile


@pytest.fixture
def prepared(write_case):
    session = CaseSession(load_case(write_case(tiny_case())), RunOptions(isolate=False))
    assert session.prepare() is None
    return session


def test_a_program_runs_in_a_host_as_in_this_process(prepared):
    compiled = prepared.compiled("llvm")
    arrays = prepared.samples[0][1]
    here = run_tvm(compiled.executable, prepared.case, arrays, device_for("cpu"))
    host = DeviceHost("cpu")
    try:
        there = host.run_main(compiled.executable, program_arrays(prepared.case, arrays))
        again = host.run_main(compiled.executable, program_arrays(prepared.case, arrays))
        assert len(host._libs) == 1  # exported once, run twice
    finally:
        host.close()
    assert [t.shape for t in there] == [h.shape for h in here]  # NCHW out: as it is
    for h, t, a in zip(here, there, again, strict=True):
        np.testing.assert_array_equal(h, t)  # the same program on the same CPU: bit for bit
        np.testing.assert_array_equal(t, a)


def test_a_failing_request_is_named_and_the_host_serves_on(prepared):
    compiled = prepared.compiled("llvm")
    arrays = program_arrays(prepared.case, prepared.samples[0][1])
    host = DeviceHost("cpu")
    try:
        with pytest.raises(DeviceHostError) as err:
            host.run_main(compiled.executable, [])  # main takes one input
        assert str(err.value).split(":")[0].endswith("Error")  # the host's exception, named
        assert "Traceback" in err.value.detail
        assert len(host.run_main(compiled.executable, arrays)) == 1
    finally:
        host.close()


def test_a_host_that_dies_is_named(prepared):
    compiled = prepared.compiled("llvm")
    arrays = program_arrays(prepared.case, prepared.samples[0][1])
    host = DeviceHost("cpu")
    try:
        host.run_main(compiled.executable, arrays)
        os.kill(host._proc.pid, signal.SIGKILL)
        with pytest.raises(DeviceHostError, match=r"host died \(killed by SIGKILL\)"):
            host.run_main(compiled.executable, arrays)
    finally:
        host.close()


def test_a_host_started_by_the_case_process_serves_its_target_process(prepared):
    """In an isolated run the case process starts a target's host and the target process
    (a fork) adopts it: the programs run there, in a library folder of the target's own;
    a host that dies is named by its pid (its exit is its parent's to read)."""
    compiled = prepared.compiled("llvm")
    arrays = program_arrays(prepared.case, prepared.samples[0][1])
    want = run_tvm(compiled.executable, prepared.case, prepared.samples[0][1],
                   device_for("cpu"))
    host = DeviceHost("cpu")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the target process reports through the pipe
        code = 1
        try:
            os.close(r)
            device_host.adopt(host)
            got = device_host.host_for("cpu").run_main(compiled.executable, arrays)
            ok = all(np.array_equal(g, x) for g, x in zip(got, want, strict=True))
            folder = os.path.dirname(host.library(compiled.executable))
            os.kill(host.pid, signal.SIGKILL)
            try:
                host.run_main(compiled.executable, arrays)
                died = "served"
            except DeviceHostError as exc:
                died = str(exc)
            device_host.close_hosts()
            os.write(w, f"{ok}|{folder.endswith(str(os.getpid()))}|{died}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(r) as f:
        ok, own_folder, died = f.read().split("|")
    host.close()
    assert status == 0 and ok == "True" and own_folder == "True", (status, ok, own_folder)
    assert died == f"the cpu device host died (pid {host.pid})", died


def test_the_kernel_check_runs_the_targets_kernels_in_a_host(monkeypatch):
    monkeypatch.setenv(device_host.HOST_CPU_ENV, "1")
    started = []
    real = DeviceHost.__init__

    def spy(self, device):  # type: ignore[no-untyped-def]
        started.append(device)
        real(self, device)

    monkeypatch.setattr(DeviceHost, "__init__", spy)
    try:
        (wrong,) = wrong_kernels(_compiled(3.0), "cpu")
        assert "multiply" in wrong.name and wrong.error > 0.1
    finally:
        device_host.close_hosts()
    assert started == ["cpu"]  # one host for every kernel of the target's device


def test_a_program_that_cannot_be_linked_is_named(prepared, monkeypatch):
    """The host loads the program as a shared library: without a compiler to link it, the
    target's verdict says so and how to get one, not a traceback."""
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    host = DeviceHost("cpu")
    try:
        with pytest.raises(DeviceHostError, match=r"cannot link the program .* install g\+\+"):
            host.run_main(prepared.compiled("llvm").executable, [])
    finally:
        host.close()


def test_a_cuda_build_without_nvrtcs_binding_says_what_to_install(prepared, monkeypatch):
    """TVM compiles CUDA with NVRTC through the cuda-bindings package: a GPU machine without
    it gets the two ways out in the verdict, not only TVM's message."""
    from cl_validate.compile import program
    from cl_validate.errors import CompileStageError

    real = program.tvm.compile

    def no_binding(mod, target=None, **kwargs):  # type: ignore[no-untyped-def]
        if target is None or str(target.kind.name) != "cuda":
            return real(mod, target=target, **kwargs)  # the weights' folding, on llvm
        raise RuntimeError("Failed to compile CUDA with NVRTC because the `cuda-bindings` "
                           "package is not available.")

    monkeypatch.setattr(program.tvm, "compile", no_binding)
    monkeypatch.setattr(program, "build_unavailable", lambda target: None)
    with pytest.raises(CompileStageError) as err:
        prepared.compiled("cuda")
    assert str(err.value).startswith("build failed: RuntimeError: Failed to compile CUDA")
    assert "hint: pip install cuda-bindings" in str(err.value)
    assert "TVM_CUDA_COMPILE_MODE=nvcc" in str(err.value)


@pytest.mark.skipif(not sandbox.available(), reason="cases are not confined here (Landlock "
                    "ABI < 6, or CL_VALIDATE_UNCONFINED set)")
def test_a_hosted_case_writes_no_other_process_s_proc_file(tmp_path):
    """A case whose programs run in device hosts (a GPU's; here the CPU's, as a GPU's are)
    was left with /proc writable for the CUDA driver, which names its threads there: its
    model could make the run's parent the first the OOM killer takes. Its hosts are started
    before the model's code and wall /proc but their own folder; the case walls it all.
    The write is refused and named; the programs run in the hosts and pass."""
    folder = tmp_path / "cases"
    folder.mkdir()
    for f in ("tiny_models.py", "hostile_state.py"):
        shutil.copy(DATA / f, folder / f)
    (folder / "a_oom.toml").write_text(
        tiny_case(model="hostile_state:writes_the_parents_oom_score"))
    (folder / "b_innocent.toml").write_text(tiny_case())
    junit = tmp_path / "r.xml"
    proc = run_parent(["run", str(folder), "-j", "2", "--junit", str(junit), "--no-cache"],
                      {device_host.HOST_CPU_ENV: "1"})
    assert proc.returncode == ExitCode.CHECK_FAILED, proc.stdout[-3000:] + proc.stderr
    cases = by_case(JUnitXml.fromfile(str(junit)))
    error = case_error(cases["a_oom"])
    assert error.type == "ReachedOut" and "oom_score_adj" in error.message, error.message
    assert passed(cases["b_innocent"]), proc.stdout[-3000:]
