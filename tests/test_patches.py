"""``F.unfold`` / ``F.fold`` with tiling patches (stride = kernel, MobileViT's) decompose into
views, not a gather and a scatter-add: exact against PyTorch for every geometry, and in NHWC
the patches cost one transpose each way instead of transposes around an ``index_put``."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from cl_validate.checks.verdict import Status
from cl_validate.compile.decompositions import decompositions
from cl_validate.session.in_process import judge_in_process
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions
from tests.conftest import tiny_case

TABLE = decompositions()
IM2COL, COL2IM = TABLE[torch.ops.aten.im2col.default], TABLE[torch.ops.aten.col2im.default]
GEOMETRIES = list(itertools.product(
    [(6, 8), (7, 5)],  # maps the patches tile exactly, and ones with rows/columns left over
    [(2, 2), (3, 2), (1, 1)],  # kernels; stride = kernel (tiling), or 1 (torch's own)
    [(0, 0), (1, 2)],  # padding
    [True, False],  # batched
    [True, False],  # tiling
))


@pytest.mark.parametrize(("size", "kernel", "padding", "batched", "tiling"), GEOMETRIES)
def test_the_decompositions_are_pytorchs_unfold_and_fold(size, kernel, padding, batched,
                                                        tiling) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, *size)
    stride = kernel if tiling else (1, 1)
    cols = F.unfold(x, kernel, padding=padding, stride=stride)
    folded = F.fold(cols, size, kernel, padding=padding, stride=stride)
    if not batched:
        x, cols, folded = x[0], cols[0], folded[0]
    args = (list(kernel), [1, 1], list(padding), list(stride))
    assert torch.equal(IM2COL(x, *args), cols)
    got = COL2IM(cols, list(size), *args)
    if tiling:  # every element is one patch element or a zero: nothing is summed
        assert torch.equal(got, folded)
    else:
        torch.testing.assert_close(got, folded)


def test_tiling_patches_export_as_views() -> None:
    class Patches(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.fold(F.unfold(x, 2, stride=2) * 2, (8, 8), 2, stride=2)

    graph = torch.export.export(Patches(), (torch.randn(1, 3, 8, 8),)).run_decompositions(
        TABLE).graph_module.code
    assert "index" not in graph and "permute" in graph, graph


@pytest.mark.compile
def test_mobilevit_v2_patches_cost_one_transpose_each_way(write_case) -> None:
    """The NCHW input and output (2), and the unfold (1), which reorders (row, pixel-row,
    column, pixel-column) in either layout for the GroupNorm and the residual add that
    read it. The fold is read in place by the pointwise convolution after it (a strided
    product). torch's decomposition left 7 (the scatter-add stayed NCHW between
    transposes); with the fold as a transpose of its own, 4."""
    case = load_case(write_case(tiny_case(3, model="tiny_models:tiled_patches",
                                          tolerance=(1e-5, 1e-5))))
    (result,) = judge_in_process([case], RunOptions(isolate=False))
    for check in ("compile", "layout_transforms", "numerics"):
        assert result.check(check).status is Status.PASSED, result.check(check).message
    assert result.kernels is not None
    assert len(result.kernels.runtime_transforms) == 3, result.kernels.render()
