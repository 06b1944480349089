"""SinkViews: a view between a kernel and the elementwise steps after it moves below them.

TVM's FuseOps fuses elementwise steps into the kernel that computes their input (a LayerNorm,
a matmul, a convolution), but not a reshape: a view is an injective op, which it fuses only
forward, into the steps after it. So ``layer_norm -> reshape -> quantize`` is two kernels (the
LayerNorm, then the reshape and the quantize together), where ``layer_norm -> quantize ->
reshape`` is one kernel and a free view: the float32 LayerNorm output went to memory and back
for nothing. A quantized transformer has this shape where a norm's output is viewed as a
Linear's rows before its quantize, or where a size-1 permute became a reshape there.

The rewrite is exact: an elementwise step on a tensor whose other operands hold one element
each computes the same values in any shape of the same elements, so it may run before the
view instead of after it. Moved: single-use chains of such steps (`UNARY_OPS`, quantize and
dequantize per tensor, `BROADCAST_OPS` with one-element other operands) right after a view
(reshape, squeeze, expand_dims) of what a product or a norm computed (`_ABSORBS`): only
there does the move let a step fuse, where elsewhere it could cost the kernel after the view
the steps it took as its input's computation. The view is made again, as a
reshape, after the chain's last step.
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._layout_ops import BROADCAST_OPS, UNARY_OPS
from cl_validate.compile.passes._movement_ops import VIEW_OPS
from cl_validate.compile.passes._plan import remake
from cl_validate.compile.passes._util import relax_function_pass
from cl_validate.ir import (
    bindings,
    block_index,
    op_name,
    static_shape,
    tensor_type,
    use_sites,
)

_VIEWS = frozenset(VIEW_OPS)
# Kernels FuseOps fuses the elementwise steps after into (TVM's legalization of these is a
# loop nest it reads as "fusable with elementwise outputs"): the products and the norms.
# Not the others: a sum or a cumsum fuses no step after it, and the attention kernel is our
# own (`cl_validate.compile.legalize`); moved there, a view would only split the steps
# from the kernel after them, which takes them as its input's computation.
_ABSORBS = frozenset(f"relax.{n}" for n in (
    "matmul nn.conv1d nn.conv2d nn.conv3d nn.layer_norm nn.group_norm nn.rms_norm").split())
_QDQ = frozenset({"relax.quantize", "relax.dequantize"})
_ELEMENTWISE = UNARY_OPS | BROADCAST_OPS | _QDQ


def _one_element(expr: relax.Expr, rank: int) -> bool:
    """A tensor of one element that broadcasts into any shape of `rank` axes unchanged."""
    shape = static_shape(expr) if tensor_type(expr) is not None else None
    return shape is not None and len(shape) <= rank and all(d == 1 for d in shape)


def _step(value: relax.Expr, cur: relax.Var, rank: int) -> relax.Call | None:
    """`value` if it is an elementwise step whose only operand of more than one element is
    `cur` (ranks: the smaller of the view's two)."""
    name = op_name(value)
    if name not in _ELEMENTWISE:
        return None
    assert isinstance(value, relax.Call)
    args = list(value.args)
    if not args or (not args[0].same_as(cur) and name not in BROADCAST_OPS):
        return None
    if name in UNARY_OPS:
        return value if all(tensor_type(a) is None for a in args[1:]) else None
    others = [a for a in args if not a.same_as(cur)]
    if len(others) != len(args) - 1:  # `cur` twice (x * x): still one operand, not moved
        return None
    return value if all(_one_element(a, rank) for a in others) else None


def _plans(func: relax.Function) -> dict[relax.Var, tuple[relax.Var, list[relax.Var]]]:
    """view var -> (what it views, the chain of steps moved above it, in order)."""
    values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    block = block_index(func)  # a chain never leaves the view's block
    uses = use_sites(func)
    plans: dict[relax.Var, tuple[relax.Var, list[relax.Var]]] = {}
    claimed: set[relax.Var] = set()  # steps some chain moves already (x_view + y_view)
    for var, value in values.items():
        if op_name(value) not in _VIEWS:
            continue
        src = value.args[0]
        made = values.get(src) if isinstance(src, relax.Var) else None
        # read by the view alone: a kernel whose output is read elsewhere too takes no step
        if op_name(made) not in _ABSORBS or uses.get(src) != [var]:
            continue
        before, after = static_shape(src), static_shape(var)
        if before is None or after is None or None in before or None in after:
            continue
        rank = min(len(before), len(after))
        chain, cur = [], var
        while len(uses.get(cur, [])) == 1 and uses[cur][0] is not None:
            nxt = uses[cur][0]
            if nxt in claimed or block.get(nxt) != block.get(var) or _step(
                    values.get(nxt), cur, rank) is None:
                break
            chain.append(nxt)
            cur = nxt
        if chain:
            plans[var] = (src, chain)
            claimed.update(chain)
    return plans


@mutator
class _Sinker(PyExprMutator):  # type: ignore[misc]
    def __init__(self, plans: dict[relax.Var, tuple[relax.Var, list[relax.Var]]]) -> None:
        super().__init__()
        self.views = set(plans)
        # a chain step -> (the operand it read, what it reads instead: the view's input for
        # the first step, the step before's new value for the others)
        self.steps: dict[relax.Var, tuple[relax.Var, relax.Var]] = {}
        self.last: set[relax.Var] = set()
        for view, (src, chain) in plans.items():
            prev = view
            for step in chain:
                self.steps[step] = (prev, src if prev is view else prev)
                prev = step
            self.last.add(chain[-1])
        self.moved: dict[relax.Var, relax.Var] = {}  # a chain step -> its value before the view

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if binding.var in self.views:
            return  # made again after its chain
        if binding.var not in self.steps:
            super().visit_var_binding_(binding)
            return
        old, new = self.steps[binding.var]
        data = self.moved[new] if new in self.moved else self.visit_expr(new)
        call = binding.value
        args = [data if a.same_as(old) else self.visit_expr(a) for a in call.args]
        attrs = call.attrs
        if op_name(call) in _QDQ:  # per tensor: the axis means nothing, and may not exist
            make = relax.op.quantize if op_name(call) == "relax.quantize" else \
                relax.op.dequantize
            attrs = make(data, args[1], args[2], -1, attrs.out_dtype).attrs
        value = self.builder_.emit(remake(call, args, attrs))
        self.moved[binding.var] = value
        if binding.var in self.last:
            shape = static_shape(binding.var)  # the view's: static, as `_plans` requires
            view = self.builder_.normalize(relax.op.reshape(value, list(shape or ())))
            self.builder_.emit_normalized(relax.VarBinding(binding.var, view))


def sink_views(func: relax.Function) -> relax.Function:
    """Each view of a computed value followed by single-use elementwise steps whose other
    operands hold one element: the steps on the value, the view (a reshape) after them."""
    plans = _plans(func)
    if not plans:
        return func
    return relax.analysis.remove_all_unused(_Sinker(plans).visit_expr(func))


SinkViews = relax_function_pass("SinkViews")(sink_views)

__all__ = ["SinkViews", "sink_views"]
