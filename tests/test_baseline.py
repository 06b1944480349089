"""Kernel-list baselines: the snapshot format, the comparison, and a fusion that breaks.

The comparison is tested on hand-built kernel lists; record → run → broken fusion runs the
real CLI on a tiny model (a user pipeline that skips FuseOps splits every fused kernel).
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from junitparser import Failure, JUnitXml

from cl_validate.checks.kernel_list import (
    BaselineKernel,
    baseline_path,
    check_kernel_list,
    compare,
    normalize,
    parse,
    render,
    snapshot,
)
from cl_validate.checks.registry import names
from cl_validate.checks.verdict import Status
from cl_validate.errors import ExitCode, UsageError
from cl_validate.measurements.kernel_list import Kernel, KernelList, Transform
from cl_validate.spec import load_case
from tests.conftest import DATA, MINIMAL, run_cli, tiny_case


def _list(*specs: tuple[str, tuple[str, ...]]) -> KernelList:
    """Kernels from (name, ops); names starting with 'transpose' carry a transform."""
    ks = []
    for i, (name, ops) in enumerate(specs):
        tr = (Transform("permute_dims", i, name, False, (1, 3, 8, 8), (0, 2, 3, 1)),) \
            if name.startswith("transpose") else ()
        ks.append(Kernel(i, name, ops, tr, (1, 8, 8, 3)))
    return KernelList(ks)


FUSED = _list(("transpose", ("transpose",)), ("fused_conv2d_add_relu", ("conv2d", "add", "relu")),
              ("fused_conv2d1_add1", ("conv2d1", "add1")), ("transpose1", ("transpose1",)))


def test_normalize_drops_uniquifying_numbers_only():
    assert normalize("fused_conv2d3_add2") == "fused_conv2d_add"
    assert normalize("transpose12") == "transpose"
    assert normalize("fused_max_pool2d_add_relu") == "fused_max_pool2d_add_relu"
    assert normalize("conv1d") == "conv1d"


def test_snapshot_renders_one_kernel_per_line_and_parses_back(write_case):
    case = load_case(write_case(MINIMAL, "mini.toml"))
    text = render(case, "llvm", FUSED)
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert lines == [
        ">> transpose = transpose  [permute_dims(0,2,3,1)]  # out [1, 8, 8, 3]",
        "   fused_conv2d_add_relu = conv2d + add + relu  # out [1, 8, 8, 3]",
        "   fused_conv2d_add = conv2d + add  # out [1, 8, 8, 3]",
        ">> transpose = transpose  [permute_dims(0,2,3,1)]  # out [1, 8, 8, 3]",
    ]
    assert "apache-tvm: " in text and "pipeline: nhwc" in text
    assert parse(text, "x.txt") == snapshot(FUSED)
    assert baseline_path(case, "cuda") == (case.path.parent / "baselines" / "mini.cuda.txt"
                                           ).resolve()


def test_renumbering_is_not_a_difference():
    renumbered = _list(("transpose3", ("transpose3",)),
                       ("fused_conv2d7_add4_relu2", ("conv2d7", "add4", "relu2")),
                       ("fused_conv2d8_add5", ("conv2d8", "add5")), ("transpose9", ("transpose9",)))
    assert compare(snapshot(FUSED), snapshot(renumbered)) == []


def test_a_broken_fusion_is_a_split_and_a_better_one_a_merge():
    broken = _list(("transpose", ("transpose",)), ("conv2d", ("conv2d",)),
                   ("fused_add_relu", ("add", "relu")), ("fused_conv2d1_add1", ("conv2d1", "add1")),
                   ("transpose1", ("transpose1",)))
    (change,) = compare(snapshot(FUSED), snapshot(broken))
    assert change.kind == "split"
    assert [k.name for k in change.old] == ["fused_conv2d_add_relu"]
    assert [k.name for k in change.new] == ["conv2d", "fused_add_relu"]
    assert "split: fused_conv2d_add_relu = conv2d + add + relu" in change.describe()
    (back,) = compare(snapshot(broken), snapshot(FUSED))
    assert back.kind == "merged" and len(back.old) == 2


def test_added_removed_and_changed_kernels():
    old = snapshot(FUSED)
    added = [*old[:2], BaselineKernel("softmax", ("softmax",)), *old[2:]]
    assert [c.kind for c in compare(old, added)] == ["added"]
    assert [c.kind for c in compare(added, old)] == ["removed"]
    moved = [*old[:3], BaselineKernel("transpose", ("transpose",), ("permute_dims(0,1,3,2)",))]
    assert [c.kind for c in compare(old, moved)] == ["changed"]


def test_a_malformed_baseline_is_a_one_line_error_with_its_line():
    with pytest.raises(UsageError) as exc:
        parse("# header\n   fused_conv2d_add = conv2d + add\nwhat is this\n", "b/x.llvm.txt")
    assert str(exc.value).startswith("b/x.llvm.txt:3: not a kernel line: 'what is this'")


def test_check_skips_without_baseline_passes_and_fails_with_a_diff(write_case):
    case = load_case(write_case(MINIMAL, "mini.toml"))
    r = check_kernel_list(case, "llvm", FUSED)
    assert r.status is Status.SKIPPED and "cl-validate budget record" in r.message
    path = baseline_path(case, "llvm")
    path.parent.mkdir()
    path.write_text(render(case, "llvm", FUSED))
    assert check_kernel_list(case, "llvm", FUSED).status is Status.PASSED
    broken = _list(*((k.name, k.ops) for k in FUSED.kernels[:3]))  # last transpose gone
    r = check_kernel_list(case, "llvm", broken)
    assert r.status is Status.FAILED and r.kind == "KernelListChanged"
    assert r.message == ("kernel list differs from the baseline (llvm): 1 removed; "
                         "4 -> 3 kernels")
    assert "\n->> transpose = transpose" in r.body
    assert "kernel_list" in names()


# --------------------------------------------------------------------------------------------
# The real thing: record with the default pipeline, then break the fusion.
# --------------------------------------------------------------------------------------------
NOFUSE = '''
from cl_validate.compile.pipeline import nhwc


def nhwc_nofuse(ctx):
    """The default pipeline without FuseOps: every fused kernel falls apart."""
    return [s for s in nhwc(ctx) if s.name != "fuse"]
'''



@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("baseline")
    shutil.copy(DATA / "tiny_models.py", root)
    (root / "nofuse_pipeline.py").write_text(textwrap.dedent(NOFUSE))
    case = root / "conv.toml"
    case.write_text(tiny_case())
    code, out = run_cli(["budget", "record", str(root), "--no-isolation"]).both()
    return root, case, code, out


@pytest.mark.compile
def test_record_writes_a_reviewable_snapshot(recorded):
    root, _, code, out = recorded
    assert code == ExitCode.OK, out
    path = root / "baselines" / "conv.llvm.txt"
    assert "wrote" in out and "conv.llvm.txt (4 kernels)" in out
    kernels = [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]
    assert kernels[0].startswith(">> transpose = transpose  [permute_dims(0,2,3,1)]")
    assert kernels[1].startswith("   fused_conv2d_add_relu = conv2d + add + relu")
    assert kernels[2].startswith("   fused_conv2d_add = conv2d + add")  # conv2d1 normalized
    assert len(kernels) == 4


@pytest.mark.compile
def test_run_passes_against_the_baseline_then_a_broken_fusion_fails(recorded, tmp_path):
    _, case, _, _ = recorded
    junit = tmp_path / "r.xml"
    code, out = run_cli(["run", str(case), "--no-isolation", "--junit", str(junit)]).both()
    assert code == ExitCode.OK, out
    assert "kernel_list=ok" in out

    case.write_text('pipeline = "nofuse_pipeline:nhwc_nofuse"\n' + tiny_case())
    code, out = run_cli(["run", str(case), "--no-isolation", "--junit", str(junit)]).both()
    assert code == ExitCode.CHECK_FAILED, out
    (tc,) = [tc for suite in JUnitXml.fromfile(str(junit)) for tc in suite
             if tc.name == "kernel_list[llvm]"]
    (failure,) = tc.result
    assert isinstance(failure, Failure) and failure.type == "KernelListChanged"
    assert failure.message.startswith("kernel list differs from the baseline (llvm): 2 split")
    assert "split: fused_conv2d_add_relu = conv2d + add + relu" in failure.text
    assert "    -> relu = relu" in failure.text
    assert "-   fused_conv2d_add_relu = conv2d + add + relu" in failure.text  # unified diff
    assert "+   conv2d = conv2d" in failure.text
    assert "cl-validate budget record" in failure.text


@pytest.mark.compile
def test_a_hand_broken_baseline_stops_the_run_before_compiling(recorded, tmp_path):
    root, _, _, _ = recorded
    other = tmp_path / "cases"
    other.mkdir()
    shutil.copy(DATA / "tiny_models.py", other)
    (other / "conv.toml").write_text(tiny_case())
    (other / "baselines").mkdir()
    (other / "baselines" / "conv.llvm.txt").write_text("garbage here\n")
    code, out = run_cli(["run", str(other), "--no-isolation"]).both()
    assert code == ExitCode.USAGE_ERROR
    assert "conv.llvm.txt:1: not a kernel line" in out and "Traceback" not in out
    assert Path(root / "baselines" / "conv.llvm.txt").exists()
