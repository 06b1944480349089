"""A strided product's index arithmetic: the steps of the chains it reads and writes
through (permute, view, broadcast; after the matmul also an elementwise epilogue), where an
element of its result reads each operand, its TE compute, and whether it walks memory as the
matmul it replaces did (`walk_problem`). `strided_products` finds the products and rewrites
the program with them; this is what each one computes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import tvm
from tvm import relax, te, tirx
from tvm.sym import Analyzer

from cl_validate.ir import known_shape, op_name, permute_axes, tensor_type


@dataclass(frozen=True)
class Step:
    """One op of a chain: ``permute`` (`axes`), ``view`` or ``broadcast``; after the matmul
    also ``epilogue``: `op` (add, subtract, multiply, divide) with a constant, elementwise,
    the constant on the left when `const_first`."""

    kind: str
    src: tuple[int, ...]
    dst: tuple[int, ...]
    axes: tuple[int, ...] = ()
    op: str = ""
    const_first: bool = False

    def back(self, idx: Sequence[Any], ana: Any) -> list[Any]:
        """The index of the op's input holding the value at `idx` of its output."""
        if self.kind == "epilogue":
            return list(idx)
        if self.kind == "permute":
            out: list[Any] = [0] * len(self.src)
            for a, p in enumerate(self.axes):
                out[p] = idx[a]
            return out
        if self.kind == "broadcast":
            off = len(self.dst) - len(self.src)
            return [0 if n == 1 and self.dst[a + off] != 1 else idx[a + off]
                    for a, n in enumerate(self.src)]
        flat = _flat(idx, self.dst)
        res, stride = [], 1
        for n in reversed(self.src):
            res.append(ana.simplify(tirx.floormod(tirx.floordiv(flat, stride), n)))
            stride *= n
        return res[::-1]


def chain_step(call: relax.Call) -> Step | None:
    src, dst = known_shape(call.args[0]), known_shape(call)
    if src is None or dst is None:
        return None
    name = op_name(call)
    if name == "relax.permute_dims":
        axes = permute_axes(call)
        return None if axes is None else Step("permute", src, dst, tuple(axes))
    return Step("broadcast" if name == "relax.broadcast_to" else "view", src, dst)


@dataclass
class Product:
    out_shape: tuple[int, ...]  # the matmul's result, as TVM inferred it
    final: relax.Var  # the var the product binds: the end of the chain after the matmul
    sources: tuple[relax.Expr, relax.Expr]
    reads: tuple[tuple[Step, ...], tuple[Step, ...]]
    writes: tuple[Step, ...]
    absorbed: tuple[relax.Var, ...]  # bindings the product replaces (all but `final`)
    constants: tuple[relax.Expr, ...]  # of the epilogue steps of `writes`, in order
    shapes: tuple[tuple[int, ...], tuple[int, ...]]  # the matmul's operands
    dtype: str  # the matmul's result
    name: str = "matmul"  # the op it computes: "matmul", "conv2d" or "conv1d" (pointwise)

    def compute(self) -> Callable[..., te.Tensor]:
        return product_compute(self)

    def inputs(self) -> list[relax.Expr]:
        return [*self.sources, *self.constants]

    def prim_func(self) -> tirx.PrimFunc:
        """The product alone, over placeholders of its inputs (what a rule is asked)."""
        args = [te.placeholder(known_shape(s), str(getattr(tensor_type(s), "dtype", "")),
                               name=f"in{i}") for i, s in enumerate(self.inputs())]
        return te.create_prim_func([*args, self.compute()(*args)])


def _walk(steps: Sequence[Step], idx: Sequence[Any], ana: Any) -> list[Any]:
    """Through `steps` (source to end) backwards: the source index of the end's `idx`."""
    out = list(idx)
    for step in reversed(steps):
        out = step.back(out, ana)
    return out


def _indices(p: Product, idx: Sequence[Any], k: Any, ana: Any) -> tuple[list[Any], list[Any]]:
    """The indices of the two sources that the product's output `idx` reads at depth `k`."""
    m = _walk(p.writes, idx, ana)
    batch = m[:-2]

    def operand(shape: tuple[int, ...], rows: Any, cols: Any) -> list[Any]:
        own = batch[len(batch) - (len(shape) - 2):] if len(shape) > 2 else []
        return [0 if n == 1 else i for i, n in zip(own, shape[:-2], strict=True)] + [rows, cols]

    return (_walk(p.reads[0], operand(p.shapes[0], m[-2], k), ana),
            _walk(p.reads[1], operand(p.shapes[1], k, m[-1]), ana))


def _final_shape(p: Product) -> tuple[int, ...]:
    return p.writes[-1].dst if p.writes else p.out_shape


EPILOGUE_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "relax.add": lambda x, y: x + y, "relax.subtract": lambda x, y: x - y,
    "relax.multiply": lambda x, y: x * y, "relax.divide": lambda x, y: x / y}


#: The `Step.op` prefix of a cast between float dtypes (a half model's product rounded to its
#: dtype: TVM imports it with a float32 result), applied in the epilogue as well
CAST = "astype:"


def _bound(idx: Sequence[Any], shape: Sequence[int]) -> Any:
    ana = Analyzer()
    for v, n in zip(idx, shape, strict=True):
        ana.bind(v, tvm.ir.Range(0, n))
    return ana


def product_compute(p: Product) -> Callable[..., te.Tensor]:
    """The product as a TE compute over the two chain sources (and the epilogue's constants:
    a second stage, elementwise, in the same index space)."""
    final, depth = _final_shape(p), p.shapes[0][-1]

    def compute(a: te.Tensor, b: te.Tensor, *constants: te.Tensor) -> te.Tensor:
        def body(*idx: Any) -> Any:
            ana = _bound(idx, final)
            k = te.reduce_axis((0, depth), "k")
            ana.bind(k.var, tvm.ir.Range(0, depth))
            ia, ib = _indices(p, idx, k.var, ana)
            return te.sum(a[tuple(ia)].astype(p.dtype) * b[tuple(ib)].astype(p.dtype), axis=k)

        product = te.compute(final, body, name="matmul")
        if not any(step.kind == "epilogue" for step in p.writes):
            return product

        def epilogue(*idx: Any) -> Any:
            ana = _bound(idx, final)
            applied, at = [], list(idx)
            for step in reversed(p.writes):  # each epilogue's index, matmul side last
                if step.kind == "epilogue":
                    applied.append((step, at))
                at = step.back(at, ana)
            value, left = product[idx], iter(constants)
            for step, at in reversed(applied):
                if step.op.startswith(CAST):
                    value = value.astype(step.op.removeprefix(CAST))
                    continue
                const = next(left)
                c = const[tuple(Step("broadcast", tuple(int(d) for d in const.shape),
                                      step.dst).back(at, ana))]
                value = EPILOGUE_OPS[step.op](*((c, value) if step.const_first else
                                                 (value, c)))
            return value

        return te.compute(final, epilogue, name="matmul_epilogue")

    return compute


def _uses(expr: Any, var: Any) -> bool:
    return not isinstance(expr, int) and \
        any(v.same_as(var) for v in tirx.analysis.undefined_vars(expr))


class Problem(NamedTuple):
    """Why a product is declined (`kind`: ``"jumps"``, ``"strided"`` or ``"write"``, the
    condition of `walk_problem`'s rule it breaks; ``"shape"``, a source's shape unknown;
    ``"schedule"``, refused by a GPU rule), and `why`, as a reader is told it."""

    kind: str
    why: str


def _walk_problem(p: Product) -> Problem | None:
    """`walk_problem`, computed."""
    final, depth = _final_shape(p), p.shapes[0][-1]
    idx = [tirx.Var(f"i{a}", "int64") for a in range(len(final))]
    ana = _bound(idx, final)
    k = tirx.Var("k", "int64")
    ana.bind(k, tvm.ir.Range(0, depth))
    at = [_indices(p, idx, tirx.const(d, "int64"), ana) for d in (0, 1)]
    strides = []
    for side, index, source, zero, one in zip(_SIDES, _indices(p, idx, k, ana), p.sources,
                                              *at, strict=True):
        shape = known_shape(source)
        if shape is None:
            return Problem("shape", f"the shape of its {side} operand is not known")
        offset = [_flat(x, shape) for x in (index, zero, one)]
        stride = ana.simplify(offset[2] - offset[1])
        if not isinstance(stride, tirx.IntImm) or stride.value == 0 or \
                not ana.can_prove_equal(offset[0] - offset[1], k * stride.value):
            return Problem("jumps", f"its sum over {depth} would read the {side} operand in "
                                    "jumps (a depth merged from axes apart in memory)")
        strides.append(abs(stride.value))
    if 1 not in strides and depth > STRIDED_DEPTH:
        return Problem("strided", f"its sum over {depth} (> {STRIDED_DEPTH}) would read both "
                                  "operands strided, neither contiguous")
    if not p.writes:
        return None
    m, inner = _walk(p.writes, idx, ana), idx[-1]
    rest = _walk(p.writes, [*idx[:-1], tirx.const(0, "int64")], ana)  # inner at 0
    small = int(np.prod(p.shapes[0])) <= int(np.prod(p.shapes[1]))  # rows' operand
    for axis in (-1, -2) if small else (-1,):
        if not any(_uses(e, inner) for a, e in enumerate(m) if a != len(m) + axis) and \
                ana.can_prove_equal(m[axis] - rest[axis], inner):
            return None
    if not all(_affine(p.writes, idx, ana, a) for a in (-2, -1)):
        return Problem("jumps", "its rows or columns would be written in jumps (an axis of "
                                "the result split apart in memory)")
    if small:
        return Problem("write", "it would write its result neither along its columns nor "
                                "along its rows")
    return Problem("write", "it would write its result down its rows, sweeping the larger "
                            "(rows') operand again for each column")


def _affine(writes: Sequence[Step], idx: Sequence[Any], ana: Any, axis: int) -> bool:
    """Whether the result's `axis` index, as the writes reach it from the final tensor's
    `idx`, is a constant plus a constant multiple of each of `idx` (no floordiv or floormod
    of a merged index: the write moves that axis whole, however strided)."""
    at = _walk(writes, idx, ana)[axis]
    for a, v in enumerate(idx):
        ends = [_walk(writes, [*idx[:a], tirx.const(d, "int64"), *idx[a + 1:]], ana)[axis]
                for d in (0, 1)]
        step = ana.simplify(ends[1] - ends[0])
        if not isinstance(step, tirx.IntImm) or not ana.can_prove_equal(at - ends[0],
                                                                          v * step.value):
            return False
    return True


#: The product's operands, as `walk_problem` names them
_SIDES = ("rows'", "columns'")


#: The longest sum a product reads strided through both operands (`walk_problem`)
STRIDED_DEPTH = 128
_WALKS: dict[Any, Problem | None] = {}  # SinkPermutes asks `find` about the same products again


def walk_problem(p: Product) -> Problem | None:
    """Which condition of the walks-one-axis rule the product breaks, and why as a reader
    is told it (the kernel list says why a transpose the product declined stays); None
    when it breaks none: the product walks memory the way the matmul it replaces does,
    which on llvm (no schedule: the loops as written) decides its speed:

    - the summed depth is walked with a fixed stride through each source: one axis of it,
      or axes a view merged that lie next to each other in memory (a channels-last map's H
      and W read as its tokens); a depth merged from axes apart in memory would be read in
      jumps (``k // 8``, ``k % 8``: XCiT's projection, 5% slower than with its transpose);
    - and contiguously through one source at least, as the matmul reads its rows' operand,
      where the sum is longer than `STRIDED_DEPTH`: with both strided each term touches two
      new cache lines, and a long sum's lines no longer stay in cache from one column to
      the next (Restormer's ``q @ kᵀ`` over 16384 channels-last tokens took 20.4 ms against
      13.2 ms for the matmul with one operand contiguous and 0.65 ms for the transpose that
      made it so; `benchmarks/strided_depth.py` measures the crossing);
    - the result is written along the matmul's columns, or along its rows where the rows'
      operand is no larger than the columns' (the loops sweep it again for each column:
      XCiT's probabilities times v, written back to tokens); a pointwise convolution writing
      an NCHW output down its columns (its input larger than its weight) took 2.2x the time
      of the convolution and its transpose (BENCHMARKS.md).
    """
    key = (STRIDED_DEPTH, p.name, p.out_shape, p.reads, p.writes, p.shapes,
           tuple(known_shape(s) for s in p.sources))  # all it depends on
    if key not in _WALKS:
        if len(_WALKS) > 4096:
            _WALKS.clear()
        _WALKS[key] = _walk_problem(p)
    return _WALKS[key]


def _flat(index: Sequence[Any], shape: Sequence[int]) -> Any:
    """The offset of `index` in a row-major tensor of `shape`."""
    flat: Any = tirx.const(0, "int64")
    for i, n in zip(index, shape, strict=True):
        flat = flat * n + i
    return flat


__all__ = ["CAST", "EPILOGUE_OPS", "Problem", "Product", "Step", "chain_step", "product_compute",
           "walk_problem"]
