"""`cl_validate.ir.is_float` / `float_typed`: the one spelling of "a floating-point tensor"
the passes share (bfloat16 and the float8 kinds included, integers and booleans not)."""

from __future__ import annotations

import pytest
from tvm import relax

from cl_validate.ir import float_typed, is_float


@pytest.mark.parametrize("dtype, floating", [
    ("float16", True), ("float32", True), ("float64", True), ("bfloat16", True),
    ("float8_e4m3fn", True), ("int8", False), ("uint8", False), ("int64", False),
    ("bool", False),
])
def test_float_dtypes_by_tvms_names(dtype: str, floating: bool) -> None:
    assert is_float(dtype) is floating
    assert float_typed(relax.Var("x", relax.TensorType([2, 3], dtype))) is floating


def test_what_is_not_a_tensor_is_not_float() -> None:
    assert not float_typed(relax.Var("s", relax.ShapeType(ndim=2)))
    assert not float_typed(relax.Var("t", relax.TupleType([relax.TensorType([2], "float32")])))
    assert not float_typed(None)
