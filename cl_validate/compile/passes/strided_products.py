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

Taken only where it removes a run-time transpose (a chain holds a permute of a computed
value, and the chain's values have no other reader), with static shapes and float operands
(quantized products are `IntegerCompute`'s, and the float QDQ count's). On a GPU only where
dlight's Matmul rule schedules the product, as it schedules the matmul it replaces: a
product it would leave to the generic Fallback (threads bound to loops, nothing shared)
keeps its transposes. Each product's PrimFunc carries `PRODUCT_ATTR`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import tvm
from tvm import relax, te, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.sym import Analyzer

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

_VIEWS = ("relax.reshape", "relax.expand_dims", "relax.squeeze")
_READS = (*_VIEWS, "relax.permute_dims", "relax.broadcast_to")
_WRITES = (*_VIEWS, "relax.permute_dims")


@dataclass(frozen=True)
class _Step:
    """One movement op of a chain: ``permute`` (`axes`), ``view`` or ``broadcast``."""

    kind: str
    src: tuple[int, ...]
    dst: tuple[int, ...]
    axes: tuple[int, ...] = ()

    def back(self, idx: Sequence[Any], ana: Any) -> list[Any]:
        """The index of the op's input holding the value at `idx` of its output."""
        if self.kind == "permute":
            out: list[Any] = [0] * len(self.src)
            for a, p in enumerate(self.axes):
                out[p] = idx[a]
            return out
        if self.kind == "broadcast":
            off = len(self.dst) - len(self.src)
            return [0 if n == 1 and self.dst[a + off] != 1 else idx[a + off]
                    for a, n in enumerate(self.src)]
        flat: Any = tirx.const(0, "int64")
        for i, n in zip(idx, self.dst, strict=True):
            flat = flat * n + i
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
    matmul: relax.Var
    final: relax.Var  # the var the product binds: the end of the chain after the matmul
    sources: tuple[relax.Expr, relax.Expr]
    reads: tuple[tuple[_Step, ...], tuple[_Step, ...]]
    writes: tuple[_Step, ...]
    absorbed: tuple[relax.Var, ...]  # bindings the product replaces (all but `final`)
    shapes: tuple[tuple[int, ...], tuple[int, ...]]  # the matmul's operands
    dtype: str  # the matmul's result

    def compute(self) -> Callable[[te.Tensor, te.Tensor], te.Tensor]:
        return product_compute(self)

    def prim_func(self) -> tirx.PrimFunc:
        """The product alone, over placeholders of its sources (what a rule is asked)."""
        a, b = (te.placeholder(known_shape(s), str(getattr(tensor_type(s), "dtype", "")),
                               name=n) for s, n in zip(self.sources, "ab", strict=True))
        return te.create_prim_func([a, b, self.compute()(a, b)])


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
    return p.writes[-1].dst if p.writes else _broadcast_matmul_shape(*p.shapes)


def product_compute(p: _Product) -> Callable[[te.Tensor, te.Tensor], te.Tensor]:
    """The product as a TE compute over the two chain sources."""
    final, depth = _final_shape(p), p.shapes[0][-1]

    def compute(a: te.Tensor, b: te.Tensor) -> te.Tensor:
        def body(*idx: Any) -> Any:
            ana = Analyzer()
            for v, n in zip(idx, final, strict=True):
                ana.bind(v, tvm.ir.Range(0, n))
            k = te.reduce_axis((0, depth), "k")
            ana.bind(k.var, tvm.ir.Range(0, depth))
            ia, ib = _indices(p, idx, k.var, ana)
            return te.sum(a[tuple(ia)].astype(p.dtype) * b[tuple(ib)].astype(p.dtype), axis=k)

        return te.compute(final, body, name="matmul")

    return compute


def walks_one_axis(p: _Product) -> bool:
    """Whether the summed depth is one axis of each source, walked with a fixed stride: a
    depth that a view merged from two axes would be read split (``k // 8``, ``k % 8``), a
    jump every few elements, which on a CPU costs more than the transpose it saves
    (BENCHMARKS.md)."""
    final, depth = _final_shape(p), p.shapes[0][-1]
    ana = Analyzer()
    idx = [tirx.Var(f"i{a}", "int64") for a in range(len(final))]
    for v, n in zip(idx, final, strict=True):
        ana.bind(v, tvm.ir.Range(0, n))
    k = tirx.Var("k", "int64")
    ana.bind(k, tvm.ir.Range(0, depth))
    for index in _indices(p, idx, k, ana):
        reading = [e for e in index if not isinstance(e, int) and
                   any(v.same_as(k) for v in tirx.analysis.undefined_vars(e))]
        if len(reading) != 1 or not ana.can_prove_equal(reading[0], k):
            return False
    return True


def _broadcast_matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    ba, bb = a[:-2], b[:-2]
    n = max(len(ba), len(bb))
    ba, bb = (1,) * (n - len(ba)) + ba, (1,) * (n - len(bb)) + bb
    return tuple(max(x, y) for x, y in zip(ba, bb, strict=True)) + (a[-2], b[-1])


def _moves(steps: Sequence[_Step]) -> bool:
    return any(s.kind == "permute" and not is_identity(s.axes) for s in steps)


def find(func: relax.Function) -> list[_Product]:
    """The matmuls worth reading and writing through their chains.

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
        while isinstance(cur, relax.Var) and op_name(producers.get(cur)) in _READS and \
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

    def write_chain(var: relax.Var) -> tuple[relax.Var, list[_Step], list[relax.Var]]:
        """(the last var, steps from `var` to it, the vars before it the steps replace)."""
        links: list[tuple[relax.Var, _Step]] = []  # (the step's output, the step)
        cur = var
        while only_reader(cur):
            user = uses[cur][0]
            step = _step(producers[user]) if op_name(producers.get(user)) in _WRITES else None
            if step is None:
                break
            links.append((user, step))
            cur = user
        while links and links[-1][1].kind != "permute":  # views after it stay views
            links.pop()
        if not _moves([s for _, s in links]):
            return var, [], []
        return links[-1][0], [s for _, s in links], [var, *(v for v, _ in links[:-1])]

    found = []
    for var, call in producers.items():
        if op_name(call) != "relax.matmul":
            continue
        shapes = [known_shape(a) for a in call.args]
        if any(s is None or len(s) < 2 for s in shapes) or known_shape(var) is None or \
                any(not str(getattr(tensor_type(a), "dtype", "")).startswith("float")
                    for a in call.args):
            continue
        chains = [read_chain(a) for a in call.args]
        final, writes, vw = write_chain(var)
        # an operand whose depth a view split (`walks_one_axis`) is read as the matmul had it
        for keep in ((True, True), (True, False), (False, True), (False, False)):
            (sa, ra, va), (sb, rb, vb) = (c if k else (a, [], []) for c, k, a in
                                          zip(chains, keep, call.args, strict=True))
            if not (ra or rb or writes):
                continue
            p = _Product(var, final, (sa, sb), (tuple(ra), tuple(rb)), tuple(writes),
                         (*va, *vb, *vw), (shapes[0], shapes[1]),  # type: ignore[arg-type]
                         str(tensor_type(var).dtype))  # type: ignore[union-attr]
            if walks_one_axis(p):
                found.append(p)
                break
    return _disjoint(found)


def _disjoint(found: list[_Product]) -> list[_Product]:
    """Products whose absorbed bindings overlap (one matmul's output chain is the next one's
    operand chain) keep the first."""
    taken: set[Any] = set()
    out = []
    for p in found:
        mine = {*p.absorbed, p.final}
        if mine & taken:
            continue
        taken |= mine
        out.append(p)
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
        srcs = [self.visit_expr(s) for s in p.sources]
        value = self.builder_.call_te(p.compute(), *srcs, primfunc_name_hint="matmul")
        gvar = value.args[0]
        prim = self.builder_.get()[gvar].with_attrs(
            {PRODUCT_ATTR: True, "op_pattern": _OUT_ELEMWISE_FUSABLE})
        self.builder_.update_func(gvar, prim)
        value = self.builder_.normalize(value)
        self.builder_.emit_normalized(relax.VarBinding(binding.var, value))


def gpu_schedules(target: tvm.target.Target) -> Callable[[_Product], bool]:
    """Whether dlight's Matmul rule schedules a product for `target` (True on a CPU)."""
    if "gpu" not in target.keys:
        return lambda _p: True
    from tvm.s_tir import dlight as dl  # lazy: dlight only for GPU targets

    def accept(p: _Product) -> bool:
        with target:
            return dl.gpu.Matmul().apply(p.prim_func(), target, False) is not None

    return accept


def strided_products(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """Every matmul of ``main`` that `find` takes, read and written through its chains."""
    func = mod["main"]
    accept = gpu_schedules(target)
    products = [p for p in find(func) if accept(p)]
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
