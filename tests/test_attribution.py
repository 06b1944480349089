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


def test_an_op_the_cleanup_carries_a_layout_through_is_not_blamed(write_case):
    """The transform between a pad and the op it follows is the op's: the pad has a
    layout under the cleanup (it was named, "give relax.nn.pad a layout rule", as if adding
    one would help)."""
    ts = _transforms(write_case, "topk_then_pad", pipeline="nhwc")
    middle = [t.attribution for t in ts if t.attribution.reason == Reason.NO_LAYOUT_RULE]
    # the views around the running sum over C·H·W, which needs that order
    assert [a.relax_op for a in middle] == ["relax.reshape", "relax.reshape"], [
        t.attribution.describe() for t in ts]
    assert all("view" in (a.source or "") for a in middle)


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


def test_a_permute_sunk_into_a_view_chain_stays_the_models_own(write_case):
    """The model's transpose, sunk past the softmax and folded with the views after it, is
    still the model's (it was "relax.reshape has no layout rule": the fold dropped its mark)."""
    ts = _transforms(write_case, "radix_softmax", pipeline="nhwc")
    middle = [t.attribution for t in ts if t.attribution.reason not in (
        Reason.INPUT_BOUNDARY, Reason.OUTPUT_BOUNDARY)]
    assert [a.reason for a in middle] == [Reason.OWN_PERMUTE], [a.describe() for a in middle]
    assert "permute" in (middle[0].source or "")


def test_transforms_around_a_converted_conv1d_are_traced_to_what_made_its_input(write_case):
    """A Conv1d the case's conv2d layout converts to NWC, its input and the gate it is
    multiplied with made channels-first by the model (``W @ x.t()``, viewed, chunked): both
    transforms are traced up their input (through the split) to that, not "cause not
    traced" from the conv's side where nothing decided, and never "op without a layout
    rule" for the chunk's getitem, which is no op at all. (Since a ``relax.split``'s parts
    share one transpose before it, the two are one, traced as theirs were: not named after
    the pass that moved it.)"""
    ts = _transforms(write_case, "channels_first_conv1d", pipeline="nhwc")
    middle = [t.attribution for t in ts if t.attribution.reason not in (
        Reason.INPUT_BOUNDARY, Reason.OUTPUT_BOUNDARY)]
    said = [a.describe() for a in middle]
    assert len(middle) == 1, said
    assert not any("shared by the parts" in line for line in said), said
    assert all(a.reason is not Reason.UNTRACED for a in middle), said
    assert all(a.relax_op for a in middle if a.reason is Reason.NO_LAYOUT_RULE), said
    assert all("conv1d" not in (a.source or "") + (a.relax_op or "") for a in middle), said


def test_an_op_the_cleanup_carries_a_layout_through_is_not_named_for_its_reader(write_case):
    """An unfold's pad runs in NCHW because the unfold's view after it has no layout rule:
    the transform into the pad names that view, not "relax.nn.pad has no layout rule" (the
    cleanup carries a layout through a pad; the advice to give it one was wrong)."""
    ts = _transforms(write_case, "involution_block", pipeline="nhwc")
    named = [t.attribution for t in ts if t.attribution.reason is Reason.NO_LAYOUT_RULE]
    assert named and all(a.relax_op == "relax.reshape" for a in named), [
        a.describe() for a in named]


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


@pytest.mark.parametrize("model,pipeline", [
    ("dfl_head", "nhwc-plain"), ("dfl_head", "nhwc"),
    ("attention_norm", "nhwc-plain"), ("attention_norm", "nhwc"),
    ("relu6_net", "nhwc-plain"), ("own_permute", "nhwc"),
])
def test_no_layout_rule_is_said_only_of_ops_without_one(write_case, model, pipeline):
    """"has no layout rule" is checked against TVM's op registry: group_norm, conv2d, add,
    softmax, concat all have one; an op that has one is blamed only for following an input,
    and the walk names what decided instead."""
    import tvm

    shape = "[1, 16, 16, 8]" if model == "own_permute" else "[1, 3, 16, 16]"
    for t in _transforms(write_case, model, pipeline=pipeline, shape=shape):
        att = t.attribution
        if att.reason is Reason.NO_LAYOUT_RULE:
            assert att.relax_op is not None, att
            assert tvm.ir.Op.get(att.relax_op).get_attr("FRelaxInferLayout") is None, att


def test_attention_view_is_named_not_the_group_norm_after_it(write_case):
    ts = _transforms(write_case, "attention_norm")
    blamed = {t.attribution.relax_op for t in ts if t.attribution.reason is Reason.NO_LAYOUT_RULE}
    assert "relax.nn.group_norm" not in blamed and "relax.add" not in blamed
    assert blamed, [t.attribution for t in ts]


def test_dfl_decode_is_at_the_floor_and_no_op_with_a_rule_is_blamed(write_case):
    """The detector's ``view → transpose(2, 1) → softmax → 1x1 conv`` decode: under TVM's
    ConvertLayout its transforms are the model's own permute (never "softmax has no layout
    rule"); under the nhwc pipeline only the graph's boundaries remain."""
    plain = _transforms(write_case, "dfl_head", pipeline="nhwc-plain")
    assert any(t.attribution.reason is Reason.OWN_PERMUTE for t in plain)
    assert not any(t.attribution.relax_op == "relax.nn.softmax" for t in plain), plain
    ours = [t.attribution.reason for t in _transforms(write_case, "dfl_head", pipeline="nhwc")]
    assert ours == [Reason.INPUT_BOUNDARY, Reason.OUTPUT_BOUNDARY], ours


def test_every_transform_in_a_fused_kernel_gets_its_own_mark():
    from cl_validate.measurements.attribution import Attribution
    from cl_validate.measurements.kernel_list import Kernel, KernelList, Transform

    ts = tuple(Transform("permute_dims", 0, f"transpose{i}", False, (1, 8, 8, 4), (0, 2, 3, 1),
                         Attribution(Reason.OWN_PERMUTE, "relax.permute_dims", f"m{i} (permute)"))
               for i in range(3))
    text = KernelList([Kernel(0, "fused_transpose0_transpose1_transpose2_add", ("a",), ts),
                       Kernel(1, "conv2d", ("conv2d",))]).render()
    marked = [ln for ln in text.splitlines() if ln.startswith(">>")]
    assert len(marked) == 3, text
    assert all(f"m{i} (permute)" in marked[i] for i in range(3)), text


@pytest.mark.parametrize("model", ["masked_output", "rescaled_output"])
def test_a_transform_read_only_on_the_way_to_the_output_is_the_outputs(write_case, model):
    """The pipeline moved the NCHW output's transform up to the convolution: every op after
    it is elementwise (masks, ``where``, a reduction keeping its axes) or keeps every axis in
    place (a resize's gather, a softmax, a crop), so it is the graph output boundary, not a
    conversion whose cause was not traced nor an op that lacks a layout rule."""
    transforms = _transforms(write_case, model, pipeline="nhwc")
    reasons = [t.attribution.reason for t in transforms]
    assert reasons.count(Reason.OUTPUT_BOUNDARY) == 1, reasons
    assert set(reasons) <= {Reason.OUTPUT_BOUNDARY, Reason.INPUT_BOUNDARY}, reasons
