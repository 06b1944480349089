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
after a convolution pinned to NCHW), and so is a 1-wide Conv1d on NWC data (Axial-DeepLab's
projection of a map's columns, viewed as ``(N·W, C, H)``). An elementwise op with a
constant between a product and the permute after it (a bias, a scale, a half model's
rounding to its dtype) is applied in the product's kernel, in a second stage over the same
indices.

Taken only where it removes a run-time transpose (a chain holds a permute of a computed
value, and the chain's values have no other reader), with static shapes and float operands
(quantized products are `IntegerCompute`'s, and the float QDQ count's), and where the
product walks memory as the matmul did (`walk_problem`). On a GPU only where dlight's
Matmul rule schedules the product, as it schedules the matmul it replaces: a product it
would leave to the generic Fallback (threads bound to loops, nothing shared) keeps its
transposes. Each product's PrimFunc carries `PRODUCT_ATTR`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes.gpu_products import gpu_schedules
from cl_validate.compile.passes.product_index import (
    CAST,
    EPILOGUE_OPS,
    Problem,
    Product,
    Step,
    chain_step,
    walk_problem,
)
from cl_validate.ir import (
    bindings,
    declined_part,
    float_typed,
    is_float,
    is_identity,
    is_weight_derived,
    known_shape,
    mark_origin,
    merge_origins,
    op_name,
    origin_mark,
    origin_tag,
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


def _moves(steps: Sequence[Step]) -> bool:
    return any(s.kind == "permute" and not is_identity(s.axes) for s in steps)


def find(func: relax.Function, accept: Callable[[Product], bool] = lambda _p: True,
         only: set[relax.Var] | None = None) -> list[Product]:
    """The matmuls worth reading and writing through their chains (each variant also as
    `accept` says: on a GPU, `gpu_schedules`; of the matmuls bound to `only`'s vars if given).

    A chain is absorbed from its first permute (reading) or up to its last (writing): the
    views outside those stay reshapes, which cost nothing, and the product's loops stay
    those of a batched matmul (no fused index to split), which is what dlight recognizes.
    """
    return _disjoint(_search(func, accept, only)[0])


def declined(func: relax.Function, accept: Callable[[Product], bool] = lambda _p: True
             ) -> dict[relax.Var, str]:
    """The permutes of chains no product may take, each with why (`walk_problem`, or the
    GPU rule): each stays a kernel of its own because this pass declined it."""
    return _search(func, accept, None)[1]


def _search(func: relax.Function, accept: Callable[[Product], bool],
            only: set[relax.Var] | None
            ) -> tuple[list[list[Product]], dict[relax.Var, str]]:
    """`find`'s variants of each matmul, and `declined`'s permutes."""
    producers = {b.var: b.value for b in bindings(func) if isinstance(b.value, relax.Call)}
    uses = use_sites(func)
    derived = weight_derived(func)

    def only_reader(var: Any) -> bool:
        readers = uses.get(var, [])
        return len(readers) == 1 and readers[0] is not None

    def read_chain(operand: relax.Expr) -> tuple[relax.Expr, list[Step], list[relax.Var]]:
        """(source, steps from it to `operand`, the vars those steps bind)."""
        links: list[tuple[relax.Var, Step]] = []  # operand first
        cur = operand
        while isinstance(cur, relax.Var) and op_name(producers.get(cur)) in READS and \
                only_reader(cur):
            step = chain_step(producers[cur])
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

    def epilogue(call: relax.Call, cur: relax.Var) -> tuple[Step, relax.Expr | None] | None:
        """`call` as an epilogue step of `cur`: an elementwise op with a constant that
        broadcasts to `cur`'s shape, or a cast between float dtypes (no constant)."""
        shape = known_shape(cur)
        if op_name(call) == "relax.astype" and shape is not None and \
                is_float(call.attrs.dtype) and float_typed(cur):
            return Step("epilogue", shape, shape, op=CAST + str(call.attrs.dtype)), None
        if op_name(call) not in EPILOGUE_OPS or len(call.args) != 2:
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
        return Step("epilogue", shape, shape, op=str(op_name(call)), const_first=first), const

    def write_chain(var: relax.Var
                    ) -> tuple[relax.Var, list[Step], list[relax.Var], list[relax.Expr]]:
        """(the last var, steps from `var` to it, the vars before it the steps replace, the
        constants of its epilogue steps)."""
        links: list[tuple[relax.Var, Step, relax.Expr | None]] = []  # (output, step, const)
        cur = var
        while only_reader(cur):
            user = uses[cur][0]
            call = producers.get(user)
            step = chain_step(call) if op_name(call) in _WRITES else None
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

    found: list[list[Product]] = []
    declines: dict[relax.Var, str] = {}
    for var, call in producers.items():
        operands = _as_matmul(call, derived)
        if operands is None or (only is not None and var not in only):
            continue
        (a, b), b_steps = operands
        shapes = [known_shape(a), known_shape(b) if not b_steps else b_steps[-1].dst]
        out_shape = known_shape(var)
        if any(s is None or len(s) < 2 for s in shapes) or out_shape is None or \
                not (float_typed(a) and float_typed(b)):
            continue
        # a pointwise convolution's weight is read as the (Cin, Cout) matrix it is
        chains = [read_chain(a), (b, b_steps, []) if b_steps else read_chain(b)]
        final, writes, vw, constants = write_chain(var)
        variants: list[Product] = []
        rejected: dict[tuple[bool, ...], Problem] = {}
        # Every subset of the chains, most first: a chain another product takes too, or one
        # the product would walk badly (`walk_problem`) or a GPU rule refuses, is left as
        # it was. (A pointwise convolution's weight chain is always read.)
        for keep in sorted(itertools.product((True, False), repeat=3), key=lambda k: -sum(k)):
            keep_a, keep_b, keep_w = keep
            if b_steps and not keep_b:
                continue  # the same variant as with it
            sa, ra, va = chains[0] if keep_a else (a, [], [])
            sb, rb, vb = chains[1] if keep_b else (b, [], [])
            w = (final, writes, vw, constants) if keep_w else (var, [], [], [])
            if not (ra or (rb and not b_steps) or w[1]):
                continue
            p = Product(out_shape, w[0], (sa, sb), (tuple(ra), tuple(rb)), tuple(w[1]),
                         (*va, *vb, *w[2]), tuple(w[3]),
                         (shapes[0], shapes[1]),  # type: ignore[arg-type]
                         str(tensor_type(var).dtype),  # type: ignore[union-attr]
                         str(op_name(call)).rsplit(".", 1)[-1])
            problem = walk_problem(p) or (None if accept(p) else _NO_SCHEDULE)
            if problem is None:
                variants.append(p)
            else:
                rejected[keep] = problem
        if variants:
            found.append(variants)
        # A chain that moves data and that no variant keeps: its permutes stay, declined
        # for the reason the product of that chain alone was. Not a read in jumps: that
        # permute reorders the summed axis itself (a channel shuffle before a pointwise
        # convolution), data movement of the model's that any kernel pays, named as it was.
        bound = (chains[0][2], [] if b_steps else chains[1][2],
                 [*vw[1:], final] if writes else [])
        for i, (steps, binds) in enumerate(zip((chains[0][1], chains[1][1], writes), bound,
                                               strict=True)):
            if not binds or any(v.reads[i] if i < 2 else v.writes for v in variants):
                continue
            alone = tuple(j == i or (j == 1 and bool(b_steps)) for j in range(3))
            problem = rejected.get(alone)
            if problem is None or problem.kind == "jumps":
                continue
            for step, bind in zip(steps, binds, strict=True):
                if step.kind == "permute" and not is_identity(step.axes):
                    declines[bind] = problem.why
    return found, declines


#: Why a product a GPU rule refuses is declined (`gpu_schedules`)
_NO_SCHEDULE = Problem("schedule", "dlight's Matmul rule would not schedule the product (it "
                                   "would be left to the generic Fallback)")
#: Channels-last convolutions whose 1-wide kernel makes them a Linear over the channels:
#: (data, kernel, output) layouts
POINTWISE = {"relax.nn.conv2d": ("NHWC", "OHWI", "NHWC"),
             "relax.nn.conv1d": ("NWC", "OWI", "NWC")}


def _as_matmul(call: relax.Call, derived: set[relax.Var]
               ) -> tuple[tuple[relax.Expr, relax.Expr], tuple[Step, ...]] | None:
    """A matmul's operands (and no steps), or a pointwise convolution's data and weight with
    the steps that read its OHWI (OWI) weight as the (Cin, Cout) matrix of a Linear over the
    channels: NHWC (NWC), a constant 1x1 (1) kernel, stride 1, no padding or dilation, one
    group."""
    name = op_name(call)
    if name == "relax.matmul":
        return (call.args[0], call.args[1]), ()
    layouts = POINTWISE.get(str(name))
    if layouts is None:
        return None
    attrs, w = call.attrs, known_shape(call.args[1])
    if w is None or len(w) != len(layouts[0]) or any(d != 1 for d in w[1:-1]) or \
            int(attrs.groups) != 1 or \
            (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != layouts or \
            any(int(x) != 1 for x in (*attrs.strides, *attrs.dilation)) or \
            any(int(x) != 0 for x in attrs.padding) or \
            not is_weight_derived(call.args[1], derived):
        return None
    cout, cin = w[0], w[-1]
    return (call.args[0], call.args[1]), (Step("view", w, (cout, cin)),
                                          Step("permute", (cout, cin), (cin, cout), (1, 0)))


def _disjoint(found: list[list[Product]]) -> list[Product]:
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
    """Each product bound to its chain's last var; the bindings it absorbed dropped; each
    permute declined marked with why (`declined_part`)."""

    def __init__(self, mod: tvm.IRModule, products: list[Product],
                 declines: dict[relax.Var, str]) -> None:
        super().__init__(mod)
        self.by_final = {p.final: p for p in products}
        self.skip = {v for p in products for v in p.absorbed}
        self.declines = declines

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if binding.var in self.skip:
            return
        p = self.by_final.get(binding.var)
        why = self.declines.get(binding.var)
        if p is None and why is not None:
            call = self.visit_expr(binding.value)
            mark = merge_origins(origin_tag(binding.value),
                                 origin_mark([declined_part(why, "StridedProducts")]))
            value = self.builder_.normalize(mark_origin(call, mark))
            self.builder_.emit_normalized(relax.VarBinding(binding.var, value))
            return
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
    found, declines = _search(func, gpu_schedules(target), None)
    products = _disjoint(found)
    if not products and not declines:
        return mod
    rewriter = _Rewriter(mod, products, declines)
    new = rewriter.visit_expr(func)
    rewriter.builder_.update_func(mod.get_global_var("main"), new)
    return relax.transform.DeadCodeElimination(["main"])(rewriter.builder_.get())


def StridedProducts(target: tvm.target.Target) -> tvm.transform.Pass:
    """The pass: `strided_products` for `target`."""
    return tvm.transform.module_pass(lambda mod, _ctx: strided_products(mod, target),
                                     opt_level=0, name="StridedProducts")


__all__ = ["PRODUCT_ATTR", "StridedProducts", "declined", "find", "strided_products"]
