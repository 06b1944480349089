"""A device host (`cl_validate.session.device_host`) runs a compiled program in a fresh
process and answers as the program run in this process would; what goes wrong there is named
for the target's verdict, and the host serves on or says how it died.

No GPU is needed to test the way there and back: a host runs the CPU's programs the same way
(``device_host.DeviceHost("cpu")``, or ``CL_VALIDATE_HOST_CPU=1`` for a whole run)."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from cl_validate.compile.tvm_targets import device_for
from cl_validate.session import device_host
from cl_validate.session.case_session import CaseSession
from cl_validate.session.device_host import DeviceHost, DeviceHostError
from cl_validate.session.execute import run_tvm
from cl_validate.session.inputs import program_arrays
from cl_validate.session.kernel_check import wrong_kernels
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions
from tests.conftest import tiny_case
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
