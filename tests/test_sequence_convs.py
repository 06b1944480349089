"""1-D convolutions on tokens in a channels-last case, and a Linear on tokens flattened from
a feature map: both take the model's own transposes away (a Conformer's conv module; its
conv subsampling into ``(B, T, C·F)``)."""

from __future__ import annotations

import pytest

from cl_validate.checks.verdict import Status
from cl_validate.session.in_process import judge_in_process
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions

pytestmark = pytest.mark.compile

CASE = """
model = "sequence_models:conv_module_tokens"
targets = ["llvm"]
[[inputs]]
name = "x"
shape = [1, 3, 16, 16]
layout = "NHWC"
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
{extra}
[budget]
layout_transforms = {budget}
[tolerance]
rtol = 1e-4
atol = 1e-4
"""


def _checked(result) -> int:
    """The layout-sensitive ops the ``layout`` check compared with the case (conv1d's
    expected layout: the one the case names, else the one conv2d's implies)."""
    return result.check("layout").figures.layout_sensitive_ops


def test_conv1d_follows_the_declared_channels_last_and_the_token_transposes_cancel(write_case):
    """Before: the conv module's Conv1d ran NCW between the model's two transposes, and the
    subsampled map was transposed before its flatten into the Linear (3 transforms)."""
    case = load_case(write_case(CASE.format(extra="", budget=0)))
    (result,) = judge_in_process([case], RunOptions(isolate=False))
    for check in ("compile", "numerics", "layout", "layout_transforms"):
        assert result.check(check).status is Status.PASSED, result.check(check).message
    assert _checked(result) == 4  # the conv2d and three conv1d, each NWC
    assert not result.kernels.runtime_transforms


def test_a_conv1d_layout_the_case_names_is_kept(write_case):
    extra = '"relax.nn.conv1d" = ["NCW", "OIW"]'
    case = load_case(write_case(CASE.format(extra=extra, budget=2)))
    (result,) = judge_in_process([case], RunOptions(isolate=False))
    for check in ("compile", "numerics", "layout"):
        assert result.check(check).status is Status.PASSED, result.check(check).message
    assert _checked(result) == 4  # the three conv1d NCW, as named
    assert result.kernels.runtime_transforms  # the model's transposes stay around them
