"""Where each runtime layout transform comes from, and why it is there.

Three facts are joined:
- at import, which PyTorch node (nn.Module path and op, from torch.export's node metadata)
  produced each Relax binding — recorded by binding name, which TVM's passes keep;
- at the last op-level stage (right before legalization), each transform's place in the
  graph: on a graph input or output, the model's own permute, a weight, or inserted by
  ConvertLayout around an op that stayed in the old layout (the op without a layout rule);
- the attribution is written into the transform call's span, which our legalization copies
  onto the transform's PrimFunc, so the fused kernel list can show it after fusion.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

INPUT_BOUNDARY = "graph input boundary"
OUTPUT_BOUNDARY = "graph output boundary"
OWN_PERMUTE = "the model's own permute"
NO_LAYOUT_RULE = "op without a layout rule"
PINNED = "layout pinned by [layout_overrides]"
WEIGHT = "unfolded weight"

NEXT_STEP = {
    INPUT_BOUNDARY: "declare the input layout = \"NHWC\" if callers can pass channels-last data",
    OUTPUT_BOUNDARY: "declare [[outputs]] layout = \"NHWC\" if callers accept channels-last data",
    OWN_PERMUTE: "the model permutes the tensor itself: remove the permute from the model or let "
                 "a cleanup pass cancel it against ConvertLayout's",
    NO_LAYOUT_RULE: "give {op} a layout rule (or a cl_validate pass that carries the layout "
                    "through it) so it runs in NHWC",
    WEIGHT: "a weight transform did not fold: bind the weights as constants before folding "
            "(the fold_params stage)",
    PINNED: "expected: the case keeps this module in another layout; budget the transforms at "
            "its borders",
}
#: Ops that take whatever layout their input has: a transform after one of them was caused
#: further up, so attribution walks past them to the op that decided the layout.
_FOLLOWERS = frozenset({
    "relax.nn.relu", "relax.add", "relax.subtract", "relax.multiply", "relax.divide",
    "relax.sigmoid", "relax.tanh", "relax.nn.silu", "relax.nn.gelu",
    "relax.nn.leakyrelu", "relax.exp", "relax.sqrt", "relax.negative",
})


@dataclass(frozen=True)
class Attribution:
    reason: str
    relax_op: str | None = None  # the Relax op that forced the transform
    source: str | None = None  # PyTorch source: "layer1.0.conv1 (conv2d)"

    def to_json(self) -> str:
        return json.dumps({"reason": self.reason, "op": self.relax_op, "source": self.source})

    @staticmethod
    def from_json(text: str) -> Attribution | None:
        try:
            d = json.loads(text)
            return Attribution(d["reason"], d.get("op"), d.get("source"))
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        parts = [self.reason]
        if self.relax_op and self.reason == NO_LAYOUT_RULE:
            parts[0] = f"{self.relax_op} has no layout rule"
        if self.source:
            parts.append(f"from {self.source}")
        return ", ".join(parts)

    def next_step(self) -> str:
        return NEXT_STEP.get(self.reason, "").format(op=self.relax_op or "the op")


# --------------------------------------------------------------------------------------------
# Import: Relax binding name -> PyTorch source
# --------------------------------------------------------------------------------------------
def node_source(node: Any) -> str | None:
    """``module.path (op)`` for an FX node of an exported program."""
    meta = getattr(node, "meta", {}) or {}
    stack = meta.get("nn_module_stack") or {}
    path = ""
    if stack:
        path = list(stack.values())[-1][0]
        path = path.replace("L['self'].", "").replace("L__self___", "")
    op = None
    fn_stack = meta.get("source_fn_stack") or []
    if fn_stack:
        op = str(fn_stack[-1][0])
    if op is None and node.op == "call_function":
        op = getattr(node.target, "__name__", str(node.target)).split(".")[0]
    if not path and not op:
        return None
    op = (op or "").rstrip("_0123456789") or op
    return f"{path} ({op})" if path else f"({op})"


def sources_by_binding(mod: Any, env: dict[Any, Any]) -> dict[str, str]:
    """Map each binding name of the imported main to the PyTorch node that produced it.

    Converters emit their helper bindings first and return the last one, so every binding is
    attributed to the next binding that an FX node maps to.
    """
    from tvm import relax

    by_var: dict[Any, str] = {}
    for node, value in env.items():
        if isinstance(value, relax.Var):
            src = node_source(node)
            if src:
                by_var[value] = src
    out: dict[str, str] = {}
    pending: list[str] = []
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            pending.append(b.var.name)
            src = by_var.get(b.var)
            if src is not None:
                for name in pending:
                    out.setdefault(name, src)
                pending = []
    return out


# --------------------------------------------------------------------------------------------
# Op level: annotate every transform call
# --------------------------------------------------------------------------------------------
_TO_NCHW = (0, 3, 1, 2)
_TO_NHWC = (0, 2, 3, 1)


def _users(bindings: Iterable[Any]) -> dict[Any, list[Any]]:
    from tvm import relax

    users: dict[Any, list[Any]] = {}

    def leaves(e: Any) -> Iterable[Any]:
        if isinstance(e, relax.Var):
            yield e
        elif isinstance(e, relax.Tuple):
            for f in e.fields:
                yield from leaves(f)
        elif isinstance(e, relax.TupleGetItem):
            yield from leaves(e.tuple_value)
        elif isinstance(e, relax.Call):
            for a in e.args:
                yield from leaves(a)

    for b in bindings:
        for v in leaves(b.value):
            users.setdefault(v, []).append(b)
    return users


def annotate_transforms(mod: Any, sources: dict[str, str], own_permutes: set[str],
                        pinned_modules: Iterable[str] = ()) -> Any:
    """Return `mod` with every transform call in main carrying its `Attribution` in its span.

    `pinned_modules` are the nn.Module paths the case keeps in another layout on purpose.
    """
    import tvm
    from tvm import ir, relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from cl_validate.analysis import TRANSFORM_OPS, _const_derived, _weight_params

    func = mod["main"]
    bindings = [b for blk in func.body.blocks for b in blk.bindings]
    n_in = len(func.params) - len(_weight_params(func))
    inputs = set(func.params[:n_in])
    derived = _const_derived(func, _weight_params(func))
    users = _users(bindings)
    producer = {b.var: b for b in bindings}
    pinned = set(pinned_modules)
    outputs = _output_vars(func.body.body, producer)

    def op_of(b: Any) -> str | None:
        v = b.value
        return v.op.name if isinstance(v, relax.Call) and isinstance(v.op, ir.Op) else None

    attributions: dict[Any, Attribution] = {}
    for b in bindings:
        if op_of(b) not in TRANSFORM_OPS:
            continue
        x = b.value.args[0]
        axes = tuple(int(a) for a in b.value.attrs.axes) if getattr(
            b.value.attrs, "axes", None) is not None else None
        name = b.var.name
        if isinstance(x, relax.Var) and x in inputs:
            att = Attribution(INPUT_BOUNDARY, None, f"input '{x.name}'")
        elif _is_weight(x, derived):
            src = x.name if isinstance(x, relax.Var) else "a constant"
            att = Attribution(WEIGHT, None, sources.get(src, src))
        elif b.var in outputs:
            att = Attribution(OUTPUT_BOUNDARY, None, sources.get(
                x.name if isinstance(x, relax.Var) else name))
        elif name in own_permutes:
            att = Attribution(OWN_PERMUTE, op_of(b), sources.get(name))
        else:
            culprit = None
            if axes == _TO_NHWC and isinstance(x, relax.Var) and x in producer:
                culprit = producer[x]
                while op_of(culprit) in _FOLLOWERS and culprit.value.args and isinstance(
                        culprit.value.args[0], relax.Var) and culprit.value.args[0] in producer \
                        and op_of(producer[culprit.value.args[0]]) not in TRANSFORM_OPS:
                    culprit = producer[culprit.value.args[0]]
            else:
                culprit = next(iter(users.get(b.var, [])), None)
            if culprit is not None:
                src = sources.get(culprit.var.name)
                module = src.rsplit(" (", 1)[0] if src else None
                reason = PINNED if module in pinned else NO_LAYOUT_RULE
                att = Attribution(reason, op_of(culprit), src)
            else:
                att = Attribution(NO_LAYOUT_RULE, None, sources.get(name))
        attributions[b.var] = att

    if not attributions:
        return mod

    @mutator
    class _Tag(PyExprMutator):
        def visit_var_binding_(self, binding: Any) -> None:
            att = attributions.get(binding.var)
            if att is None:
                super().visit_var_binding_(binding)
                return
            call = binding.value
            span = ir.Span(ir.SourceName(att.to_json()), 0, 0, 0, 0)
            new = self.builder_.normalize(
                relax.Call(call.op, call.args, call.attrs, None, span=span))
            self.builder_.emit_normalized(relax.VarBinding(binding.var, new))

    body = _Tag().visit_expr(func.body)
    new_func = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)
    funcs = {gv: (new_func if gv.name_hint == "main" else f) for gv, f in mod.functions.items()}
    out = tvm.IRModule(funcs)
    return out.with_attrs(mod.attrs) if mod.attrs is not None else out


def _is_weight(x: Any, derived: set[Any]) -> bool:
    from tvm.ir.expr import Constant

    return isinstance(x, Constant) or x in derived


def _output_vars(ret: Any, producer: dict[Any, Any]) -> set[Any]:
    """Vars whose value is returned, following views (reshape, tuple) back from the output."""
    from tvm import ir, relax

    out: set[Any] = set()
    todo = [ret]
    while todo:
        e = todo.pop()
        if isinstance(e, relax.Tuple):
            todo.extend(e.fields)
        elif isinstance(e, relax.Var) and e not in out:
            out.add(e)
            b = producer.get(e)
            if b is None:
                continue
            v = b.value
            if isinstance(v, relax.Var) or isinstance(v, relax.Tuple):
                todo.append(v)
            elif isinstance(v, relax.Call) and isinstance(v.op, ir.Op) and v.op.name in (
                    "relax.reshape", "relax.squeeze", "relax.expand_dims"):
                todo.append(v.args[0])
    return out


def own_permute_names(import_mod: Any) -> set[str]:
    """Binding names of the permutes the model itself contains (present at import)."""
    from tvm import ir, relax

    from cl_validate.analysis import TRANSFORM_OPS

    names = set()
    for blk in import_mod["main"].body.blocks:
        for b in blk.bindings:
            v = b.value
            if isinstance(v, relax.Call) and isinstance(v.op, ir.Op) and v.op.name in \
                    TRANSFORM_OPS:
                names.add(b.var.name)
    return names
