"""A per-tensor quantize-dequantize pair that cuts a movement (after a concat or a permute,
before reshapes and permutes) goes after the movement: the same values (per tensor, the
same codes wherever they stand), one chain for the passes that fold movement. A pair after
any other op, a pair read twice, and a per-channel pair stay where they are. (The quantized
ShuffleNet unit end to end: tests/test_quant.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from cl_validate.compile.passes.quantize_pairs import sink_quantize_pairs
from cl_validate.ir import bindings, op_name

pytestmark = pytest.mark.compile

_F32 = "float32"


def _pair(bb: relax.BlockBuilder, x: relax.Expr, scale: np.ndarray, zero: np.ndarray,
          axis: int = -1) -> relax.Expr:
    s, z = relax.const(scale, _F32), relax.const(zero, "int8")
    q = bb.emit(relax.op.quantize(x, s, z, axis=axis, out_dtype="int8"))
    return bb.emit(relax.op.dequantize(q, s, z, axis=axis, out_dtype=_F32))


def _shuffle(first: str = "concat", per_channel: bool = False, read_twice: bool = False
             ) -> tvm.IRModule:
    """(1, 4, 4, 6) parts -> `first` -> pair -> reshape -> permute -> reshape (a shuffle)."""
    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((1, 4, 4, 6), _F32))
    b = relax.Var("b", relax.TensorType((1, 4, 4, 6), _F32))
    with bb.function("main", [a, b]):
        with bb.dataflow():
            if first == "concat":
                x = bb.emit(relax.op.concat([a, b], axis=3))
            elif first == "permute":
                x = bb.emit(relax.op.permute_dims(relax.op.concat([a, b], axis=3),
                                                  [0, 3, 1, 2]))
                x = bb.emit(relax.op.permute_dims(x, [0, 2, 3, 1]))
            else:  # an op that is no movement
                x = bb.emit(relax.op.multiply(relax.op.concat([a, b], axis=3),
                                              relax.const(1.5, _F32)))
            scale = np.linspace(0.02, 0.05, 12).astype(_F32) if per_channel else \
                np.array(0.03, _F32)
            zero = np.zeros(12, "int8") if per_channel else np.array(3, "int8")
            d = _pair(bb, x, scale, zero, axis=3 if per_channel else -1)
            r = bb.emit(relax.op.reshape(d, [1, 4, 4, 2, 6]))
            p = bb.emit(relax.op.permute_dims(r, [0, 1, 2, 4, 3]))
            out = bb.emit(relax.op.reshape(p, [1, 4, 4, 12]))
            if read_twice:
                out = bb.emit(relax.op.add(out, relax.op.reshape(d, [1, 4, 4, 12])))
            gv = bb.emit_output(out)
        bb.emit_func_output(gv)
    return bb.get()


def _run(mod: tvm.IRModule, *args: np.ndarray) -> np.ndarray:
    ex = tvm.compile(relax.transform.LegalizeOps()(mod), target=tvm.target.Target("llvm"))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(x) for x in args]).numpy()


def _ops(func: relax.Function) -> list[str]:
    return [name for b in bindings(func) if (name := op_name(b.value))]


@pytest.mark.parametrize("first", ["concat", "permute"])
def test_the_pair_goes_after_the_movement_and_the_values_are_the_same(first):
    mod = _shuffle(first)
    moved = tvm.IRModule({"main": sink_quantize_pairs(mod["main"])})
    ops = _ops(moved["main"])
    assert ops[-2:] == ["relax.quantize", "relax.dequantize"], ops
    i = ops.index("relax.quantize")
    assert ops[i - 3:i] == ["relax.reshape", "relax.permute_dims", "relax.reshape"], ops
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((1, 4, 4, 6)).astype(_F32) for _ in range(2))
    np.testing.assert_array_equal(_run(moved, a, b), _run(mod, a, b))


@pytest.mark.parametrize("kind", [{"first": "multiply"}, {"per_channel": True},
                                  {"read_twice": True}])
def test_a_pair_that_cuts_no_movement_or_is_not_per_tensor_or_read_twice_stays(kind):
    mod = _shuffle(**kind)
    assert sink_quantize_pairs(mod["main"]).same_as(mod["main"])
