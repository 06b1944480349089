"""Every runtime transform names its PyTorch source and the reason it is there."""

from __future__ import annotations

import pytest

from cl_validate.analysis.fused_kernels import read_kernel_list
from cl_validate.compile.factory import build_model
from cl_validate.compile.frontend import export_and_import
from cl_validate.compile.program import compile_case
from cl_validate.measurements.attribution import Reason
from cl_validate.session.inputs import make_inputs, torch_inputs
from cl_validate.spec import load_case

pytestmark = pytest.mark.compile

CASE = """
model = "tiny_models:{model}"
pipeline = "{pipeline}"
[[inputs]]
name = "x"
shape = {shape}
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
"""


def _transforms(write_case, model, pipeline="nhwc-plain", shape="[1, 3, 16, 16]"):
    case = load_case(write_case(CASE.format(model=model, pipeline=pipeline, shape=shape)))
    tensors = torch_inputs(case, make_inputs(case))
    front = export_and_import(build_model(case), case, tensors)
    kernels = read_kernel_list(compile_case(front, case, "llvm", build=False))
    return kernels.transforms


def test_op_without_layout_rule_names_the_op_and_the_module(write_case):
    ts = _transforms(write_case, "relu6_net")
    reasons = [t.attribution.reason for t in ts]
    assert reasons[0] == Reason.INPUT_BOUNDARY and reasons[-1] == Reason.OUTPUT_BOUNDARY
    middle = [t.attribution for t in ts if t.attribution.reason == Reason.NO_LAYOUT_RULE]
    assert len(middle) == 2  # to NCHW before the clip, back to NHWC after it
    for att in middle:
        assert att.relax_op == "relax.clip"
        assert att.source is not None and att.source.startswith("features.1 (")
        assert "relax.clip has no layout rule" in att.describe()
        assert "give relax.clip a layout rule" in att.next_step()


def test_model_own_permute(write_case):
    ts = _transforms(write_case, "own_permute", shape="[1, 16, 16, 8]")
    own = [t for t in ts if t.attribution.reason == Reason.OWN_PERMUTE]
    assert own and own[0].attribution.source is not None
    assert "permute" in own[0].attribution.source


def test_unfolded_weight(write_case):
    ts = _transforms(write_case, "conv_relu", pipeline="unbound_pipeline:nhwc_unbound")
    weights = [t for t in ts if t.weight]
    assert weights and all(t.attribution.reason == Reason.WEIGHT for t in weights)
    assert any("conv1" in (t.attribution.source or "") for t in weights)


def test_a_folded_shuffle_stays_the_models_own(write_case):
    """reshape → transpose → reshape plus ConvertLayout's transposes fold to one transpose:
    it is there because the model's code permutes, and says so."""
    ts = _transforms(write_case, "channel_shuffle", pipeline="nhwc")
    middle = [t for t in ts if t.attribution.reason not in (Reason.INPUT_BOUNDARY,
                                                             Reason.OUTPUT_BOUNDARY)]
    assert [t.attribution.reason for t in middle] == [Reason.OWN_PERMUTE]


def test_each_own_permute_names_the_module_whose_code_wrote_it(write_case):
    """Our passes rebuild a model's permutes (new binding names), so the source travels in
    the permute's own mark: each shuffle is named by its own block, in order."""
    ts = _transforms(write_case, "shufflenetlet", pipeline="nhwc")
    own = [t.attribution.source for t in ts if t.attribution.reason == Reason.OWN_PERMUTE]
    assert [s.split(" (")[0] if s else s for s in own] == ["blocks.0", "blocks.1", "blocks.2"]


def test_a_transform_the_model_did_not_write_is_not_its_own(write_case):
    """A flatten the model feeds into a run-time matmul needs NCHW order; the model permutes
    nothing, so the transform is not the model's own."""
    ts = _transforms(write_case, "flatten_matmul", pipeline="nhwc")
    reasons = [t.attribution.reason for t in ts]
    assert Reason.OWN_PERMUTE not in reasons and Reason.NO_LAYOUT_RULE in reasons
