"""What a transform costs: the bytes of every kernel and transform, the budget on them
(``layout_transform_bytes``, with the ratchet and ``budget tighten``), and where they show.

The figures come from real compiles of the tiny models (tests/data/tiny_models.py); the
budget logic is also tested on kernel lists built by hand, where two transforms with the same
count and different bytes make the point of a bytes budget.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cl_validate.checks.verdict import Status
from cl_validate.errors import CaseFileError, ExitCode
from cl_validate.measurements.kernel_list import Kernel, KernelList, Transform
from cl_validate.measurements.units import bytes_text, share_text
from cl_validate.session.in_process import judge_in_process
from cl_validate.spec import load_case
from cl_validate.spec.budgets import plan, rewrite
from cl_validate.spec.options import RunOptions
from tests.conftest import judge_check, run_cli, tiny_case

F32 = 4
INPUT = 1 * 3 * 16 * 16 * F32  # the tiny cases' NCHW input, 3,072 bytes


def _measure(path: Path, **kw):
    (result,) = judge_in_process([load_case(path)], RunOptions(isolate=False, **kw))
    return result


# --------------------------------------------------------------------------------------------
# Bytes from the types (real compiles)
# --------------------------------------------------------------------------------------------
@pytest.mark.compile
def test_every_kernel_and_transform_has_its_bytes_from_the_types(write_case):
    r = _measure(write_case(tiny_case(2)), static_only=True)
    kernels = r.kernels
    assert kernels is not None
    first = kernels.kernels[0]
    (t,) = first.transforms  # the NCHW input, permuted to NHWC: read once, written once
    assert (t.bytes_read, t.bytes_written, t.bytes) == (INPUT, INPUT, 2 * INPUT)
    assert (first.bytes_read, first.bytes_written) == (INPUT, INPUT)
    conv = kernels.kernels[1]  # conv3x3 3→8 + bias + ReLU: the input, the OHWI weight, bias
    assert conv.bytes_read == INPUT + (8 * 3 * 3 * 3 + 8) * F32
    assert conv.bytes_written == 1 * 16 * 16 * 8 * F32
    assert kernels.traffic == sum(k.bytes for k in kernels if k.bytes is not None)
    assert kernels.transform_bytes == sum(t.bytes for t in kernels.runtime_transforms
                                          if t.bytes is not None)
    line = kernels.render().splitlines()[0]
    assert f"{bytes_text(INPUT)} in" in line and f"{bytes_text(INPUT)} out" in line
    assert f"moves {bytes_text(2 * INPUT)} = {share_text(kernels.share(2 * INPUT))}" in line


@pytest.mark.compile
def test_a_symbolic_program_reports_bytes_at_each_dimensions_maximum(write_case):
    text = tiny_case(2).replace("shape = [1, 3, 16, 16]", 'shape = ["batch", 3, 16, 16]') \
        + "\n[dynamic]\nbatch = { min = 1, max = 4 }\n"
    r = _measure(write_case(text), static_only=True)
    assert r.kernels is not None and r.kernels.bytes_at == {"batch": 4}
    assert r.kernels.kernels[0].transforms[0].bytes == 4 * 2 * INPUT
    assert r.kernels.traffic_text().endswith("at batch=4, the [dynamic] maxima")


# --------------------------------------------------------------------------------------------
# The budget on bytes
# --------------------------------------------------------------------------------------------
@pytest.mark.compile
def test_a_bytes_budget_passes_the_cheap_transform_and_fails_a_costly_one_in_the_middle(
        write_case):
    """conv → ReLU → conv, NCHW in and out: the input (3 channels) and output (8 channels)
    transforms. Pinning conv1 to NCHW moves the input's transform into the middle, onto the
    8-channel activation: the same count, more bytes — the bytes budget fails, the count
    does not."""
    cheap = _measure(write_case(tiny_case(2), "cheap.toml"), static_only=True)
    assert cheap.kernels is not None
    budget = cheap.kernels.transform_bytes
    activation = 1 * 8 * 16 * 16 * F32
    assert budget == 2 * INPUT + 2 * activation
    with_budget = tiny_case(2).replace(
        "layout_transforms = 2", f"layout_transforms = 2\nlayout_transform_bytes = {budget}")
    ok = _measure(write_case(with_budget, "cheap_budgeted.toml"), static_only=True)
    c = ok.check("layout_transform_bytes")
    assert c.status is Status.PASSED, c.message
    assert c.message == ("layout_transform_bytes 22,528 B (22.5 kB) <= budget 22,528 B "
                         "(22.5 kB)")

    costly = with_budget + '\n[layout_overrides]\n"conv1" = ["NCHW", "OIHW"]\n'
    bad = _measure(write_case(costly, "costly.toml"), static_only=True)
    assert bad.check("layout_transforms").status is Status.PASSED  # still two transforms
    c = bad.check("layout_transform_bytes")
    assert c.status is Status.FAILED and c.kind == "BudgetExceeded"
    assert c.figures.transform_bytes == 4 * activation
    assert c.message.startswith("layout_transform_bytes 32,768 B (32.8 kB) > budget 22,528 B "
                                "(22.5 kB) (llvm) — next: the costliest moves 16.4 kB: "
                                "permute_dims[0, 2, 3, 1] of [1, 8, 16, 16]")
    assert "layout pinned by [layout_overrides], from conv1" in c.message
    assert c.line == 13  # the line that declares the bytes budget
    assert c.body.startswith("budget 22,528 B (22.5 kB) (budget, line 13)\ntraffic ")


def _one_transform(in_shape: tuple[int, ...], name: str) -> KernelList:
    n = 1
    for d in in_shape:
        n *= d
    t = Transform("permute_dims", 0, name, False, in_shape, (0, 2, 3, 1), None, n * F32,
                  n * F32)
    return KernelList([Kernel(0, name, (name,), (t,), None, n * F32, n * F32),
                       Kernel(1, "fused_conv2d", ("conv2d",), (), None, 10**7, 10**7)])


def test_the_same_count_can_move_very_different_bytes(write_case):
    """A count treats the input transpose of a 3-channel image and one of a 256-channel
    activation alike; the bytes budget tells them apart."""
    case = load_case(write_case(tiny_case(1).replace(
        "layout_transforms = 1", f"layout_transforms = 1\nlayout_transform_bytes = "
        f"{2 * 3 * 224 * 224 * F32}")))
    image = _one_transform((1, 3, 224, 224), "transpose")
    activation = _one_transform((1, 256, 56, 56), "transpose1")
    assert len(image.runtime_transforms) == len(activation.runtime_transforms) == 1
    assert judge_check("layout_transform_bytes", case, "llvm",
                       kernels=image).status is Status.PASSED
    costly = judge_check("layout_transform_bytes", case, "llvm", kernels=activation)
    assert costly.status is Status.FAILED
    assert costly.message.startswith("layout_transform_bytes 6,422,528 B (6.42 MB) > budget "
                                     "1,204,224 B (1.20 MB) (llvm)")


def test_a_bytes_budget_above_the_measured_bytes_is_stale(write_case):
    case = load_case(write_case(tiny_case(1).replace(
        "layout_transforms = 1", "layout_transforms = 1\nlayout_transform_bytes = 1_300_000")))
    r = judge_check("layout_transform_bytes", case, "llvm",
                    kernels=_one_transform((1, 3, 224, 224), "transpose"))
    assert r.status is Status.FAILED and r.kind == "BudgetStale" and r.figures.stale
    assert r.message.startswith("budget stale: layout_transform_bytes 1,204,224 B (1.20 MB) "
                                "< 1,300,000 B (1.30 MB) (llvm)")


def test_without_a_bytes_budget_the_figures_are_reported_not_judged(write_case):
    case = load_case(write_case(tiny_case(1)))
    r = judge_check("layout_transform_bytes", case, "llvm",
                    kernels=_one_transform((1, 3, 224, 224), "transpose"))
    assert r.status is Status.SKIPPED
    assert r.message == ("no layout_transform_bytes budget declared (runtime transforms move "
                         "1.20 MB, 5.7% of the program's traffic)")
    assert "1.20 MB   5.7%  kernel 0 transpose: permute_dims" in r.body


@pytest.mark.parametrize(("budget", "says"), [
    ("layout_transform_byte = 10", "unknown key 'layout_transform_byte' in [budget] (hint: did "
                                   "you mean 'layout_transform_bytes'?)"),
    ("layout_transform_bytes = -1", "layout_transform_bytes must be >= 0, got -1"),
    ("layout_transform_bytes = 1.5", "layout_transform_bytes must be an integer"),
])
def test_a_bad_bytes_budget_is_a_one_line_error_at_its_line(write_case, budget, says):
    path = write_case(tiny_case(1).replace("layout_transforms = 1",
                                           f"layout_transforms = 1\n{budget}"))
    with pytest.raises(CaseFileError) as err:
        load_case(path)
    assert says in str(err.value) and err.value.line == 13


# --------------------------------------------------------------------------------------------
# tighten writes the measured bytes, exactly
# --------------------------------------------------------------------------------------------
def test_tighten_lowers_a_bytes_budget_to_the_exact_figure_with_digit_groups(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(tiny_case(1, targets=None).replace(
        "layout_transforms = 1", "layout_transforms = 1\nlayout_transform_bytes = 2_000_000"
                                 "   # the input transpose only"))
    case = load_case(path)
    figures = {"layout_transforms": 1, "kernels": 4, "layout_transform_bytes": 1_204_224}
    p = plan(case, {None: {"llvm": figures, "cuda": {**figures, "fallback_kernels": 1}}},
             allow_increase=False, reason="")
    new = rewrite(path.read_text(), p)
    assert "layout_transform_bytes = 1_204_224   # the input transpose only\n" in new
    path.write_text(new)
    assert load_case(path).budget_for("cuda").get("layout_transform_bytes") == 1_204_224


@pytest.mark.compile
def test_tighten_and_run_agree_on_the_bytes(write_case):
    path = write_case(tiny_case(2).replace(
        "layout_transforms = 2", "layout_transforms = 2\nlayout_transform_bytes = 99_999"))
    got = run_cli(["budget", "tighten", str(path), "--no-isolation"])
    assert got.code == ExitCode.OK, got.out + got.err
    assert "layout_transform_bytes 99999 -> 22528 (lowered)" in got.out
    assert "layout_transform_bytes = 22_528\n" in path.read_text()
    again = run_cli(["run", str(path), "--no-isolation", "--no-cache"])
    assert again.code == ExitCode.OK, again.out
