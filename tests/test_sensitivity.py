"""Numerics that can fail: a comparison whose outputs ignore the input is not a pass."""

from __future__ import annotations

import pytest

from tests.conftest import by_case, run_cli

pytestmark = pytest.mark.compile

DEEP = """model = "tiny_models:deep_bn"
targets = ["llvm"]
{extra}
[[inputs]]
name = "x"
shape = [2, 3, 8, 8]
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
[budget]
layout_transforms = 1
"""


def _numerics(write_case, tmp_path, extra: str):
    from junitparser import JUnitXml

    path = write_case(DEEP.format(extra=extra), "deep.toml")
    junit = tmp_path / "r.xml"
    # in this process: the verdicts are what is tested, not the case processes (a zygote
    # each was about 10 s of the suite)
    res = run_cli(["run", str(path), "--no-cache", "--no-isolation", "--junit", str(junit)])
    return res, by_case(JUnitXml.fromfile(str(junit)))["deep"]["numerics"]


def test_output_that_ignores_the_input_fails_numerics(write_case, tmp_path):
    res, tc = _numerics(write_case, tmp_path, "")
    assert res.code == 1, res.out
    assert tc.result and tc.result[0].type == "InsensitiveOutput", tc.result
    message = tc.result[0].message
    assert "numerics cannot fail: output 0 changes by RMS" in message
    assert "a program that ignored its input would pass" in message
    assert 'weights = "calibrated"' in message


def test_warn_keeps_it_passing_and_says_so(write_case, tmp_path):
    res, tc = _numerics(write_case, tmp_path, 'input_sensitivity = "warn"')
    assert res.code == 0, res.out
    assert not tc.result
    body = tc.system_out or ""
    assert "output 0 changes by RMS" in body and 'hint: weights = "calibrated"' in body, body


def test_calibrated_weights_keep_the_signal(write_case, tmp_path):
    """BatchNorm statistics recomputed on random inputs: the same net's output depends on its
    input, and numerics passes for real."""
    res, tc = _numerics(write_case, tmp_path, 'weights = "calibrated"')
    assert res.code == 0, res.out
    assert not tc.result, tc.result
