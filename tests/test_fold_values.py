"""The weights' transforms in numpy (`cl_validate.compile.fold_values`): every op it computes
gives TVM's built kernel's values bit for bit, on the values that break implementations
(signed zeros, infinities, NaN, subnormals, overflow); every other op is left to TVM; and a
model's folded constants are the same either way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

from cl_validate.compile import fold
from cl_validate.compile.fold_values import evaluate, identical
from cl_validate.ir import bindings, is_tensor_constant

NAME = "main_transform_params"


def _transform(op: Callable[..., Any], arrays: list[np.ndarray]) -> tvm.IRModule:
    """A function as LiftTransformParams writes one: the weights in one tuple parameter, `op`
    on them, its value in a tuple out."""
    bb = relax.BlockBuilder()
    weights = relax.Var("params", relax.TupleType(
        [relax.TensorType(a.shape, str(a.dtype)) for a in arrays]))
    with bb.function(NAME, [weights]):
        with bb.dataflow():
            parts = [bb.emit(relax.TupleGetItem(weights, i)) for i in range(len(arrays))]
            out = bb.emit(op(*parts))
            gv = bb.emit_output(relax.Tuple([out]))
        bb.emit_func_output(gv)
    return bb.get()


def _hard(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Random values of `dtype` with the ones implementations get wrong mixed in."""
    rng = np.random.default_rng(seed)
    if dtype.startswith("float"):
        info = np.finfo(dtype)
        special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, info.smallest_subnormal,
                            -info.smallest_subnormal, info.tiny, info.max, -info.max, 1.0,
                            -1.0, 3.0, 1e-3], dtype=dtype)
        values = (rng.standard_normal(int(np.prod(shape))) * 10).astype(dtype)
    else:
        info = np.iinfo(dtype)
        special = np.array([0, 1, info.max, info.min, -1 if info.min < 0 else 2], dtype=dtype)
        values = rng.integers(info.min, info.max, int(np.prod(shape)), endpoint=True,
                              dtype=dtype)
    values[:special.size] = special[:values.size]
    return rng.permutation(values).reshape(shape)


def _both(op: Callable[..., Any], arrays: list[np.ndarray]) -> tuple[Any, np.ndarray]:
    mod = _transform(op, arrays)
    mine = evaluate(mod[NAME], arrays)
    tvms = fold.built_transform(mod, NAME, [tvm.runtime.tensor(a) for a in arrays])
    return mine, tvms[0].numpy()


FLOATS = ("float32", "float16", "float64")
BINARY = {"add": relax.op.add, "subtract": relax.op.subtract,
          "multiply": relax.op.multiply, "divide": relax.op.divide}


@pytest.mark.compile
@pytest.mark.parametrize("dtype", (*FLOATS, "int8", "int32", "uint8"))
@pytest.mark.parametrize("name", sorted(BINARY))
def test_arithmetic_is_tvms_to_the_bit(name, dtype):
    """Each pair of the hard values, and a broadcast of a per-channel vector (BatchNorm's)."""
    if name == "divide" and not dtype.startswith("float"):
        a = _hard(dtype, (4,), 0)
        assert evaluate(_transform(BINARY[name], [a, a])[NAME], [a, a]) is None
        return
    a, b = _hard(dtype, (16, 16), 1), _hard(dtype, (16, 16), 2)
    a = np.repeat(a.reshape(-1)[:16], 16).reshape(16, 16)  # every value against every value
    b = np.tile(b.reshape(-1)[:16], 16).reshape(16, 16)
    mine, tvms = _both(BINARY[name], [a, b])
    assert mine is not None and identical(mine[0], tvms)
    mine, tvms = _both(BINARY[name], [_hard(dtype, (2, 3, 4, 5), 3), _hard(dtype, (3, 1, 1), 4)])
    assert mine is not None and identical(mine[0], tvms)


@pytest.mark.compile
@pytest.mark.parametrize("dtype", FLOATS)
def test_square_root_and_negation_are_tvms_to_the_bit(dtype):
    x = _hard(dtype, (64,), 5)
    for op in (relax.op.sqrt, relax.op.negative):
        mine, tvms = _both(op, [x])
        assert mine is not None and identical(mine[0], tvms), op
    # BatchNorm's scale as the decomposition writes it
    var, gamma = np.abs(_hard(dtype, (8,), 6)), _hard(dtype, (8,), 7)
    eps = relax.const(1e-5, dtype)
    mine, tvms = _both(lambda v, g: relax.op.divide(g, relax.op.sqrt(relax.op.add(v, eps))),
                       [var, gamma])
    assert mine is not None and identical(mine[0], tvms)


@pytest.mark.compile
@pytest.mark.parametrize(("src", "dst"), [("float32", "float16"), ("float16", "float32"),
                                          ("float64", "float32"), ("int32", "float32"),
                                          ("int64", "float16"), ("int32", "int8"),
                                          ("uint8", "int32"), ("int8", "uint8")])
def test_casts_are_tvms_to_the_bit(src, dst):
    x = _hard(src, (64,), 8)
    mine, tvms = _both(lambda v: relax.op.astype(v, dst), [x])
    assert mine is not None and identical(mine[0], tvms)


@pytest.mark.compile
def test_movements_are_tvms():
    x = _hard("float32", (2, 3, 4), 9)
    y = _hard("float32", (2, 1, 4), 10)
    ops = [lambda v: relax.op.permute_dims(v, [2, 0, 1]), lambda v: relax.op.permute_dims(v),
           lambda v: relax.op.reshape(v, (6, 4)), lambda v: relax.op.expand_dims(v, [0, -1]),
           lambda v: relax.op.broadcast_to(relax.op.reshape(v, (2, 1, 3, 4)), (2, 5, 3, 4))]
    for op in ops:
        mine, tvms = _both(op, [x])
        assert mine is not None and identical(mine[0], tvms)
    mine, tvms = _both(lambda v: relax.op.squeeze(v, [1]), [y])
    assert mine is not None and identical(mine[0], tvms)
    mine, tvms = _both(lambda a, b: relax.op.concat([a, b], axis=1), [x, y])
    assert mine is not None and identical(mine[0], tvms)


@pytest.mark.parametrize("op", [relax.op.exp, relax.op.tanh,
                                lambda v: relax.op.power(v, v),
                                lambda v: relax.op.astype(v, "int32"),
                                lambda v: relax.op.astype(v, "bfloat16")])
def test_ops_not_exact_in_numpy_are_left_to_tvm(op):
    """Each library rounds an exponential or a power its own way; a float to an integer is
    undefined out of range; bfloat16 is not a numpy dtype: `evaluate` declines them (TVM
    builds the transform)."""
    x = _hard("float32", (8,), 11)
    assert evaluate(_transform(op, [x])[NAME], [x]) is None


def _constants(mod: tvm.IRModule) -> list[np.ndarray]:
    out: list[np.ndarray] = []

    def visit(expr: Any) -> None:
        if is_tensor_constant(expr):
            out.append(expr.value.numpy())

    for b in bindings(mod["main"]):
        relax.analysis.post_order_visit(b.value, visit)
    return out


@pytest.mark.compile
def test_a_models_folded_constants_are_the_same_either_way(monkeypatch):
    """A convolution with a BatchNorm and a Linear in NHWC: the weights' permutes and the
    BatchNorm's scale are numpy's here, and bit for bit what the built transform gives."""
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.spec import load_case

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.bn(self.conv(x)).mean((2, 3)))

    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():
        net.bn.running_var.uniform_(0.5, 2.0)
        net.bn.running_mean.normal_()
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.toml"
        path.write_text('model = "x:y"\n[[inputs]]\nname = "x"\nshape = [1, 3, 8, 8]\n'
                        '[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n')
        case = load_case(path)
    x = torch.randn(1, 3, 8, 8)
    used: list[bool] = []
    real = fold.evaluate

    def spy(func: Any, arrays: Any) -> Any:
        out = real(func, arrays)
        used.append(out is not None)
        return out

    monkeypatch.setattr(fold, "evaluate", spy)
    numpy_route = compile_case(export_and_import(net, case, (x,)), case, "llvm", build=False)
    monkeypatch.setattr(fold, "evaluate", lambda func, arrays: None)
    tvm_route = compile_case(export_and_import(net, case, (x,)), case, "llvm", build=False)
    assert used == [True]
    mine = _constants(numpy_route.stage("fold_params").mod)
    theirs = _constants(tvm_route.stage("fold_params").mod)
    assert len(mine) == len(theirs) >= 3
    assert all(identical(a, b) for a, b in zip(mine, theirs, strict=True))


LOGIC = {"equal": relax.op.equal, "not_equal": relax.op.not_equal, "less": relax.op.less,
         "less_equal": relax.op.less_equal, "greater": relax.op.greater,
         "greater_equal": relax.op.greater_equal}


@pytest.mark.compile
@pytest.mark.parametrize("dtype", ("float32", "int64"))
def test_comparisons_and_masks_are_tvms(dtype):
    """A mask built from constants (a causal mask: comparisons of aranges, and-ed, negated,
    selecting between two values), NaN compared as TVM compares it."""
    a = np.repeat(_hard(dtype, (12,), 12), 12).reshape(12, 12)
    b = np.tile(_hard(dtype, (12,), 13), 12).reshape(12, 12)
    for name, op in LOGIC.items():
        mine, tvms = _both(op, [a, b])
        assert mine is not None and identical(mine[0], tvms), name
    mine, tvms = _both(lambda x, y: relax.op.where(
        relax.op.logical_not(relax.op.logical_and(relax.op.less(x, y), relax.op.equal(x, x))),
        x, y), [a, b])
    assert mine is not None and identical(mine[0], tvms)
    mask = (a > 0)
    mine, tvms = _both(lambda m: relax.op.bitwise_not(m), [mask])
    assert mine is not None and identical(mine[0], tvms)


@pytest.mark.compile
def test_abs_flip_tile_and_repeat_are_tvms():
    """A filter bank computed from constants (flipped, tiled, repeated per channel, its
    distance from a centre)."""
    x = _hard("float32", (3, 4), 14)
    for op in (relax.op.abs, lambda v: relax.op.flip(v, 1), lambda v: relax.op.flip(v, 0),
               lambda v: relax.op.tile(v, [2, 3]), lambda v: relax.op.tile(v, [2, 1, 1]),
               lambda v: relax.op.repeat(v, 3, axis=0), lambda v: relax.op.repeat(v, 2, axis=1),
               lambda v: relax.op.repeat(v, 2), lambda v: relax.op.repeat(v, 2, axis=-1)):
        mine, tvms = _both(op, [x])
        assert mine is not None and identical(mine[0], tvms)


@pytest.mark.compile
@pytest.mark.parametrize("dtype", ("int64", "int32", "uint8"))
def test_integer_division_is_tvms(dtype):
    """A position table's row and column (``i // w``, ``i % w``) on signs of every kind; a zero
    divisor (undefined) and floats are left to TVM."""
    a = _hard(dtype, (64,), 15)
    b = _hard(dtype, (64,), 16)
    b[b == 0] = 3
    for op in (relax.op.floor_divide, relax.op.floor_mod, relax.op.mod):
        mine, tvms = _both(op, [a, b])
        assert mine is not None and identical(mine[0], tvms), op
    b[0] = 0
    assert evaluate(_transform(relax.op.floor_divide, [a, b])[NAME], [a, b]) is None
    x = _hard("float32", (8,), 17)
    assert evaluate(_transform(relax.op.floor_divide, [x, x])[NAME], [x, x]) is None
