"""Each output's quantization step, read off the exported QDQ graph
(`cl_validate.measurements.quant_steps`).

Walking back from an output, the first dequantize of an activation (one whose codes derive
from the model's input, not a weight's) gives the step. Ops that keep a value on its grid
(reshapes, permutes, ReLU, max pooling, slicing) leave the output on the dequantize's grid;
any other op leaves it off the grid, and the step is then that of the nearest activation
dequantize feeding it (the largest where several are equally near): the last quantize before
the output, its scale propagated. An average or an add of values off by a step each is off by
at most a step each. A product (a Linear or a conv) that nothing quantizes again (the last
Linear under the X86 and Arm quantizers) is on the grid of its accumulator instead, the
activation's step times the weight's: counted in the activation's step alone, a program that
dropped every quantize came within half a step and passed `steps = 1`. An output with no
dequantize behind it has no step (a float model).
"""

from __future__ import annotations

from typing import Any

import torch

from cl_validate.measurements.quant_steps import OutputStep

#: ops whose result lies on the grid of their (quantized) input
_ON_GRID = frozenset({
    "view", "reshape", "_unsafe_view", "flatten", "permute", "transpose", "t", "contiguous",
    "clone", "squeeze", "unsqueeze", "expand", "relu", "relu_", "max_pool2d",
    "max_pool2d_with_indices", "getitem", "slice", "select", "alias", "detach", "dropout",
    "cat", "concat", "_to_copy", "to",
})
_DEQUANTIZE = ("dequantize_per_tensor", "dequantize_per_channel")
#: products whose output is the sum of code products: when nothing quantizes it, its grid is
#: the activation's step times the weight's (the int32 accumulator's unit), not the
#: activation's alone
_PRODUCTS = frozenset({"addmm", "mm", "bmm", "matmul", "linear", "conv1d", "conv2d", "conv3d",
                       "convolution", "conv_transpose1d", "conv_transpose2d",
                       "conv_transpose3d"})


def _op(node: torch.fx.Node) -> str:
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    name = getattr(packet, "__name__", None) or getattr(target, "__name__", None)
    return str(name or target)


def _user_derived(ep: torch.export.ExportedProgram) -> set[torch.fx.Node]:
    """Nodes whose value depends on a user input (activations, not weights)."""
    users = set(ep.graph_signature.user_inputs)
    derived: set[torch.fx.Node] = set()
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            if node.name in users:
                derived.add(node)
        elif any(a in derived for a in node.all_input_nodes):
            derived.add(node)
    return derived


def _constant(ep: torch.export.ExportedProgram, node: torch.fx.Node) -> Any:
    sig = ep.graph_signature
    name = sig.inputs_to_lifted_tensor_constants.get(node.name)
    if name is not None:
        return ep.constants[name]
    name = sig.inputs_to_buffers.get(node.name) or sig.inputs_to_parameters.get(node.name)
    return ep.state_dict.get(name) if name is not None else None


def _scale(ep: torch.export.ExportedProgram, node: torch.fx.Node) -> float | None:
    """A dequantize's scale (per channel: its largest), or None when it is computed at run
    time."""
    scale = node.args[1] if len(node.args) > 1 else node.kwargs.get("scale")
    if isinstance(scale, torch.fx.Node):
        scale = _constant(ep, scale)
    if isinstance(scale, torch.Tensor):
        return float(scale.detach().abs().max()) if scale.numel() else None
    return float(scale) if isinstance(scale, (int, float)) else None


def _weight_scale(ep: torch.export.ExportedProgram, product: torch.fx.Node,
                  derived: set[torch.fx.Node]) -> float | None:
    """The step of `product`'s quantized weight (per channel: its largest), found back from
    its operands through views to a dequantize of a constant; None when it has none."""
    todo = [a for a in product.all_input_nodes if a not in derived]
    seen: set[torch.fx.Node] = set()
    while todo:
        n = todo.pop()
        if n in seen or n.op != "call_function":
            continue
        seen.add(n)
        if _op(n) in _DEQUANTIZE:
            return _scale(ep, n)
        if _op(n) in _ON_GRID:
            todo.extend(a for a in n.all_input_nodes if a not in derived)
    return None


def _step(ep: torch.export.ExportedProgram, out: torch.fx.Node,
          derived: set[torch.fx.Node]) -> OutputStep | None:
    """Breadth first from `out` to the nearest activation dequantize(s)."""
    parent: dict[torch.fx.Node, torch.fx.Node | None] = {out: None}
    level = [out]
    while level:
        found = [n for n in level if n.op == "call_function" and _op(n) in _DEQUANTIZE
                 and n in derived]
        scales = [(s, n) for n in found if (s := _scale(ep, n)) is not None]
        if scales:
            scale, node = max(scales, key=lambda sn: sn[0])
            path = []
            at = parent[node]
            consumer = at
            while at is not None:
                path.append(_op(at))
                at = parent[at]
            if consumer is not None and _op(consumer) in _PRODUCTS:
                weight = _weight_scale(ep, consumer, derived)
                if weight is not None:  # an unquantized product: the accumulator's unit
                    scale *= weight
            return OutputStep(scale, all(p in _ON_GRID for p in path), tuple(path))
        nxt = []
        for n in level:
            if n.op != "call_function" or _op(n) in _DEQUANTIZE:
                continue
            for a in n.all_input_nodes:
                if a in derived and a not in parent:
                    parent[a] = n
                    nxt.append(a)
        level = nxt
    return None


def output_steps(ep: torch.export.ExportedProgram) -> list[OutputStep | None]:
    """Each output's quantization step (None: no quantize before it), in output order."""
    derived = _user_derived(ep)
    (output,) = [n for n in ep.graph.nodes if n.op == "output"]
    flat = torch.utils._pytree.tree_leaves(output.args[0])
    return [_step(ep, o, derived) if isinstance(o, torch.fx.Node) else None for o in flat]
