"""The blocker ledger: what a run's runtime transforms are there for, per reason and op, with
their bytes, cases and modules — the suite-level answer to "what should we fix first"."""

from __future__ import annotations

import pytest

from cl_validate.checks.verdict import CaseResult
from cl_validate.errors import ExitCode
from cl_validate.measurements.attribution import Attribution, Reason
from cl_validate.measurements.kernel_list import Kernel, KernelList, Transform
from cl_validate.paths import MARKDOWN_MARKER
from cl_validate.report.ledger import headline, ledger, render_ledger
from cl_validate.spec import load_case
from tests.conftest import run_cli, tiny_case


def _result(case, target: str, *atts: tuple[Attribution, int]) -> CaseResult:
    kernels = [Kernel(i, f"transpose{i}", (f"transpose{i}",), (Transform(
        "permute_dims", i, f"transpose{i}", a.reason is Reason.WEIGHT, None, None, a, n // 2,
        n // 2),), None, n // 2, n // 2) for i, (a, n) in enumerate(atts)]
    kernels.append(Kernel(len(kernels), "fused_conv2d", ("conv2d",), (), None, 1000, 1000))
    return CaseResult(case, target, kernels=KernelList(kernels))


def test_rows_are_reasons_with_their_op_most_transforms_first(write_case):
    case = load_case(write_case(tiny_case()))
    clip = Attribution(Reason.NO_LAYOUT_RULE, "relax.clip", "features.1 (hardtanh)")
    up = Attribution(Reason.NO_LAYOUT_RULE, "relax.nn.conv2d_transpose", "up (convolution)")
    boundary = Attribution(Reason.INPUT_BOUNDARY, None, "input 'x'")
    results = [_result(case, "llvm", (clip, 100), (clip, 100), (up, 5000), (boundary, 50)),
               _result(case, "llvm", (clip, 100), (boundary, 50)),
               _result(case, "cuda", (up, 5000))]
    led = ledger(results, "llvm")
    assert [(e.why, e.transforms, e.bytes) for e in led.entries] == [
        ("relax.clip: op without a layout rule", 3, 300),
        ("graph input boundary", 2, 100),
        ("relax.nn.conv2d_transpose: op without a layout rule", 1, 5000)]
    assert led.entries[0].modules == {"features.1 (hardtanh)": 3}
    assert led.runs == 2 and led.traffic == 2 * 2000 + 5250 + 150
    assert headline(led) == ("llvm: 6 transforms in 2 case runs; most: relax.clip: op without "
                             "a layout rule (3); the op without a layout rule behind the most: "
                             "relax.clip (3 transforms, 300 B, in case (3))")
    assert "cuda" not in render_ledger(led)  # one target's ledger
    assert ledger(results, "cuda").entries[0].transforms == 1


def test_the_op_to_fix_first_is_one_without_a_layout_rule(write_case):
    """The model's own permutes and a pinned layout may cause more transforms, but neither
    is the compiler's to fix: the headline names the op that has no layout rule."""
    case = load_case(write_case(tiny_case()))
    own = Attribution(Reason.OWN_PERMUTE, "relax.permute_dims", "shuffle (permute)")
    pinned = Attribution(Reason.PINNED, "relax.nn.conv2d", "conv1 (convolution)")
    up = Attribution(Reason.NO_LAYOUT_RULE, "relax.nn.conv2d_transpose", "up (convolution)")
    led = ledger([_result(case, "llvm", *[(own, 10)] * 5, *[(pinned, 10)] * 4, (up, 10))],
                 "llvm")
    assert [e.transforms for e in led.entries] == [5, 4, 1]
    assert led.top_op is not None and led.top_op.op == "relax.nn.conv2d_transpose"
    assert headline(led).endswith("the op without a layout rule behind the most: "
                                  "relax.nn.conv2d_transpose (1 transform, 10 B, in case)")
    assert ledger([_result(case, "llvm", (own, 10))], "llvm").top_op is None


@pytest.mark.compile
def test_ledger_over_cases_names_the_op_behind_the_most_transforms(write_case, tmp_path):
    write_case(tiny_case(2), "plain.toml")
    pinned = tiny_case(2) + '\n[layout_overrides]\n"conv1" = ["NCHW", "OIHW"]\n'
    write_case(pinned.replace('model = "', 'name = "pinned"\nmodel = "'), "pinned.toml")
    write_case(pinned.replace('model = "', 'name = "pinned2"\nmodel = "'), "pinned2.toml")
    md = tmp_path / "ledger.md"
    got = run_cli(["ledger", str(tmp_path), "--no-isolation", "--no-cache", "--markdown",
                   str(md)])
    assert got.code == ExitCode.OK, got.out + got.err
    assert "relax.nn.conv2d: layout pinned by [layout_overrides]" in got.out
    assert "behind the most" not in got.out  # a pinned layout was asked for: not a blocker
    assert "modules: conv1 (convolution) (2)" in got.out
    text = md.read_text()
    assert text.startswith(f"{MARKDOWN_MARKER}\n"  # how the next run knows it may replace it
                           "## What the runtime transforms are there for (blocker ledger)")
    assert "| 3 | 49.2 kB |" in text  # the output boundary of all three cases


@pytest.mark.compile
def test_run_ends_with_the_ledgers_top_rows_and_the_markdown_report_has_it(write_case,
                                                                          tmp_path):
    path = write_case(tiny_case(2))
    md = tmp_path / "r.md"
    got = run_cli(["run", str(path), "--no-isolation", "--no-cache", "--markdown", str(md)])
    assert got.code == ExitCode.OK, got.out
    tail = got.out.split("blocker ledger", 1)[1]
    # a tie on transforms goes to the bytes: the output (8 channels) before the input (3)
    assert "llvm: 2 transforms in 1 case run; most: graph output boundary (1)" in tail
    assert "graph input boundary" in tail
    report = md.read_text()
    assert "## What the runtime transforms are there for (blocker ledger)" in report
    assert "transform bytes, share of traffic" in report  # the table's new column
