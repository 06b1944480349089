"""On x86 without AVX2: an integer convolution's channel sum in chunks, outside the window.

TVM's CPU backend applies no schedule: a quantized convolution keeps TOPI's loop nest, the
window (``ry``, ``rx``) and the input channels (``rc``) summed innermost, ``rc`` last. An
integer sum may be reordered, so LLVM vectorizes the ``rc`` loop (a float sum it may not:
those stay scalar loops) and then unrolls it whole, and the 3x3 window around it: in the
bundled ResNet-18 case's last stage, 3 x 3 x 128 multiply-adds of straight-line vector code.
That code made the integer program's first call (TVM's LLVM module makes its machine code
then) slower than the float QDQ program's, and ran no faster for its size.

`chunk_integer_sums` splits the innermost summed loop into chunks of `CHUNK` elements and
moves the chunk loop outside the other summed loops: LLVM vectorizes a `CHUNK`-long loop per
window position, and the loops around it stay loops. Measured on that kernel (plain llvm):
machine code 0.24 s → 0.064 s, run 126 → 87 µs; BENCHMARKS.md has the whole programs.

Only sums of integers (a block that reduces into an integer buffer by ``+``) are touched:
integer addition is exact in any order, so the outputs are bit for bit the same
(tests/test_integer_chunks.py). A float sum's order is its rounding, which this never
changes. Left alone too: a 1x1 window or a sum with one summed loop (a matmul), where there is
no window to move the chunk loop out of and the split alone made more code (MobileNetV2's
pointwise convolutions), channel counts that are not a multiple of `CHUNK` above it, and
targets with wider vectors or not x86 (`_narrow_x86`).
"""

from __future__ import annotations

import math
from typing import Any

import tvm
from tvm import s_tir, tirx
from tvm.ir.expr import TensorLoad
from tvm.target import codegen

from cl_validate.compile.cpu_chains import map_kernels

#: int8 elements summed per vectorized loop: 32 ran fastest on the kernel above (16: as fast
#: as whole, 64: half the gain in code, slower).
CHUNK = 32


def chunk_integer_sums(mod: tvm.IRModule, target: Any) -> tvm.IRModule:
    """Every PrimFunc of `mod` with its integer window sums chunked (see the module), on an
    x86 `target` of 128-bit vectors; on any other, `mod` as it is."""
    if not _narrow_x86(target):
        return mod
    return map_kernels(mod, _chunked)


def _narrow_x86(target: Any) -> bool:
    """Whether `target` is x86 without AVX2: vectors of 128 bits, as plain ``llvm`` (x86-64
    with SSE2 alone), where the chunks were measured to pay. With AVX-512 named
    (``-mcpu=emeraldrapids``) LLVM's wider vectors want a longer loop: chunks of 32 ran the
    ResNet-18 case 1.37x slower, of 64 1.09x, for no less machine-code time. arm64 was not
    measured. Those are left as TVM makes them."""
    if target.kind.name != "llvm":
        return False
    triple = str(target.attrs.get("mtriple") or codegen.llvm_get_system_triple())
    if not triple.startswith(("x86_64", "i386", "i686")):
        return False
    return "avx2" not in set(codegen.llvm_get_cpu_features(target))


def _chunked(func: tirx.PrimFunc) -> tirx.PrimFunc:
    sch = s_tir.Schedule(func)
    try:
        root = sch.get_sblock("root")
    except (RuntimeError, ValueError):  # no blocks (written by hand): as it is
        return func
    changed = False
    for rv in sch.get_child_blocks(root):
        summed = _summed_loops(sch, rv)
        if summed is None:
            continue
        *window, channels = summed
        outer, inner = sch.split(channels, [None, CHUNK])
        sch.reorder(outer, *window, inner)
        changed = True
    if not changed:
        return func
    return sch.mod["main"].with_attrs(dict(func.attrs)) if func.attrs else sch.mod["main"]


def _summed_loops(sch: s_tir.Schedule, rv: Any) -> list[Any] | None:
    """The loops of block `rv` that it sums over, outermost first, when they are the
    innermost loops of its nest, the block sums integers by ``+``, the last one's extent is
    a multiple of `CHUNK` above it and the others (the window) are more than one iteration;
    else None."""
    block = sch.get(rv)
    if block.init is None or len(block.writes) != 1:
        return None
    if not _integer_sum(block):
        return None
    loops = sch.get_loops(rv)
    if not loops:
        return None
    realize = sch.get(loops[-1]).body
    if not isinstance(realize, s_tir.SBlockRealize) or not realize.block.same_as(block):
        return None  # the block is not the innermost loop's whole body
    reduce = [value for var, value in zip(block.iter_vars, realize.iter_values, strict=True)
              if var.iter_type == tirx.IterVar.CommReduce]
    count = len(reduce)
    if count < 2 or len(loops) < count:
        return None
    summed = loops[-count:]
    for loop, value in zip(summed, reduce, strict=True):
        if not sch.get(loop).loop_var.same_as(value):
            return None  # a summed iterator bound to an expression, or loops reordered
    extents = [sch.get(loop).extent for loop in summed]
    if not all(isinstance(e, tirx.IntImm) for e in extents):
        return None
    *window, channels = (int(e.value) for e in extents)
    if channels <= CHUNK or channels % CHUNK or math.prod(window) < 2:
        return None  # a 1x1 window: no loop to move the chunks out of, only one more nest
    return list(summed)


def _integer_sum(block: Any) -> bool:
    """Whether `block` adds a value into its own integer output (``acc = acc + x``)."""
    store = block.body
    if not isinstance(store, tirx.BufferStore):
        return False
    value = store.value
    return isinstance(value, tirx.Add) and str(value.ty.dtype).startswith(("int", "uint")) and any(
        isinstance(side, TensorLoad) and side.source.same_as(store.buffer)
        for side in (value.a, value.b))
