"""A convolution kernel computed at run time from a constant bank (CondConv): in NHWC its
OIHW → OHWI transpose moves into the bank's columns, once, instead of running every call."""

from __future__ import annotations

import pytest

from cl_validate.checks.verdict import Status
from cl_validate.session.in_process import judge_in_process
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions

pytestmark = pytest.mark.compile

CASE = """
model = "dynamic_conv:cond_conv"
targets = ["llvm"]
[[inputs]]
name = "x"
shape = [{batch}, 3, 8, 8]
layout = "NHWC"
[[outputs]]
layout = "NHWC"
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
[budget]
layout_transforms = {budget}
[tolerance]
rtol = 1e-5
atol = 1e-5
"""


@pytest.mark.parametrize(("batch", "budget"), [(1, 0), (2, 2)])
def test_a_computed_kernel_is_read_in_the_conv_layout_without_a_transform(write_case, batch,
                                                                          budget):
    """Before: ``permute_dims(w, [0, 2, 3, 1])`` of the mixed kernel at run time, one more
    transform. At batch 2 the model folds the batch into the channels (``x.reshape(1, B·C,
    H, W)``, groups = B) and back, which channels-last data cannot view: those two stay."""
    case = load_case(write_case(CASE.format(batch=batch, budget=budget)))
    (result,) = judge_in_process([case], RunOptions(isolate=False))
    for check in ("compile", "numerics", "layout", "layout_transforms"):
        assert result.check(check).status is Status.PASSED, result.check(check).message
    assert len(result.kernels.runtime_transforms) == budget
