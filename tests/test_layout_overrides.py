"""[layout_overrides]: a module kept in another layout on purpose, checked and attributed."""

from __future__ import annotations

import pytest

from cl_validate.analysis.fused_kernels import read_kernel_list
from cl_validate.analysis.op_layouts import op_layouts
from cl_validate.checks.layout import check_layout
from cl_validate.checks.verdict import Status
from cl_validate.compile.factory import build_model
from cl_validate.compile.frontend import export_and_import
from cl_validate.compile.program import compile_case, op_level_stage
from cl_validate.errors import CaseFileError
from cl_validate.measurements.attribution import Reason
from cl_validate.session.case_session import CaseSession
from cl_validate.session.inputs import make_inputs, torch_inputs
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions

CASE = """
model = "tiny_models:conv_relu"
[[inputs]]
name = "x"
shape = [1, 3, 16, 16]
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
[layout_overrides]
{override}
"""


def test_unknown_module_is_a_case_file_error_before_compiling(write_case):
    case = load_case(write_case(CASE.format(override='"conv9" = ["NCHW", "OIHW"]')))
    with pytest.raises(CaseFileError) as info:
        CaseSession(case, RunOptions()).model  # noqa: B018
    assert info.value.line == 8 and "did you mean 'conv" in str(info.value)


def test_bad_module_path_is_rejected_by_the_loader(write_case):
    with pytest.raises(CaseFileError, match=r"not an nn\.Module path"):
        load_case(write_case(CASE.format(override='"conv 1" = ["NCHW"]')))


@pytest.mark.compile
def test_pinned_module_stays_nchw_and_its_border_transforms_are_attributed(write_case):
    case = load_case(write_case(CASE.format(override='"conv2" = ["NCHW", "OIHW"]')))
    tensors = torch_inputs(case, make_inputs(case))
    front = export_and_import(build_model(case), case, tensors)
    compiled = compile_case(front, case, "llvm", build=False)
    ops = op_layouts(compiled.stage(op_level_stage(compiled)).mod,
                              front.sources)
    convs = {op.module: op.layouts["data_layout"] for op in ops if op.op == "relax.nn.conv2d"}
    assert convs == {"conv1": "NHWC", "conv2": "NCHW"}
    assert check_layout(case, "llvm", ops).status is Status.PASSED
    pinned = [t for t in read_kernel_list(compiled).transforms
              if t.attribution and t.attribution.reason == Reason.PINNED]
    assert pinned and all("conv2" in (t.attribution.source or "") for t in pinned)
