"""Quantized networks as PT2E makes them: modules torch.export made are taken as they are (they
refuse ``eval()``), the layout is carried through QDQ chains to the floor, and a model's own
exception is the model's error, not the tool's."""

from __future__ import annotations

import pytest

from cl_validate.checks.compiled import CaseKind
from cl_validate.checks.verdict import Status
from cl_validate.compile.factory import build_model
from cl_validate.measurements.measurement import Measurement
from cl_validate.session.case_session import CaseSession
from cl_validate.session.in_process import judge_in_process
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions

CASE = """
model = "quant_models:{model}"
targets = ["llvm"]
[[inputs]]
name = "x"
shape = [1, 3, 16, 16]
layout = "{layout}"
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
[budget]
layout_transforms = {budget}
[tolerance]
rtol = 0.0
atol = 1e-4
"""


def _case(write_case, model: str, layout: str = "NCHW", budget: int = 1):
    return load_case(write_case(CASE.format(model=model, layout=layout, budget=budget)))


@pytest.mark.parametrize("model", ["exported_module", "exported_program"])
def test_a_module_torch_export_made_is_taken_as_it_is(write_case, model):
    import torch

    with pytest.raises(NotImplementedError):  # what the tool must not call
        torch.export.export(torch.nn.ReLU(), (torch.ones(1),)).module().eval()
    built = build_model(_case(write_case, model))
    assert isinstance(built, torch.fx.GraphModule)


def test_a_broken_eval_is_the_models_error_with_its_first_line(write_case):
    case = _case(write_case, "broken_eval")
    got: list[Measurement] = []
    CaseSession(case, RunOptions(isolate=False)).start(lambda m, k, c: got.append(m))
    (m,) = got
    assert m.error is not None and m.error.kind == CaseKind.MODEL_ERROR
    msg = m.error.message
    assert msg.startswith(f"{case.path.name}:1: ") or f"{case.path.name}:1: " in msg
    assert "RuntimeError: this model cannot leave training mode" in msg
    assert "quant_models.py:" in msg and "(hint:" in msg and "second line" not in msg
    assert "Traceback" in m.error.detail


@pytest.mark.compile
@pytest.mark.parametrize(("layout", "floor"), [("NCHW", 1), ("NHWC", 0)])
def test_pt2e_network_reaches_the_layout_floor(write_case, layout, floor):
    """convert_pt2e's model as it is: QDQ around every conv, the residual add, the concat and
    the pools, per-channel int8 weights; NHWC is carried through every QDQ chain and the
    int8 weights' layout change folds."""
    pytest.importorskip("torchao")
    case = _case(write_case, "pt2e_block", layout, floor)
    (result,) = judge_in_process([case], RunOptions(isolate=False))
    for check in ("compile", "layout", "layout_transforms", "numerics"):
        assert result.check(check).status is Status.PASSED, result.check(check).message
    assert result.kernels is not None
    assert not result.kernels.weight_transforms
    names = " ".join(k.name for k in result.kernels)
    assert "quantize" in names and "conv2d" in names


def test_the_float64_reference_runs_the_same_qdq_graph_in_float64(write_case):
    """quantized_decomposed refuses float64 input; the reference computes the codes from the
    float64 values instead, and lands on eager float32's grid (the same graph)."""
    pytest.importorskip("torchao")
    import numpy as np
    import quant_models
    import torch

    from cl_validate.session.execute import float64_model, run_torch, run_torch64

    torch.manual_seed(0)
    model, x = quant_models.pt2e_block(), torch.randn(quant_models.SHAPE)
    model64 = float64_model(model)
    with pytest.raises(Exception, match="float32"):
        model64(x.double())
    (out64,) = run_torch64(model64, [x])
    (out32,) = run_torch(model, [x])
    assert out64.dtype == np.float64
    np.testing.assert_allclose(out64, out32, rtol=0, atol=1e-6)
