"""On a CPU: a fused kernel's elementwise steps computed in one loop nest, not one each.

TVM's CPU backend applies no schedule: a fused PrimFunc keeps one loop nest per op, each
writing a whole intermediate buffer the next one reads back (a quantized convolution's
epilogue: dequantize, add the bias, ReLU, scale, quantize — five nests, four buffers the size
of the output). Every nest is code LLVM optimizes and emits on its own: in a ResNet-18 such
epilogues are about half of the machine code made at the program's first call, and the
buffers are memory traffic at run time.

`inline_chains` inlines a spatial step into the one step that reads it, where that costs
nothing again: the reader is itself spatial (a reduction such as a convolution keeps reading
a materialized input: inlined, its inner loop would recompute a pad or a cast per
multiply-add), reads the step's buffer once per element it computes, and computes no more
elements than the step did (a broadcast would recompute it). The arithmetic is the same ops
in the same order on the same float32 values, so the outputs are bit for bit those of the
unfused nests (tests/test_cpu_chains.py); only the stores and loads between them go. (On a
target with fused multiply-add, an ``-mcpu`` that has FMA or arm64, LLVM may contract a
multiply and an add that were two nests into one FMA, rounded once, as TVM lets it do inside
any nest.) The runtime transforms the kernel list counts are unchanged (it reads the fused
Relax functions); a kernel that only copied its input through views (a reshape, an identity
broadcast, a reshape) is, as one nest, a view that TVM's ``RewriteDataflowReshape`` makes no
kernel at all. The ``nhwc-plain`` baseline leaves its kernels as TVM's backend does.

Attention kernels keep their own loop order (`cl_validate.compile.attention`), and a GPU's
kernels are dlight's (`cl_validate.compile.schedule`), which inlines on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tvm
from tvm import s_tir, tirx
from tvm.ir.expr import Expr, TensorLoad
from tvm.sym import Analyzer

from cl_validate.compile.attention import ATTENTION_ATTR


def inline_chains(mod: tvm.IRModule) -> tvm.IRModule:
    """Every PrimFunc of `mod` with more than one step, its elementwise chains inlined."""
    return map_kernels(mod, _inlined)


def map_kernels(mod: tvm.IRModule, rewrite: Callable[[tirx.PrimFunc], tirx.PrimFunc]
                ) -> tvm.IRModule:
    """`mod` with `rewrite` applied to every PrimFunc but the attention kernels, which keep
    their own loop order."""
    funcs = {}
    for gv, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc) and ATTENTION_ATTR not in (func.attrs or {}):
            func = rewrite(func)
        funcs[gv] = func
    out = tvm.IRModule(funcs)
    return out.with_attrs(mod.attrs) if mod.attrs is not None else out


def _inlined(func: tirx.PrimFunc) -> tirx.PrimFunc:
    sch = s_tir.Schedule(func)
    try:
        root = sch.get_sblock("root")
    except (RuntimeError, ValueError):  # no blocks (written by hand): as it is
        return func
    if len(sch.get_child_blocks(root)) < 2:
        return func
    refused: set[str] = set()
    progress = True
    while progress:
        progress = False
        for block in sch.get_child_blocks(root):
            name = sch.get(block).name_hint
            if name in refused or not _inlinable(sch, block):
                continue
            try:
                sch.compute_inline(block)
            except (RuntimeError, ValueError):  # TVM's ScheduleError is a RuntimeError
                refused.add(name)  # a function's output, an opaque access: left as it is
                continue
            progress = True
            break
    return sch.mod["main"].with_attrs(dict(func.attrs)) if func.attrs else sch.mod["main"]


def _spatial(block: Any) -> bool:
    return block.init is None and all(
        v.iter_type == tirx.IterVar.DataPar for v in block.iter_vars)


def _elements(block: Any) -> Any:
    """How many elements `block` computes (an expression where extents are symbolic)."""
    total = tirx.const(1, "int64")
    for v in block.iter_vars:
        total = total * v.dom.extent.astype("int64")
    return total


def _reads_of(expr: Any, buffer: Any) -> int:
    """How many loads of `buffer` the expression `expr` holds (TVM 0.27 has no TIR visitor
    in Python: its fields walked by name; a node with none of them holds no load)."""
    if isinstance(expr, TensorLoad):
        own = 1 if getattr(expr.source, "buffer", expr.source).same_as(buffer) else 0
        return own + sum(_reads_of(i, buffer) for i in expr.indices)
    count = 0
    for field in ("a", "b", "value", "condition", "true_value", "false_value", "body"):
        child = getattr(expr, field, None)
        if isinstance(child, Expr):
            count += _reads_of(child, buffer)
    return count + sum(_reads_of(a, buffer) for a in getattr(expr, "args", ()) or ()
                       if isinstance(a, Expr))


def _inlinable(sch: s_tir.Schedule, rv: Any) -> bool:
    block = sch.get(rv)
    if not _spatial(block) or len(block.writes) != 1 or not isinstance(
            block.body, tirx.BufferStore):
        return False
    consumers = sch.get_consumers(rv)
    if len(consumers) != 1:
        return False
    reader = sch.get(consumers[0])
    if not _spatial(reader) or not isinstance(reader.body, tirx.BufferStore):
        return False
    return _reads_of(reader.body.value, block.body.buffer) == 1 and Analyzer().can_prove(
        _elements(reader) <= _elements(block))
