"""Trust, round three (#43): a model breaks only its own case, and its verdict is true.

Each test reproduces one probe of the round and failed before its fix."""

from __future__ import annotations

import shutil

import pytest

from cl_validate.errors import ExitCode
from tests.conftest import DATA, run_cli, tiny_case


@pytest.mark.compile
def test_an_output_that_is_the_models_own_buffer_is_kept_as_it_was(tmp_path):
    """The model writes each result into a buffer and returns the buffer: PyTorch's outputs
    were kept as views, so the next draw's forward overwrote the first's expected values and
    numerics failed ("first break after import") though eager and export agree."""
    for f in ("tiny_models.py", "hostile_models.py"):
        shutil.copy(DATA / f, tmp_path / f)
    case = tmp_path / "buf.toml"
    case.write_text(tiny_case(model="hostile_models:returns_its_buffer", extra="seeds = 3"))
    code, out = run_cli(["run", str(case)]).both()
    assert code == ExitCode.OK, out
    assert "numerics=ok" in out


@pytest.mark.compile
@pytest.mark.parametrize("factory, says", [
    ("float8_output", "import failed: NotImplementedError: input_type torch.float8_e4m3fn"),
    ("deeply_nested_output", "the model's forward returned a list nested deeper than Python "
                             "can walk"),
])
def test_an_output_numpy_cannot_hold_is_named_for_what_failed(factory, says, tmp_path):
    """A float8 output and a 3000-deep nested one were "PyTorch forward failed", though the
    forward ran: the float8 one is now read through float32 (exact) and its case fails where
    it does (TVM's import), the nested one names its nesting."""
    for f in ("tiny_models.py", "hostile_models.py"):
        shutil.copy(DATA / f, tmp_path / f)
    case = tmp_path / "c.toml"
    case.write_text(tiny_case(model=f"hostile_models:{factory}"))
    code, out = run_cli(["run", str(case)]).both()
    assert code == ExitCode.USAGE_ERROR or code == ExitCode.CHECK_FAILED, out
    assert says in out and "PyTorch forward failed" not in out, out


def test_an_empty_selection_matches_trivially():
    """A top-k that selected nothing (k = 0, or a batch of none) was an internal error."""
    import numpy as np

    from cl_validate.measurements.selection import match_items

    for shape in ((1, 0, 4), (0, 5, 4)):
        empty = np.zeros(shape, np.float32)
        got = match_items(empty, empty, axis=1, atol=1e-5, rtol=1e-5, differing=0)
        assert got.actual.shape == shape and (got.reordered, got.differing) == (0, 0)


@pytest.mark.parametrize("extra, says", [
    ("description" + ".a" * 30000 + ' = "x"', "a key of 30001 dotted parts"),
    ("[" + "a" * 120000 + "]\nx = 1", "a table header of 1 dotted parts and 120001 characters"),
])
def test_a_case_file_key_that_would_make_the_parse_blow_up_is_one_line(extra, says, tmp_path):
    """(#43.3) 60 kB of dotted key parts made the TOML parse quadratic (MemoryError under
    3 GB, 22 GB unbounded) and a 120 kB table header took 20 s, in the run's parent: now one
    line at the key, before any parser runs."""
    import time

    case = tmp_path / "c.toml"
    case.write_text(tiny_case() + extra + "\n")
    t0 = time.perf_counter()
    code, out = run_cli(["run", str(case)]).both()
    assert time.perf_counter() - t0 < 10
    assert code == ExitCode.USAGE_ERROR and f"c.toml:17: {says}" in out, out
    assert out.count("\n") <= 2


SELECTION = """
[[outputs]]
name = "{name}"
selection = {{ axis = 1, differing = {differing} }}
"""


def test_the_parent_never_matches_a_selection(tmp_path, monkeypatch):
    """Selection matching grows with the square of the items: a 96 kB output with four
    seeds blocked the run loop for a minute, a 245 kB one asked for 29 GiB. It runs where
    the outputs are made (the case process, under the case's limits); the parent judges the
    matched arrays and, handed a sample no case process matched, compares element by
    element rather than match it."""
    import numpy as np

    from cl_validate.checks.numerics import match_selections
    from cl_validate.checks.verdict import Status
    from cl_validate.measurements import selection
    from cl_validate.measurements.measurement import Sample
    from cl_validate.spec import load_case
    from tests.conftest import judge_check

    path = tmp_path / "sel.toml"
    path.write_text(tiny_case(model="tiny_models:topk_head", tolerance=(1e-4, 1e-4))
                    + SELECTION.format(name="detections", differing=0))
    case = load_case(path)
    rng = np.random.default_rng(0)
    expected = rng.standard_normal((1, 24, 6)).astype(np.float32)
    permuted = expected[:, rng.permutation(24)]
    matched = match_selections(case, "llvm", Sample("", [permuted], [expected]))
    assert matched.selections is not None and matched.selections[0][0] > 20

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the parent matched a selection")

    monkeypatch.setattr(selection, "_pair", refuse)
    ok = judge_check("numerics", case, "llvm", samples=[matched])
    assert ok.status is Status.PASSED, ok.message
    unmatched = judge_check("numerics", case, "llvm", samples=[Sample("", [permuted],
                                                                      [expected])])
    assert unmatched.status is Status.FAILED, unmatched.message


@pytest.mark.compile
def test_a_selection_too_large_to_match_errors_its_own_case(tmp_path):
    """6144 items: the case's numerics error, by name, with the fix; its neighbour passes."""
    for f in ("tiny_models.py", "hostile_models.py"):
        shutil.copy(DATA / f, tmp_path / f)
    (tmp_path / "wide.toml").write_text(
        tiny_case(model="hostile_models:wide_selection")
        + SELECTION.format(name="out", differing=0))
    (tmp_path / "fine.toml").write_text(tiny_case())
    code, out = run_cli(["run", str(tmp_path), "-j", "2", "--no-cache"]).both()
    assert code == ExitCode.CHECK_FAILED, out
    assert "numerics cannot compare a selection of 6144 items along axis 1 (at most 4096" \
        in out, out
    assert "PASS  fine" in out, out


@pytest.mark.compile
def test_a_selection_that_lets_every_item_differ_cannot_pass_unnoticed(tmp_path):
    """``selection = {differing = 1000}`` on a 24-item top-k: every item may be another, so
    any program passes. The "cannot fail" check judges PyTorch's outputs on another input
    the same way, as a selection, and fails the case (it passed before: that check compared
    element by element)."""
    shutil.copy(DATA / "tiny_models.py", tmp_path / "tiny_models.py")
    (tmp_path / "loose.toml").write_text(
        tiny_case(model="tiny_models:topk_head", tolerance=(1e-4, 1e-4))
        + SELECTION.format(name="detections", differing=1000))
    code, out = run_cli(["run", str(tmp_path), "--no-cache"]).both()
    assert code == ExitCode.CHECK_FAILED, out
    assert "numerics cannot fail" in out, out
