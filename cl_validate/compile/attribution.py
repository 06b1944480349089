"""Where each runtime layout transform comes from, and why it is there.

Three facts are joined:
- at import, which PyTorch node (nn.Module path and op, from torch.export's node metadata)
  produced each Relax binding — recorded by binding name, which TVM's passes keep
  (`cl_validate.compile.import_sources`, which also marks the import's own permutes);
- at the last op-level stage (right before legalization), each transform's place in the
  graph: on a graph input or output, the model's own permute, a weight, or inserted by
  ConvertLayout around an op that stayed in the old layout — and then why it stayed: it has
  no layout rule (checked in TVM's op registry), or it has one and followed an input that was
  in the old layout (walked up to what decided: an op without a rule, the model's own
  permute, an op kept or pinned in the old layout, a graph input);
- the attribution is written into the transform call's span, which our legalization copies
  onto the transform's PrimFunc, so the fused kernel list can show it after fusion.

The reasons themselves (`Reason`, `Attribution`) are plain data in
`cl_validate.measurements.attribution`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tvm import ir, relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes import LAYOUT_AGNOSTIC_OPS
from cl_validate.compile.passes._layout_ops import (
    AXIS_OPS,
    BROADCAST_OPS,
    LAYOUT_ATTR_OPS,
    REDUCE_OPS,
    UNARY_OPS,
)
from cl_validate.compile.passes.split_permutes import SHARED_PARTS
from cl_validate.ir import (
    DECLINED,
    IMPORTER,
    MODEL,
    TRANSFORM_OPS,
    Part,
    bindings,
    input_params,
    is_tensor_constant,
    is_weight_derived,
    ndim,
    op_name,
    origin_parts,
    replace_function,
    tensor_type,
    use_sites,
    weight_derived,
)
from cl_validate.measurements.attribution import Attribution, Reason

# --------------------------------------------------------------------------------------------
# Op level: annotate every transform call
# --------------------------------------------------------------------------------------------
_TO_NCHW = (0, 3, 1, 2)
_TO_NHWC = (0, 2, 3, 1)


def annotate_transforms(mod: Any, sources: dict[str, str],
                        pinned_modules: Iterable[str] = (), kept_ops: Iterable[str] = (),
                        desired: Mapping[str, Sequence[str]] | None = None) -> Any:
    """Return `mod` with every transform call in main carrying its `Attribution` in its span.

    `pinned_modules` are the nn.Module paths the case keeps in another layout on purpose;
    `kept_ops` the Relax ops kept in their import layout because TVM cannot lower them in
    the one the pipeline asked for; `desired` the layouts ConvertLayout asks of each op (a
    transform into an op that runs in its layout is traced up its input).
    """
    func = mod["main"]
    binds = list(bindings(func))
    inputs = set(input_params(func))
    derived = weight_derived(func)
    users = use_sites(func)
    producer = {b.var: b for b in binds}
    pinned = set(pinned_modules)
    kept = set(kept_ops)
    layouts = dict(desired or {})
    decided = set(layouts) - kept
    outputs = _output_vars(func.body.body, producer)

    attributions: dict[Any, Attribution] = {}
    for b in binds:
        if op_name(b.value) not in TRANSFORM_OPS:
            continue
        x = b.value.args[0]
        axes = tuple(int(a) for a in b.value.attrs.axes) if getattr(
            b.value.attrs, "axes", None) is not None else None
        name = b.var.name
        if isinstance(x, relax.Var) and x in inputs:
            att = Attribution(Reason.INPUT_BOUNDARY, None, f"input '{x.name}'")
        elif is_weight_derived(x, derived):
            src = x.name if isinstance(x, relax.Var) else "a constant"
            att = Attribution(Reason.WEIGHT, None, sources.get(src, src))
        elif b.var in outputs:
            att = Attribution(Reason.OUTPUT_BOUNDARY, None, sources.get(
                x.name if isinstance(x, relax.Var) else name))
        elif _permute_parts(b.value) or any(p.who == DECLINED for p in origin_parts(b.value)):
            # its origin travels in its mark: passes rename it
            att = origin_attribution(b.value)
        elif axes == _TO_NCHW and _only_towards(b.var, outputs, users, producer):
            # read only by layout-agnostic ops on the way to an NCHW output: that output's
            att = Attribution(Reason.OUTPUT_BOUNDARY, None, sources.get(
                x.name if isinstance(x, relax.Var) else name))
        else:
            first_user = next(iter(users.get(b.var, [])), None)
            converted = first_user is not None and first_user in producer and _runs_in(
                producer[first_user].value, layouts)  # into an op ConvertLayout converted
            if (axes == _TO_NHWC or converted) and isinstance(x, relax.Var) and x in producer:
                # After an op that produced the old layout: why did it?
                start, skip_arg = producer[x], None
            else:  # before an op that wants the old layout
                start = producer.get(first_user) if first_user is not None else None
                skip_arg = b.var
            att = _blame(start, skip_arg, producer, derived, inputs, sources, pinned, kept,
                         decided, name)
            if att.reason is Reason.UNTRACED and skip_arg is not None and isinstance(
                    x, relax.Var) and x in producer:
                # nothing on the reader's side wants the old layout (it joins a value in
                # the new one): why the transform's input came in the old layout is the cause
                att = _blame(producer[x], None, producer, derived, inputs, sources, pinned,
                             kept, decided, name)
            if skip_arg is not None and att.reason is Reason.NO_LAYOUT_RULE and \
                    att.relax_op in _CARRIED and start is not None:
                att = _reader_behind(start, users, producer, sources) or att
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
    return replace_function(mod, "main", new_func)


def _runs_in(call: Any, layouts: Mapping[str, Sequence[str]]) -> bool:
    """`call` is an op of `layouts` whose data runs in the layout asked of it (not one a
    module pinned in another, or kept)."""
    wanted = layouts.get(op_name(call) or "")
    data = getattr(getattr(call, "attrs", None), "data_layout", None)
    if not wanted or data is None:
        return False
    return str(data) == wanted[0]


def origin_attribution(call: Any, declines: bool = True) -> Attribution:
    """A marked transform by its parts (`cl_validate.ir.origin_parts`): the model's own
    permute (its sources), one TVM's importer inserted (for which op), or a fold of both;
    kept by a pass that declined to remove it, where one did (unless not `declines`: a
    permute upstream of another transform, blamed for what it is)."""
    parts = _permute_parts(call)
    declined = [p for p in origin_parts(call) if p.who == DECLINED]
    model = [p for p in parts if p.who == MODEL]
    inserted = [p for p in parts if p.who != MODEL]  # by TVM's importer or by our passes
    sources = list(dict.fromkeys(p.source for p in (model or inserted) if p.source))
    source = "; ".join(sources) if sources else None
    inserted_for = ", ".join(dict.fromkeys(
        (p.op or "an op") + ("" if p.who == IMPORTER else f" ({p.who})") for p in inserted))
    if declined and declines:
        return Attribution(Reason.DECLINED, declined[0].op, source, declined[0].source)
    if not parts:
        return Attribution(Reason.UNTRACED, op_name(call), None)
    if not inserted:
        return Attribution(Reason.OWN_PERMUTE, op_name(call), source)
    if not model:
        return Attribution(Reason.IMPORTED, inserted_for, source)
    return Attribution(Reason.FOLDED, inserted_for, source)


def _permute_parts(call: Any) -> list[Part]:
    """The parts of a transform's mark that say who put a permute there: not a pass's
    decline, and not `split_permutes`' shared transpose, which is the split's parts'
    transposes moved before it (traced like them, to what needed them)."""
    return [p for p in origin_parts(call) if p.who != DECLINED and p not in SHARED_PARTS]


def has_layout_rule(op: str | None) -> bool:
    """True if TVM's ConvertLayout has a rule for `op` (``FRelaxInferLayout`` in its op
    registry, where cl_validate's own rules are registered too): it converts the op to the
    desired layout or, lacking a desired one, lets it follow its input's layout."""
    if op is None:
        return False
    try:
        return ir.Op.get(op).get_attr("FRelaxInferLayout") is not None
    except Exception:  # not a registered op
        return False


#: Ops that only view their input in another shape: attribution walks through them to an own
#: permute behind them (a ``view → permute → view`` chain the passes folded), so the model's
#: permute is named rather than the view next to it.
_VIEWS = frozenset({"relax.reshape", "relax.flatten", "relax.squeeze", "relax.expand_dims"})
#: Ops without a rule of TVM's that cl_validate's passes carry a layout through (quantize,
#: clip, ...): a transform next to one that traces back to a graph input is the input's.
_CARRIED = LAYOUT_AGNOSTIC_OPS - _VIEWS
_QDQ = frozenset({"relax.quantize", "relax.dequantize"})


def _blame(start: Any, skip_arg: Any, producer: dict[Any, Any], derived: set[Any],
           inputs: set[Any], sources: dict[str, str], pinned: set[str], kept: set[str],
           decided: set[str], name: str) -> Attribution:
    """Why the op bound at `start` is in the old layout next to a transform.

    An op without a layout rule is the cause itself, unless cl_validate's passes carry a
    layout through it (pad, clip, quantize): then the op it followed is. An op with one
    stayed in the old layout because it followed an input that was in it: walk up its data
    input (skipping
    `skip_arg`, the transform's own side) until an op decided: an op without a rule, the
    model's own permute, an op kept or pinned in the old layout, or a graph input. Views are
    walked through to an own permute behind them, but if none is found the first op without
    a rule is the one named.

    The walk has no step limit: each step goes to the binding of an argument, which comes
    before its use (Relax binds every var before it is read), so it ends at a graph input or
    a constant within as many steps as `main` has bindings.
    """
    first_ruleless = None
    cur, prev_arg = start, skip_arg
    while cur is not None:
        op = op_name(cur.value)
        src = sources.get(cur.var.name)
        module = src.rsplit(" (", 1)[0] if src else None
        if isinstance(cur.value, (relax.Tuple, relax.TupleGetItem)):
            pass  # a concat's parts, bound, or a split's: on through the first, or the split
        elif _permute_parts(cur.value):
            return origin_attribution(cur.value, declines=False)
        elif op in kept:
            return Attribution(Reason.KEPT_LAYOUT, op, src)
        elif module is not None and module in pinned:
            return _pinned(cur, module, producer, derived, sources)
        elif op in decided:
            break  # the case's [layout] put this op in the new layout: the cause is below it
        elif not has_layout_rule(op):
            if op not in _VIEWS and op not in _CARRIED:
                if first_ruleless is None or first_ruleless.relax_op in _CARRIED:
                    # an op our passes carry a layout through only followed this one
                    first_ruleless = Attribution(Reason.NO_LAYOUT_RULE, op, src)
                break
            if first_ruleless is None or (op in _VIEWS and first_ruleless.relax_op in _CARRIED):
                # a view a carried op only followed (a quantize after a view) is the cause
                first_ruleless = Attribution(Reason.NO_LAYOUT_RULE, op, src)
        elif first_ruleless is not None and first_ruleless.relax_op in _VIEWS:
            break  # an op with a rule past a view: the view decided
        args = [a for a in _operands(cur.value) if isinstance(a, relax.Var)
                and not a.same_as(prev_arg) and not is_weight_derived(a, derived)]
        nxt = args[0] if args else None
        if nxt is not None and nxt in inputs:
            # Everything between the input and here follows its layout (ops with a rule, or
            # ops our passes carry a layout through): the input's layout is the cause.
            if first_ruleless is None or first_ruleless.relax_op in _CARRIED:
                return Attribution(Reason.INPUT_BOUNDARY, None, f"input '{nxt.name}'")
            break
        prev_arg, cur = None, producer.get(nxt) if nxt is not None else None
    if first_ruleless is not None:
        return first_ruleless
    if start is not None:
        return Attribution(Reason.UNTRACED, op_name(start.value), sources.get(start.var.name))
    return Attribution(Reason.UNTRACED, None, sources.get(name))


def _operands(value: Any) -> list[Any]:
    """What a binding's value reads: a tuple's fields, a getitem's tuple, a call's arguments
    (a tuple argument's fields in its place)."""
    if isinstance(value, relax.Tuple):
        return list(value.fields)
    if isinstance(value, relax.TupleGetItem):
        return [value.tuple_value]
    return [f for a in getattr(value, "args", [])
            for f in (a.fields if isinstance(a, relax.Tuple) else [a])]


def _reader_behind(start: Any, users: dict[Any, list[Any]], producer: dict[Any, Any],
                   sources: dict[str, str], limit: int = 64) -> Attribution | None:
    """A transform into an op our passes carry a layout through (an unfold's pad, a
    quantize) is there for what reads it in the old layout: follow the single readers past
    such ops to the first op without a rule (the unfold's view), which is named instead."""
    cur = start
    for _ in range(limit):
        op = op_name(cur.value)
        if op not in _CARRIED:
            if has_layout_rule(op) or op is None:
                return None
            return Attribution(Reason.NO_LAYOUT_RULE, op, sources.get(cur.var.name))
        readers = users.get(cur.var, [])
        if len(readers) != 1 or readers[0] is None or readers[0] not in producer:
            return None
        cur = producer[readers[0]]
    return None


def _pinned(cur: Any, module: str, producer: dict[Any, Any], derived: set[Any],
            sources: dict[str, str]) -> Attribution:
    """A pinned module's transform names the module's first op (its convolution, not the
    bias add after it): walk up while the producer belongs to the same module (to earlier
    bindings only, so the walk ends, as `_blame`'s does)."""
    while True:
        args = [a for a in getattr(cur.value, "args", [])
                if isinstance(a, relax.Var) and not is_weight_derived(a, derived)]
        prev = producer.get(args[0]) if args else None
        src = sources.get(prev.var.name) if prev is not None else None
        if prev is None or src is None or src.rsplit(" (", 1)[0] != module:
            break
        cur = prev
    return Attribution(Reason.PINNED, op_name(cur.value), sources.get(cur.var.name))


_ELEMENTWISE = UNARY_OPS | BROADCAST_OPS | {"relax.full_like"}
#: Ops that keep every axis where it is, each output element read from the same position of
#: the others' axes: a transform before them serves as well after them (a resize's taps, a
#: pool, a slice, a pad, a softmax along one axis).
_PER_AXIS = AXIS_OPS | LAYOUT_ATTR_OPS | {"relax.strided_slice", "relax.nn.pad"}


def _keeps_axes(value: Any, read: Any) -> bool:
    """Whether `value`, reading `read`, keeps every axis in place (see `_PER_AXIS`; a take
    with a constant index of at most one axis)."""
    name = op_name(value)
    if name == "relax.take":
        index = value.args[1]
        return value.args[0].same_as(read) and is_tensor_constant(index) and (
            ndim(index) == 1)
    return name in _PER_AXIS and value.args[0].same_as(read) and all(
        tensor_type(a) is None or is_tensor_constant(a) for a in value.args[1:])


def _only_towards(var: Any, outputs: set[Any], users: dict[Any, list[Any]],
                  producer: dict[Any, Any], limit: int = 512) -> bool:
    """Whether every reader of `var`, and of what they compute, is elementwise (casts and
    ``where`` included), keeps every axis in place (a resize's taps, a pool, a slice) or is a
    reduction that keeps its axes, until the values reach the
    graph's outputs: the transform is the output's, moved up (a view or a product reading it
    needs its order for itself)."""
    seen, todo, reached = set(), [var], False
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if len(seen) > limit:
            return False
        if v in outputs:
            reached = True
            continue
        readers = users.get(v, [])
        if not readers:
            return False  # read by nothing we can follow (or by the return itself)
        for u in readers:
            b = producer.get(u) if u is not None else None
            if b is None:
                return False
            name = op_name(b.value)
            if not (name in _ELEMENTWISE or _keeps_axes(b.value, v) or (
                    name in REDUCE_OPS and bool(getattr(b.value.attrs, "keepdims", False)))):
                return False
            todo.append(u)
    return reached


def _output_vars(ret: Any, producer: dict[Any, Any]) -> set[Any]:
    """Vars whose value is returned, following views (reshape, tuple) and the output's own
    quantize → dequantize back from the output."""
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
            elif op_name(v) in _QDQ and isinstance(v.args[0], relax.Var):
                todo.append(v.args[0])  # the output's quantize → dequantize
    return out
