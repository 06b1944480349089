"""Seeded inputs and output handling."""

from __future__ import annotations

import numpy as np

from cl_validate.session.execute import flatten_outputs
from cl_validate.session.inputs import make_inputs
from cl_validate.spec import load_case
from tests.conftest import MINIMAL


def test_inputs_are_seeded_and_in_range(write_case):
    text = MINIMAL.replace('name = "x"', 'name = "x"\nrange = [2.0, 3.0]') + \
        '\n[[inputs]]\nname = "ids"\nshape = [4]\ndtype = "int64"\nrange = [0, 9]\n'
    case = load_case(write_case(text))
    a, b = make_inputs(case), make_inputs(case)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert a[0].dtype == np.float32 and a[0].shape == (1, 3, 16, 16)
    assert a[0].min() >= 2.0 and a[0].max() <= 3.0
    assert a[1].dtype == np.int64 and a[1].min() >= 0 and a[1].max() <= 9


def test_seed_changes_inputs(write_case):
    a = make_inputs(load_case(write_case(MINIMAL, "a.toml")))
    b = make_inputs(load_case(write_case("seed = 7\n" + MINIMAL, "b.toml")))
    assert not np.array_equal(a[0], b[0])


def test_flatten_nested_outputs():
    assert flatten_outputs((1, [2, (3,)], 4)) == [1, 2, 3, 4]
