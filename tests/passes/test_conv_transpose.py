"""Transposed convolutions: never an unbuildable program, and NHWC with no transform.

TVM 0.27 lowers conv2d_transpose only in NCHW/IOHW. The ``nhwc`` pipeline rewrites one that
ConvertLayout carried to NHWC as a convolution of the zero-stuffed input (numerics as
PyTorch's); any pipeline that still leaves an op TVM cannot lower gets it kept in its import
layout automatically, said so in the compile verdict and in ``show``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from cl_validate.analysis.fused_kernels import read_kernel_list
from cl_validate.compile.frontend import export_and_import
from cl_validate.compile.program import compile_case
from cl_validate.measurements.attribution import Reason
from cl_validate.spec import load_case

pytestmark = pytest.mark.compile

CASE = """model = "tiny_models:conv_transpose_net"
pipeline = "{pipeline}"
[[inputs]]
name = "x"
shape = [1, 4, 7, 6]
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
"""


class Up(nn.Module):
    """conv → ConvTranspose2d → conv: the convolutions put the stream in NHWC."""

    def __init__(self, **kw: Any) -> None:
        super().__init__()
        self.pre = nn.Conv2d(4, 4, 1)
        self.up = nn.ConvTranspose2d(4, 6, **kw)
        self.post = nn.Conv2d(6, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.post(self.up(self.pre(x)))


def _run(compiled: Any, x: np.ndarray) -> np.ndarray:
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(compiled.executable, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize("kw", [
    dict(kernel_size=3, stride=2, padding=1, output_padding=1),
    dict(kernel_size=4, stride=2, padding=1, groups=2),
    dict(kernel_size=3, stride=2, padding=0, output_padding=1, dilation=2),
    dict(kernel_size=5, stride=2, padding=4, output_padding=1),  # padding beyond the reach
], ids=["k3s2p1", "k4s2-groups", "k3s2-dilated", "k5s2p4"])
def test_nhwc_conv_transpose_matches_pytorch_with_no_transform(write_case, kw):
    case = load_case(write_case(CASE.format(pipeline="nhwc")))
    torch.manual_seed(0)
    model = Up(**kw).eval()
    x = torch.randn(1, 4, 7, 6)
    compiled = compile_case(export_and_import(model, case, [x]), case, "llvm")
    assert compiled.kept_layouts == []
    kernels = read_kernel_list(compiled)
    reasons = [t.attribution.reason for t in kernels.runtime_transforms]  # type: ignore[union-attr]
    # the boundaries at most (a pointwise convolution first may read the NCHW input itself)
    assert Reason.OUTPUT_BOUNDARY in reasons and set(reasons) <= {
        Reason.INPUT_BOUNDARY, Reason.OUTPUT_BOUNDARY}, kernels.render()
    assert not any("conv2d_transpose" in k.name for k in kernels)
    with torch.no_grad():
        expected = model(x).numpy()
    actual = _run(compiled, x.numpy())
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def test_an_op_tvm_cannot_lower_is_kept_in_its_import_layout(write_case, capsys):
    """TVM's own ConvertLayout (``nhwc-plain``) carries the transposed conv to NHWC, where
    TVM cannot lower it: the case is compiled again with it kept in NCHW/IOHW; it builds, runs
    right, the transforms at its borders say why, and ``show`` says so too."""
    from cl_validate.cli.main import main

    path = write_case(CASE.format(pipeline="nhwc-plain").replace("[1, 4, 7, 6]", "[1, 3, 7, 6]"))
    case = load_case(path)
    torch.manual_seed(0)
    from tiny_models import conv_transpose_net

    model = conv_transpose_net()
    x = torch.randn(1, 3, 7, 6)
    compiled = compile_case(export_and_import(model, case, [x]), case, "llvm")
    assert len(compiled.kept_layouts) == 1 and compiled.kept_layouts[0].startswith(
        "relax.nn.conv2d_transpose kept in NCHW/IOHW: TVM cannot lower it in NHWC/"), \
        compiled.kept_layouts
    kept = [t for t in read_kernel_list(compiled).runtime_transforms
            if t.attribution is not None and t.attribution.reason is Reason.KEPT_LAYOUT]
    assert len(kept) == 2 and all(t.attribution.relax_op == "relax.nn.conv2d_transpose"
                                  for t in kept)
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(_run(compiled, x.numpy()), expected, rtol=1e-5, atol=1e-5)

    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "note: relax.nn.conv2d_transpose kept in NCHW/IOHW" in out
