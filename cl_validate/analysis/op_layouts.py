"""Which layout each layout-sensitive op (convolution, pooling, resize, …) runs in."""

from __future__ import annotations

import tvm
from tvm import relax

from cl_validate.ir import bindings, known_shape, op_name
from cl_validate.measurements.kernel_list import OpLayout

_LAYOUT_ATTRS = ("data_layout", "kernel_layout", "out_layout", "layout")
#: which argument of the op each layout describes
_OPERAND = {"data_layout": 0, "layout": 0, "kernel_layout": 1}


def op_layouts(mod: tvm.IRModule, sources: dict[str, str] | None = None) -> list[OpLayout]:
    """Every op in main with layout attributes (convolutions, pooling, resize, …).

    `sources` (binding name → "module.path (op)") gives each op its nn.Module path.
    """
    out: list[OpLayout] = []
    for b in bindings(mod["main"]):
        call = b.value
        if not isinstance(call, relax.Call) or op_name(call) is None or call.attrs is None:
            continue
        layouts: dict[str, str] = {}
        shapes: dict[str, tuple[int, ...]] = {}
        for key in _LAYOUT_ATTRS:
            try:
                value = getattr(call.attrs, key)
            except AttributeError:
                continue
            if value is not None and str(value):
                layouts[key] = str(value)
                arg = _OPERAND.get(key)
                shape = known_shape(call.args[arg]) if arg is not None and \
                    len(call.args) > arg else None
                if shape is not None:
                    shapes[key] = shape
        if layouts:
            src = (sources or {}).get(b.var.name)
            module = src.rsplit(" (", 1)[0] if src and not src.startswith("(") else None
            out.append(OpLayout(str(op_name(call)), b.var.name, layouts, module, shapes))
    return out
