"""Import: which PyTorch node made each Relax binding, and the import's permutes marked with
their origin.

torch.export's node metadata (the nn.Module path, the op, the stack trace) is joined to the
Relax bindings the importer made for each node, by binding name (which TVM's passes keep);
every transform the import holds is marked as the model's own permute (the exported graph's
op permutes axes) or one TVM's importer inserted for another op. Attribution
(`cl_validate.compile.attribution`) reads both after the layout stages.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.ir import (
    IMPORTER,
    MODEL,
    TRANSFORM_OPS,
    Part,
    bindings,
    known_shape,
    mark_origin,
    op_name,
    origin_mark,
    replace_function,
)


# --------------------------------------------------------------------------------------------
# Import: Relax binding name -> PyTorch source
# --------------------------------------------------------------------------------------------
def node_source(node: Any) -> str | None:
    """``module.path (op)`` for an FX node of an exported program; code in the model's own
    ``forward`` (no submodule to name) says where: ``(permute at nets.py:12)``."""
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
    op = (op or "").rstrip("_0123456789").lstrip("_") or op
    if path:
        return f"{path} ({op})"
    where = code_line(meta.get("stack_trace"))
    return f"({op} at {where})" if where else f"({op})"


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def code_line(trace: object) -> str | None:
    """``file.py:LINE`` of the innermost frame of an FX node's stack trace."""
    frames = _FRAME.findall(trace) if isinstance(trace, str) else []
    if not frames:
        return None
    file, line = frames[-1]
    return f"{file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{line}"


#: The exported graph's ops that permute a tensor's axes: a transform made for one of these
#: the model's code asked for. Any other op's converter that emits a permute (the importer's
#: BHSD -> BSHD for scaled_dot_product_attention, a batch-first RNN's) inserted it itself.
_PERMUTING_ATEN = frozenset({"permute", "transpose", "t", "swapaxes", "swapdims", "movedim",
                             "numpy_T", "mT", "mH", "adjoint", "pixel_shuffle",
                             "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle"})


def _aten_name(node: Any) -> str:
    """``permute`` for ``aten.permute.default``; the node's target name otherwise."""
    target = getattr(node, "target", None)
    name = getattr(target, "__name__", str(target))
    return name.split(".")[0]


def _by_binding(mod: Any, env: dict[Any, Any], what: Any) -> dict[str, str]:
    """``what(node)`` for each binding of the imported main. A node that aliases another's
    value (``contiguous``, a no-op ``clone``) is not its producer: the first node wins.
    Converters emit their helper bindings first and return the last one, so every binding
    is attributed to the next binding that an FX node maps to."""
    by_var: dict[Any, str] = {}
    for node, value in env.items():
        if isinstance(value, relax.Var) and value not in by_var:
            found = what(node)
            if found:
                by_var[value] = found
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


def sources_by_binding(mod: Any, env: dict[Any, Any]) -> dict[str, str]:
    """Map each binding name of the imported main to the PyTorch node that produced it."""
    return _by_binding(mod, env, node_source)


def ops_by_binding(mod: Any, env: dict[Any, Any]) -> dict[str, str]:
    """Map each binding name of the imported main to the exported graph's op it was made
    for (``permute``, ``scaled_dot_product_attention``)."""
    return _by_binding(mod, env, lambda n: _aten_name(n) if n.op == "call_function" else None)


def _window_movement(binding: Any, values: dict[Any, Any]) -> str | None:
    """"window partition" or "window reverse" when the permute is one (Swin, TinyViT): a
    6-D view ``(B, H/w, w, W/w, w, C)`` whose second and third axes swap, made from a map
    (partition) or viewed back into one (reverse). Its data movement no layout removes: the
    report names it for what it is."""
    call = binding.value
    axes = [int(a) for a in call.attrs.axes] if getattr(call.attrs, "axes", None) is not None \
        else None
    if axes != [0, 1, 3, 2, 4, 5]:
        return None
    src = call.args[0]
    producer = values.get(src) if isinstance(src, relax.Var) else None
    six, before = known_shape(src), None
    if producer is not None and op_name(producer) == "relax.reshape":
        before = known_shape(producer.args[0])
    if six is None or before is None or len(before) not in (3, 4) or before[-1] != six[5]:
        return None
    if before[0] == six[0] and (before[1:-1] == (six[1] * six[2], six[3] * six[4]) or
                                before[1:-1] == (six[1] * six[2] * six[3] * six[4],)):
        return "window partition"  # (B, H, W, C) or (B, H·W, C) -> (B, H/w, w, W/w, w, C)
    if before[0] == six[0] * six[1] * six[2]:
        return "window reverse"  # (B·H/w·W/w, w, w, C) -> (B, H/w, W/w, w, w, C)
    return None


def mark_import_permutes(import_mod: Any, sources: dict[str, str], ops: dict[str, str],
                         skip: Iterable[str] = ()) -> Any:
    """The imported module with every transform in main marked with its origin
    (`cl_validate.ir.ORIGIN_SPAN`): the model's own when the exported graph's op it was made
    for permutes axes (a ``permute``, ``transpose``, ...), else TVM's importer, for that op
    (``scaled_dot_product_attention``: its converter permutes BHSD into BSHD and back). Each
    with its PyTorch source from `sources` and the op from `ops` (by binding name, as
    `sources_by_binding` and `ops_by_binding` give them). The bindings named in `skip` (the
    permutes of cl_validate's channels-last wrapper) are left unmarked."""
    func = import_mod["main"]
    skipped = set(skip)
    if not any(op_name(b.value) in TRANSFORM_OPS and b.var.name not in skipped
               for b in bindings(func)):
        return import_mod

    values = {b.var: b.value for b in bindings(func)}

    def origin(binding: Any) -> str | None:
        name = binding.var.name
        op = ops.get(name)
        who = MODEL if op is None or op in _PERMUTING_ATEN else IMPORTER
        source = sources.get(name)
        window = _window_movement(binding, values) if who == MODEL else None
        if window is not None:  # "stage1.0 (permute)" -> "stage1.0 (window partition)"
            head, _, tail = (source or "(permute)").rpartition("(")
            where = tail.split(" at ", 1)
            source = f"{head}({window}{' at ' + where[1] if len(where) > 1 else ')'}"
        return origin_mark([Part(who, source, None if who == MODEL else op)])

    @mutator
    class _Mark(PyExprMutator):
        def visit_var_binding_(self, binding: Any) -> None:
            if op_name(binding.value) not in TRANSFORM_OPS or binding.var.name in skipped:
                super().visit_var_binding_(binding)
                return
            call = binding.value
            new = mark_origin(relax.Call(call.op, [self.visit_expr(a) for a in call.args],
                                         call.attrs, call.ty_args), origin(binding))
            self.builder_.emit_normalized(relax.VarBinding(binding.var,
                                                           self.builder_.normalize(new)))

    body = _Mark().visit_expr(func.body)
    new_func = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)
    return replace_function(import_mod, "main", new_func)
