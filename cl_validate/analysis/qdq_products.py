"""The products of a quantized program, and which compute in integers.

A product is a convolution (1-D to 3-D, transposed too) or a matmul; it is a *QDQ product*
when an operand is a dequantize of int8/uint8 codes (through views: a permute, a reshape, a
pad, a slice), as PT2E leaves every quantized Conv and Linear. It computes in integers when
its data is the codes themselves (what ``integer_compute`` makes of it). Read off the
program after its layout stages and before its weights are folded (a weight's dequantize is
still there to see), so a product whose data is float but whose weight is quantized counts
too. Target-independent: the same on every target.
"""

from __future__ import annotations

import tvm
from tvm import relax

from cl_validate.compile.program import Compiled, op_level_stage
from cl_validate.ir import bindings, op_name, tensor_type
from cl_validate.measurements.kernel_list import QdqProduct

#: The products, by Relax op
PRODUCTS = frozenset(f"relax.{n}" for n in (
    "nn.conv1d nn.conv2d nn.conv3d nn.conv1d_transpose nn.conv2d_transpose matmul").split())
#: Ops that carry dequantized values on unchanged (moved, padded, sliced, viewed)
_CARRY = frozenset(f"relax.{n}" for n in (
    "permute_dims reshape expand_dims squeeze broadcast_to nn.pad strided_slice flatten"
).split())
_DEQUANTIZE = "relax.dequantize"
_CODES = ("int8", "uint8")


def _dtype(e: relax.Expr) -> str:
    ty = tensor_type(e)
    return str(ty.dtype) if ty is not None else ""


def _dequantized(e: relax.Expr, values: dict[relax.Var, relax.Expr]) -> bool:
    """`e` is a dequantize of integer codes, through ops that carry values on."""
    for _ in range(len(values) + 1):  # each step goes to an earlier binding
        value = values.get(e) if isinstance(e, relax.Var) else None
        name = op_name(value)
        if name == _DEQUANTIZE:
            return _dtype(value.args[0]) in _CODES  # type: ignore[union-attr]
        if name not in _CARRY:
            return False
        e = value.args[0]  # type: ignore[union-attr]
    return False


def program_products(mod: tvm.IRModule) -> tuple[QdqProduct, ...]:
    """The QDQ products of ``main``, in program order."""
    values = {b.var: b.value for b in bindings(mod["main"]) if isinstance(b, relax.VarBinding)}
    out = []
    for var, value in values.items():
        name = op_name(value)
        if name not in PRODUCTS:
            continue
        assert isinstance(value, relax.Call)
        short = str(name).removeprefix("relax.").removeprefix("nn.")
        if _dtype(value.args[0]) in _CODES:
            out.append(QdqProduct(short, True, var.name))
        elif any(_dequantized(a, values) for a in value.args[:2]):
            out.append(QdqProduct(short, False, var.name))
    return tuple(out)


def qdq_products(compiled: Compiled) -> tuple[QdqProduct, ...]:
    """The QDQ products of `compiled`, read where its weights are not folded yet (the stage
    before ``fold_params``; a pipeline without one: its op-level stages' last)."""
    names = [s.name for s in compiled.stages]
    if "fold_params" in names and names.index("fold_params") > 0:
        return program_products(compiled.stages[names.index("fold_params") - 1].mod)
    return program_products(compiled.stage(op_level_stage(compiled)).mod)
