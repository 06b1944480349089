"""StridedProducts: a matmul that reads its operands, and writes its result, through the
transposes and views around it, so those transposes are no kernels of their own.

TVM's matmul reads contiguous ``(..., M, K)`` and ``(..., K, N)`` operands. Around a matmul
that is not attention (talking heads, cross-covariance attention, a separable attention, an
attention the raise declined) a model splits heads (``view(B, N, H, D).permute(0, 2, 1, 3)``),
transposes k (``k.transpose(-2, -1)``) or merges the heads back
(``.transpose(1, 2).reshape(B, N, C)``): one transpose per operand and one after, each a copy
of the whole tensor. A matmul indexes memory anyway, so here it reads each operand through
its chain of views, permutes and broadcasts (their index arithmetic folded into the read)
and writes its result through the chain after it, in one kernel: what a strided batched GEMM
does. The value is exactly the matmul's: the same products, summed in the same order, in the
same dtype as TVM's own lowering of ``relax.matmul``.

A 1x1 convolution on NHWC data (stride 1, no padding, one group, a constant weight) is a
Linear over the channels and is taken the same way (MobileViT's unfold and fold, a border
after a convolution pinned to NCHW). An elementwise op with a constant between a product
and the permute after it (a bias, a scale, a half model's rounding to its dtype) is applied
in the product's kernel, in a second stage over the same indices.

Taken only where it removes a run-time transpose (a chain holds a permute of a computed
value, and the chain's values have no other reader), with static shapes and float operands
(quantized products are `IntegerCompute`'s, and the float QDQ count's), and where the
product walks memory as the matmul did (`walks_one_axis`). On a GPU only where dlight's
Matmul rule schedules the product, as it schedules the matmul it replaces: a product it
would leave to the generic Fallback (threads bound to loops, nothing shared) keeps its
transposes. Each product's PrimFunc carries `PRODUCT_ATTR`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax, te, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.sym import Analyzer

from cl_validate.compile.passes.gpu_products import gpu_schedules
from cl_validate.ir import (
    bindings,
    is_identity,
    is_weight_derived,
    known_shape,
    op_name,
    permute_axes,
    tensor_type,
    use_sites,
    weight_derived,
)

#: PrimFunc attribute marking a matmul that reads or writes through views and permutes.
PRODUCT_ATTR = "cl_validate.strided_product"
#: TVM's op pattern kind of a matmul (``kOutEWiseFusable``): its elementwise epilogue fuses.
_OUT_ELEMWISE_FUSABLE = 4

VIEWS = ("relax.reshape", "relax.expand_dims", "relax.squeeze")
READS = (*VIEWS, "relax.permute_dims", "relax.broadcast_to")
_WRITES = (*VIEWS, "relax.permute_dims")


@dataclass(frozen=True)
class _Step:
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


def _step(call: relax.Call) -> _Step | None:
    src, dst = known_shape(call.args[0]), known_shape(call)
    if src is None or dst is None:
        return None
    name = op_name(call)
    if name == "relax.permute_dims":
        axes = permute_axes(call)
        return None if axes is None else _Step("permute", src, dst, tuple(axes))
    return _Step("broadcast" if name == "relax.broadcast_to" else "view", src, dst)


@dataclass
class _Product:
    out_shape: tuple[int, ...]  # the matmul's result, as TVM inferred it
    final: relax.Var  # the var the product binds: the end of the chain after the matmul
    sources: tuple[relax.Expr, relax.Expr]
    reads: tuple[tuple[_Step, ...], tuple[_Step, ...]]
    writes: tuple[_Step, ...]
    absorbed: tuple[relax.Var, ...]  # bindings the product replaces (all but `final`)
    constants: tuple[relax.Expr, ...]  # of the epilogue steps of `writes`, in order
    shapes: tuple[tuple[int, ...], tuple[int, ...]]  # the matmul's operands
    dtype: str  # the matmul's result
    name: str = "matmul"  # the op it computes: "matmul", or "conv2d" (a pointwise one)

    def compute(self) -> Callable[..., te.Tensor]:
        return product_compute(self)

    def inputs(self) -> list[relax.Expr]:
        return [*self.sources, *self.constants]

    def prim_func(self) -> tirx.PrimFunc:
        """The product alone, over placeholders of its inputs (what a rule is asked)."""
        args = [te.placeholder(known_shape(s), str(getattr(tensor_type(s), "dtype", "")),
                               name=f"in{i}") for i, s in enumerate(self.inputs())]
        return te.create_prim_func([*args, self.compute()(*args)])


def _walk(steps: Sequence[_Step], idx: Sequence[Any], ana: Any) -> list[Any]:
    """Through `steps` (source to end) backwards: the source index of the end's `idx`."""
    out = list(idx)
    for step in reversed(steps):
        out = step.back(out, ana)
    return out


def _indices(p: _Product, idx: Sequence[Any], k: Any, ana: Any) -> tuple[list[Any], list[Any]]:
    """The indices of the two sources that the product's output `idx` reads at depth `k`."""
    m = _walk(p.writes, idx, ana)
    batch = m[:-2]

    def operand(shape: tuple[int, ...], rows: Any, cols: Any) -> list[Any]:
        own = batch[len(batch) - (len(shape) - 2):] if len(shape) > 2 else []
        return [0 if n == 1 else i for i, n in zip(own, shape[:-2], strict=True)] + [rows, cols]

    return (_walk(p.reads[0], operand(p.shapes[0], m[-2], k), ana),
            _walk(p.reads[1], operand(p.shapes[1], k, m[-1]), ana))


def _final_shape(p: _Product) -> tuple[int, ...]:
    return p.writes[-1].dst if p.writes else p.out_shape


_EPILOGUE_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "relax.add": lambda x, y: x + y, "relax.subtract": lambda x, y: x - y,
    "relax.multiply": lambda x, y: x * y, "relax.divide": lambda x, y: x / y}


#: The `_Step.op` prefix of a cast between float dtypes (a half model's product rounded to its
#: dtype: TVM imports it with a float32 result), applied in the epilogue as well
_CAST = "astype:"


def _bound(idx: Sequence[Any], shape: Sequence[int]) -> Any:
    ana = Analyzer()
    for v, n in zip(idx, shape, strict=True):
        ana.bind(v, tvm.ir.Range(0, n))
    return ana


def product_compute(p: _Product) -> Callable[..., te.Tensor]:
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
                if step.op.startswith(_CAST):
                    value = value.astype(step.op.removeprefix(_CAST))
                    continue
                const = next(left)
                c = const[tuple(_Step("broadcast", tuple(int(d) for d in const.shape),
                                      step.dst).back(at, ana))]
                value = _EPILOGUE_OPS[step.op](*((c, value) if step.const_first else
                                                 (value, c)))
            return value

        return te.compute(final, epilogue, name="matmul_epilogue")

    return compute


def _uses(expr: Any, var: Any) -> bool:
    return not isinstance(expr, int) and \
        any(v.same_as(var) for v in tirx.analysis.undefined_vars(expr))


def walks_one_axis(p: _Product) -> bool:
    """Whether the product walks memory the way the matmul it replaces does, which on llvm
    (no schedule: the loops as written) decides its speed:

    - the summed depth is walked with a fixed stride through each source: one axis of it,
      or axes a view merged that lie next to each other in memory (a channels-last map's H
      and W read as its tokens); a depth merged from axes apart in memory would be read in
      jumps (``k // 8``, ``k % 8``: XCiT's projection, 5% slower than with its transpose);
    - the result is written along the matmul's columns, or along its rows where the rows'
      operand is no larger than the columns' (the loops sweep it again for each column:
      XCiT's probabilities times v, written back to tokens); a pointwise convolution writing
      an NCHW output down its columns (its input larger than its weight) took 2.2x the time
      of the convolution and its transpose (BENCHMARKS.md).
    """
    final, depth = _final_shape(p), p.shapes[0][-1]
    idx = [tirx.Var(f"i{a}", "int64") for a in range(len(final))]
    ana = _bound(idx, final)
    k = tirx.Var("k", "int64")
    ana.bind(k, tvm.ir.Range(0, depth))
    at = [_indices(p, idx, tirx.const(d, "int64"), ana) for d in (0, 1)]
    for index, source, zero, one in zip(_indices(p, idx, k, ana), p.sources, *at,
                                        strict=True):
        shape = known_shape(source)
        if shape is None:
            return False
        offset = [_flat(x, shape) for x in (index, zero, one)]
        stride = ana.simplify(offset[2] - offset[1])
        if not isinstance(stride, tirx.IntImm) or stride.value == 0 or \
                not ana.can_prove_equal(offset[0] - offset[1], k * stride.value):
            return False
    if not p.writes:
        return True
    m, inner = _walk(p.writes, idx, ana), idx[-1]
    rest = _walk(p.writes, [*idx[:-1], tirx.const(0, "int64")], ana)  # inner at 0
    small = int(np.prod(p.shapes[0])) <= int(np.prod(p.shapes[1]))  # rows' operand
    for axis in (-1, -2) if small else (-1,):
        if not any(_uses(e, inner) for a, e in enumerate(m) if a != len(m) + axis) and \
                ana.can_prove_equal(m[axis] - rest[axis], inner):
            return True
    return False


_WALKS: dict[Any, bool] = {}  # SinkPermutes asks `find` about the same products again


def _walks_one_axis(p: _Product) -> bool:
    """`walks_one_axis`, kept per product (its chains and shapes decide it)."""
    key = (p.name, p.out_shape, p.reads, p.writes, p.shapes,
           tuple(known_shape(s) for s in p.sources))
    if key not in _WALKS:
        if len(_WALKS) > 4096:
            _WALKS.clear()
        _WALKS[key] = walks_one_axis(p)
    return _WALKS[key]


def _flat(index: Sequence[Any], shape: Sequence[int]) -> Any:
    """The offset of `index` in a row-major tensor of `shape`."""
    flat: Any = tirx.const(0, "int64")
    for i, n in zip(index, shape, strict=True):
        flat = flat * n + i
    return flat


def _moves(steps: Sequence[_Step]) -> bool:
    return any(s.kind == "permute" and not is_identity(s.axes) for s in steps)


def find(func: relax.Function, accept: Callable[[_Product], bool] = lambda _p: True,
         only: set[relax.Var] | None = None) -> list[_Product]:
    """The matmuls worth reading and writing through their chains (each variant also as
    `accept` says: on a GPU, `gpu_schedules`; of the matmuls bound to `only`'s vars if given).

    A chain is absorbed from its first permute (reading) or up to its last (writing): the
    views outside those stay reshapes, which cost nothing, and the product's loops stay
    those of a batched matmul (no fused index to split), which is what dlight recognizes.
    """
    producers = {b.var: b.value for b in bindings(func) if isinstance(b.value, relax.Call)}
    uses = use_sites(func)
    derived = weight_derived(func)

    def only_reader(var: Any) -> bool:
        readers = uses.get(var, [])
        return len(readers) == 1 and readers[0] is not None

    def read_chain(operand: relax.Expr) -> tuple[relax.Expr, list[_Step], list[relax.Var]]:
        """(source, steps from it to `operand`, the vars those steps bind)."""
        links: list[tuple[relax.Var, _Step]] = []  # operand first
        cur = operand
        while isinstance(cur, relax.Var) and op_name(producers.get(cur)) in READS and \
                only_reader(cur):
            step = _step(producers[cur])
            if step is None:
                break
            links.append((cur, step))
            cur = producers[cur].args[0]
        links.reverse()
        while links and links[0][1].kind != "permute":  # views before it stay views
            links.pop(0)
        if not _moves([s for _, s in links]):
            return operand, [], []
        source = producers[links[0][0]].args[0]
        if is_weight_derived(source, derived) or \
                op_name(producers.get(source)) == "relax.dequantize":
            return operand, [], []  # folded when compiled; a quantized product is not ours
        return source, [s for _, s in links], [v for v, _ in links]

    def epilogue(call: relax.Call, cur: relax.Var) -> tuple[_Step, relax.Expr | None] | None:
        """`call` as an epilogue step of `cur`: an elementwise op with a constant that
        broadcasts to `cur`'s shape, or a cast between float dtypes (no constant)."""
        shape = known_shape(cur)
        if op_name(call) == "relax.astype" and shape is not None and \
                str(call.attrs.dtype).startswith(("float", "bfloat")) and \
                str(getattr(tensor_type(cur), "dtype", "")).startswith(("float", "bfloat")):
            return _Step("epilogue", shape, shape, op=_CAST + str(call.attrs.dtype)), None
        if op_name(call) not in _EPILOGUE_OPS or len(call.args) != 2:
            return None
        first = not call.args[0].same_as(cur)
        const = call.args[0] if first else call.args[1]
        shape, cshape = known_shape(cur), known_shape(const)
        if shape is None or cshape is None or known_shape(call) != shape or \
                not is_weight_derived(const, derived) or len(cshape) > len(shape) or \
                any(c not in (1, n) for c, n in zip(cshape, shape[len(shape) - len(cshape):],
                                                    strict=True)) or \
                str(getattr(tensor_type(const), "dtype", "")) != \
                str(getattr(tensor_type(cur), "dtype", "")):
            return None
        return _Step("epilogue", shape, shape, op=str(op_name(call)), const_first=first), const

    def write_chain(var: relax.Var
                    ) -> tuple[relax.Var, list[_Step], list[relax.Var], list[relax.Expr]]:
        """(the last var, steps from `var` to it, the vars before it the steps replace, the
        constants of its epilogue steps)."""
        links: list[tuple[relax.Var, _Step, relax.Expr | None]] = []  # (output, step, const)
        cur = var
        while only_reader(cur):
            user = uses[cur][0]
            call = producers.get(user)
            step = _step(call) if op_name(call) in _WRITES else None
            const = None
            if step is None and call is not None:
                found_epilogue = epilogue(call, cur)
                step, const = found_epilogue if found_epilogue else (None, None)
            if step is None:
                break
            links.append((user, step, const))
            cur = user
        while links and links[-1][1].kind != "permute":  # views after it stay views
            links.pop()
        if not _moves([s for _, s, _ in links]):
            return var, [], [], []
        return (links[-1][0], [s for _, s, _ in links], [var, *(v for v, _, _ in links[:-1])],
                [c for _, _, c in links if c is not None])

    found = []
    for var, call in producers.items():
        operands = _as_matmul(call, derived)
        if operands is None or (only is not None and var not in only):
            continue
        (a, b), b_steps = operands
        shapes = [known_shape(a), known_shape(b) if not b_steps else b_steps[-1].dst]
        out_shape = known_shape(var)
        if any(s is None or len(s) < 2 for s in shapes) or out_shape is None or \
                any(not str(getattr(tensor_type(x), "dtype", "")).startswith(("float", "bfloat"))
                    for x in (a, b)):
            continue
        # a pointwise convolution's weight is read as the (Cin, Cout) matrix it is
        chains = [read_chain(a), (b, b_steps, []) if b_steps else read_chain(b)]
        final, writes, vw, constants = write_chain(var)
        variants = []
        # Every subset of the chains, most first: a chain another product takes too, or one
        # the product would walk badly (`walks_one_axis`) or a GPU rule refuses, is left as
        # it was. (A pointwise convolution's weight chain is always read.)
        for keep_a, keep_b, keep_w in sorted(itertools.product((True, False), repeat=3),
                                             key=lambda k: -sum(k)):
            if b_steps and not keep_b:
                continue  # the same variant as with it
            sa, ra, va = chains[0] if keep_a else (a, [], [])
            sb, rb, vb = chains[1] if keep_b else (b, [], [])
            w = (final, writes, vw, constants) if keep_w else (var, [], [], [])
            if not (ra or (rb and not b_steps) or w[1]):
                continue
            p = _Product(out_shape, w[0], (sa, sb), (tuple(ra), tuple(rb)), tuple(w[1]),
                         (*va, *vb, *w[2]), tuple(w[3]),
                         (shapes[0], shapes[1]),  # type: ignore[arg-type]
                         str(tensor_type(var).dtype),  # type: ignore[union-attr]
                         "conv2d" if b_steps else "matmul")
            if _walks_one_axis(p) and accept(p):
                variants.append(p)
        if variants:
            found.append(variants)
    return _disjoint(found)


def _as_matmul(call: relax.Call, derived: set[relax.Var]
               ) -> tuple[tuple[relax.Expr, relax.Expr], tuple[_Step, ...]] | None:
    """A matmul's operands (and no steps), or a pointwise convolution's data and weight with
    the steps that read its OHWI weight as the (Cin, Cout) matrix of a Linear over the
    channels: NHWC, a constant 1x1 kernel, stride 1, no padding or dilation, one group."""
    name = op_name(call)
    if name == "relax.matmul":
        return (call.args[0], call.args[1]), ()
    if name != "relax.nn.conv2d":
        return None
    attrs, w = call.attrs, known_shape(call.args[1])
    if w is None or len(w) != 4 or w[1:3] != (1, 1) or int(attrs.groups) != 1 or \
            (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != \
            ("NHWC", "OHWI", "NHWC") or \
            any(int(x) != 1 for x in (*attrs.strides, *attrs.dilation)) or \
            any(int(x) != 0 for x in attrs.padding) or \
            not is_weight_derived(call.args[1], derived):
        return None
    cout, _, _, cin = w
    return (call.args[0], call.args[1]), (_Step("view", w, (cout, cin)),
                                          _Step("permute", (cout, cin), (cin, cout), (1, 0)))


def _disjoint(found: list[list[_Product]]) -> list[_Product]:
    """One product per matmul, none absorbing a binding another one absorbs (one matmul's
    output chain is the next one's operand chain): in program order, each takes its first
    variant that is still free."""
    taken: set[Any] = set()
    out = []
    for variants in found:
        for p in variants:
            mine = {*p.absorbed, p.final}
            if not mine & taken:
                taken |= mine
                out.append(p)
                break
    return out


@mutator
class _Rewriter(PyExprMutator):  # type: ignore[misc]
    """Each product bound to its chain's last var; the bindings it absorbed dropped."""

    def __init__(self, mod: tvm.IRModule, products: list[_Product]) -> None:
        super().__init__(mod)
        self.by_final = {p.final: p for p in products}
        self.skip = {v for p in products for v in p.absorbed}

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if binding.var in self.skip:
            return
        p = self.by_final.get(binding.var)
        if p is None:
            super().visit_var_binding_(binding)
            return
        srcs = [self.visit_expr(s) for s in p.inputs()]
        value = self.builder_.call_te(p.compute(), *srcs, primfunc_name_hint=p.name)
        gvar = value.args[0]
        prim = self.builder_.get()[gvar].with_attrs(
            {PRODUCT_ATTR: True, "op_pattern": _OUT_ELEMWISE_FUSABLE})
        self.builder_.update_func(gvar, prim)
        value = self.builder_.normalize(value)
        self.builder_.emit_normalized(relax.VarBinding(binding.var, value))


def strided_products(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """Every matmul of ``main`` that `find` takes, read and written through its chains."""
    func = mod["main"]
    products = find(func, gpu_schedules(target))
    if not products:
        return mod
    rewriter = _Rewriter(mod, products)
    new = rewriter.visit_expr(func)
    rewriter.builder_.update_func(mod.get_global_var("main"), new)
    return relax.transform.DeadCodeElimination(["main"])(rewriter.builder_.get())


def StridedProducts(target: tvm.target.Target) -> tvm.transform.Pass:
    """The pass: `strided_products` for `target`."""
    return tvm.transform.module_pass(lambda mod, _ctx: strided_products(mod, target),
                                     opt_level=0, name="StridedProducts")


__all__ = ["PRODUCT_ATTR", "StridedProducts", "find", "strided_products"]
