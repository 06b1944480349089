"""Each check in isolation, on hand-built analysis results (no compile needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cl_validate.checks.layout import check_layout
from cl_validate.checks.numerics import check_numerics, compare
from cl_validate.checks.verdict import Status
from cl_validate.measurements.kernel_list import Kernel, KernelList, OpLayout, StageCount, Transform
from cl_validate.spec import Tolerance, load_case
from tests.conftest import MINIMAL, judge_check


@pytest.fixture
def case(write_case):
    return load_case(write_case(MINIMAL + "kernels = 3\n\n[targets_override.cuda]\n"
                                "budget = { layout_transforms = 1 }\n"))


def _kernels(n_runtime: int, n_weight: int = 0, extra: int = 1) -> KernelList:
    ks = []
    for i in range(n_runtime + n_weight):
        t = Transform("permute_dims", i, f"transpose{i}", weight=i >= n_runtime,
                      in_shape=(1, 3, 8, 8), axes=(0, 2, 3, 1))
        ks.append(Kernel(i, f"transpose{i}", (f"transpose{i}",), (t,)))
    for j in range(extra):
        ks.append(Kernel(len(ks), f"fused_conv2d_add{j}", ("conv2d", "add")))
    return KernelList(ks)


COUNTS = [StageCount("import", 0, 0), StageCount("convert_layout", 2, 1)]


def test_layout_transforms_within_budget(case):
    r = judge_check("layout_transforms", case, "llvm", kernels=_kernels(2),
                    stage_counts=COUNTS)
    assert r.status is Status.PASSED and r
    assert r.figures.layout_transforms == 2


def test_layout_transforms_over_budget_names_count_budget_target_and_line(case):
    r = judge_check("layout_transforms", case, "cuda", kernels=_kernels(2),
                    stage_counts=COUNTS)
    assert r.status is Status.FAILED and not r
    assert r.message.startswith("layout_transforms 2 > budget 1 (cuda) — next: ")
    assert r.kind == "BudgetExceeded"
    assert r.line == case.line_of("targets_override", "cuda", "budget", "layout_transforms")
    assert ">>   0  transpose0" in r.body and "convert_layout=2+1w" in r.body


def test_any_weight_transform_fails_even_within_budget(case):
    r = judge_check("layout_transforms", case, "llvm", kernels=_kernels(0, n_weight=1),
                    stage_counts=COUNTS)
    assert r.status is Status.FAILED
    assert r.kind == "WeightTransform"
    assert "should have folded" in r.message


def test_kernels_budget(case):
    ok = judge_check("kernels", case, "llvm", kernels=_kernels(1, extra=2))
    assert ok.status is Status.PASSED
    r = judge_check("kernels", case, "llvm", kernels=_kernels(2, extra=2))
    assert r.status is Status.FAILED
    assert r.message.startswith("kernels 4 > budget 3 (llvm) — next: ")


def test_kernels_skipped_without_budget(write_case):
    case = load_case(write_case(MINIMAL))
    r = judge_check("kernels", case, "llvm", kernels=_kernels(1))
    assert r.status is Status.SKIPPED and "2 kernels" in r.message


def _conv(layout: str, kernel: str) -> OpLayout:
    return OpLayout("relax.nn.conv2d", "lv", {"data_layout": layout, "kernel_layout": kernel,
                                              "out_layout": layout})


def test_layout_check(case):
    pool = OpLayout("relax.nn.max_pool2d", "lv2", {"layout": "NHWC", "out_layout": "NHWC"})
    assert check_layout(case, "llvm", [_conv("NHWC", "OHWI"), pool]).status is Status.PASSED
    r = check_layout(case, "llvm", [_conv("NHWC", "OHWI"), _conv("NCHW", "OIHW")])
    assert r.status is Status.FAILED and r.kind == "LayoutMismatch"
    assert "1 of 2" in r.message and "data_layout NCHW, expected NHWC" in r.message
    nchw_pool = OpLayout("relax.nn.max_pool2d", "lv3", {"layout": "NCHW", "out_layout": "NCHW"})
    r = check_layout(case, "llvm", [_conv("NHWC", "OHWI"), nchw_pool])
    assert r.status is Status.FAILED and "max_pool2d" in r.message


def test_an_op_tvm_lowers_in_one_layout_is_expected_in_it(case):
    """TVM 0.27's grid sample compiles in NCHW only (RAFT, deformable attention): with NHWC
    convolutions it is not a mismatch there, and is one where the case declares otherwise."""
    grid = OpLayout("relax.image.grid_sample", "lv5", {"layout": "NCHW"})
    assert check_layout(case, "llvm", [_conv("NHWC", "OHWI"), grid]).status is Status.PASSED
    nhwc = OpLayout("relax.image.grid_sample", "lv5", {"layout": "NHWC"})
    r = check_layout(case, "llvm", [_conv("NHWC", "OHWI"), nhwc])
    assert r.status is Status.FAILED and "grid_sample (lv5) layout NHWC, expected NCHW" in r.message


def test_a_layout_that_differs_only_in_axes_of_one_is_the_declared_one(case):
    """A one-channel map (RAFT's correlation pyramid, `(B·H·W, 1, h, w)`) lies in memory the
    same in NCHW and NHWC: not a mismatch. Two channels are."""
    def pool(channels: int) -> OpLayout:
        return OpLayout("relax.nn.avg_pool2d", "lv4", {"layout": "NCHW", "out_layout": "NCHW"},
                        None, {"layout": (64, channels, 4, 4)})

    assert check_layout(case, "llvm", [_conv("NHWC", "OHWI"), pool(1)]).status is Status.PASSED
    r = check_layout(case, "llvm", [_conv("NHWC", "OHWI"), pool(2)])
    assert r.status is Status.FAILED and "avg_pool2d (lv4) layout NCHW" in r.message


def test_the_layout_check_reads_the_one_channel_pool_of_a_compiled_model(tmp_path):
    """End to end: a correlation volume viewed as one-channel maps and pooled (RAFT's
    pyramid) passes the NHWC layout check, with its pool's data shape recorded."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from cl_validate.analysis.op_layouts import op_layouts
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case, op_level_stage
    from cl_validate.session.inputs import make_inputs, torch_inputs

    class Corr(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            f = self.conv(x).flatten(2)  # (1, 4, 16)
            corr = (f.transpose(1, 2) @ f).view(16, 1, 4, 4)
            return F.avg_pool2d(corr, 2)

    path = tmp_path / "c.toml"
    path.write_text('model = "x:y"\n[[inputs]]\nname = "x"\nshape = [1, 3, 4, 4]\n'
                    '[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n')
    case = load_case(path)
    tensors = torch_inputs(case, make_inputs(case))
    compiled = compile_case(export_and_import(Corr().eval(), case, tensors), case, "llvm")
    ops = op_layouts(compiled.stage(op_level_stage(compiled)).mod)
    pools = [op for op in ops if op.op == "relax.nn.avg_pool2d"]
    assert pools and pools[0].shapes.get("layout") == (16, 1, 4, 4), ops
    assert check_layout(case, "llvm", ops).status is Status.PASSED, ops


def test_layout_check_fails_when_no_declared_op_is_present(case):
    r = check_layout(case, "llvm", [])
    assert r.status is Status.FAILED and r.kind == "LayoutMissing"


def test_numerics_check_bound_is_atol_plus_rtol_times_reference(case):
    ref = np.array([1.0, -2.0, 100.0], dtype=np.float32)
    tol = Tolerance(rtol=1e-2, atol=1e-3)
    ok = compare(ref + np.array([1e-3, 0, 0.999], dtype=np.float32), ref, tol)
    assert ok and ok.mismatched == 0
    bad = compare(ref + np.array([0, 0, 1.5], dtype=np.float32), ref, tol)
    assert not bad and bad.mismatched == 1
    assert math.isclose(bad.max_abs, 1.5, rel_tol=1e-6)
    assert math.isclose(bad.max_rel, 0.015, rel_tol=1e-4)
    assert bad.worst_index == (2,)
    r = check_numerics(case, "llvm", [bad])
    assert r.status is Status.FAILED and r.kind == "NumericsMismatch"
    assert "max abs 1.5" in r.message and "1/3 elements" in r.message


@pytest.mark.parametrize("where", ["tvm", "torch"])
def test_nan_or_inf_always_fails(case, where):
    ref = np.ones(4, dtype=np.float32)
    got = ref.copy()
    (got if where == "tvm" else ref)[1] = np.nan if where == "tvm" else np.inf
    stats = compare(got, ref, Tolerance(rtol=1e9, atol=1e9))
    assert not stats
    r = check_numerics(case, "llvm", [stats])
    assert r.status is Status.FAILED and r.kind == "NonFinite"
    assert "non-finite" in r.message


def test_shape_mismatch_fails(case):
    stats = compare(np.zeros((2, 3)), np.zeros((3, 2)), Tolerance(1, 1))
    assert not stats and "shape" in stats.summary()
