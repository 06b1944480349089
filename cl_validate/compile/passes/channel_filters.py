"""UnfoldChannelFilters: a filter run on every channel by folding the channels into the batch,
as the depthwise convolution it is.

Blur and FIR code filters each channel alike by viewing ``(N, C, H, W)`` as ``(N·C, 1, H, W)``
(StyleGAN's ``upfirdn2d``, kornia's ``filter2d``, Gaussian blurs, anti-aliased resampling):
each plane is padded, zero-stuffed, sliced or permuted on its own, convolved with a one-channel
kernel and viewed back as ``(N, C, H', W')``. The fold has no layout rule: in a channels-last
program every filter costs a transpose into channels-first order before it and one back after
it, and its convolution runs on one channel.

The region between the fold and the views back holds only ops that treat each of the ``N·C``
planes alone (views and permutes that keep axis 0, pads, slices and constant-index gathers off
axis 0, elementwise ops whose other operands do not vary along it, the one-channel
convolutions). Every tensor of the
region is read as ``(N, C, …)`` instead (the same memory), each op acts on the same trailing
axes, and each convolution ``(N·C, 1, …) * (K, 1, …)`` becomes a depthwise one: ``groups = C``,
the kernel repeated once per channel, output ``(N, C·K, …)``, which is ``(N, C, K, …)``. Every
output value is the same sum of the same products. ConvertLayout then carries the depthwise
convolution into the case's layout like any other.

A region that no converted op reads or feeds (a filter between the graph's input and output)
would gain transforms, so the pipeline keeps the rewrite only where its layout stages then
leave fewer run-time transforms (`cl_validate.compile.pipeline`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator

from cl_validate.compile.passes._layout_ops import BROADCAST_OPS, UNARY_OPS
from cl_validate.compile.passes._plan import remake, with_fields
from cl_validate.compile.passes._util import moves_only_unit_axes, rebind, relax_function_pass
from cl_validate.ir import (
    bindings,
    is_weight_derived,
    known_shape,
    mark_origin,
    op_name,
    origin_tag,
    permute_axes,
    strided_slice_args,
    tensor_type,
    use_sites,
    weight_derived,
)

_CONVS = {"relax.nn.conv1d": ("NCW", "OIW"), "relax.nn.conv2d": ("NCHW", "OIHW")}
Shape = tuple[int, ...]


@dataclass
class _Region:
    """One batch-folded filter: the vars whose axis 0 is ``n·c`` planes."""

    n: int = 0
    c: int = 0
    members: set[relax.Var] = field(default_factory=set)
    entries: dict[relax.Var, relax.Expr] = field(default_factory=dict)  # fold → unfolded src
    exits: set[relax.Var] = field(default_factory=set)  # the views out of the planes

    def agrees(self, n: int, c: int) -> bool:
        if self.n == 0:
            self.n, self.c = n, c
        return (self.n, self.c) == (n, c)


def _is_filter(call: relax.Call, batch: int, derived: set[relax.Var]) -> bool:
    """A convolution of `batch` one-channel planes with a constant kernel."""
    layouts = _CONVS.get(op_name(call) or "")
    if layouts is None:
        return False
    attrs = call.attrs
    data, kernel = known_shape(call.args[0]), known_shape(call.args[1])
    return (data is not None and kernel is not None and data[0] == batch and data[1] == 1
            and kernel[1] == 1 and int(attrs.groups) == 1
            and (str(attrs.data_layout), str(attrs.kernel_layout)) == layouts
            and str(attrs.out_layout) == layouts[0]
            and is_weight_derived(call.args[1], derived))


def _folded_operands(call: relax.Call, batch: int, rank: int,
                     derived: set[relax.Var]) -> list[relax.Expr] | None:
    """The operands of a per-plane op that carry the folded axis, None if `call` is not an op
    that treats each plane alone (the result has `batch` planes and rank `rank`)."""
    name = op_name(call) or ""
    x = call.args[0] if call.args else None
    if name == "relax.reshape":
        src = known_shape(x)
        return [x] if src and src[0] == batch else None
    if name == "relax.permute_dims":
        axes = permute_axes(call)
        return [x] if axes is not None and axes[0] == 0 else None
    if name == "relax.nn.pad":
        widths = [int(w) for w in call.attrs.pad_width]
        return [x] if widths[:2] == [0, 0] else None
    if name == "relax.strided_slice":
        sliced = strided_slice_args(call)
        return [x] if sliced is not None and all(int(a) % rank for a in sliced[0]) else None
    if name == "relax.take":  # a gather along a plane's axis (reflect padding's index)
        axis = call.attrs.axis
        return [x] if axis is not None and int(axis) % rank and \
            is_weight_derived(call.args[1], derived) else None
    if name in _CONVS:
        return [x] if _is_filter(call, batch, derived) else None
    if name in UNARY_OPS:
        return [x] if all(tensor_type(a) is None for a in call.args[1:]) else None
    if name in BROADCAST_OPS:
        folded = []
        for a in call.args:
            shape = known_shape(a)
            if tensor_type(a) is None:
                continue
            if shape is None:
                return None
            if len(shape) == rank and shape[0] == batch:
                folded.append(a)
            elif len(shape) == rank and shape[0] != 1:
                return None
        return folded
    return None


def _grow(seed: relax.Var, batch: int, values: Mapping[relax.Var, relax.Expr],
          uses: Mapping[relax.Var, list[relax.Var | None]],
          derived: set[relax.Var]) -> _Region | None:
    """The region of the filter bound to `seed` (of `batch` planes), None where any part of
    it does not fit."""
    region = _Region()
    todo = [seed]
    while todo:
        var = todo.pop()
        if var in region.members or var in region.entries:
            continue
        value, shape = values.get(var), known_shape(var)
        if not isinstance(value, relax.Call) or not shape or shape[0] != batch:
            return None
        src = known_shape(value.args[0]) if value.args else None
        if op_name(value) == "relax.reshape" and src and src[0] != batch:
            # the fold: (n, c, ...) viewed as (n·c, ...)
            if len(src) < 2 or src[0] * src[1] != batch or src[1] < 2 or \
                    not region.agrees(src[0], src[1]):
                return None
            region.entries[var] = value.args[0]
        else:
            folded = _folded_operands(value, batch, len(shape), derived)
            if folded is None:
                return None
            region.members.add(var)
            todo.extend(a for a in folded if isinstance(a, relax.Var))
            if any(not isinstance(a, relax.Var) for a in folded):
                return None
        for reader in uses.get(var, [None]):
            if reader is None:
                return None
            out = known_shape(reader)
            if out is None:
                return None
            if op_name(values.get(reader)) == "relax.reshape" and (not out or out[0] != batch):
                # a view out of the planes (its memory is the (n, c, ...) tensor's)
                region.exits.add(reader)
            else:
                todo.append(reader)
    if not region.entries or not region.exits or not any(
            op_name(values[v]) in _CONVS for v in region.members):
        return None
    return region


def _regions(func: relax.Function, values: Mapping[relax.Var, relax.Expr]) -> list[_Region]:
    uses = use_sites(func)
    derived = weight_derived(func)
    found: list[_Region] = []
    taken: set[relax.Var] = set()
    for var, value in values.items():
        data = known_shape(value.args[0]) if op_name(value) in _CONVS else None
        if var in taken or not data or not _is_filter(value, data[0], derived):  # type: ignore[arg-type]
            continue
        region = _grow(var, data[0], values, uses, derived)  # type: ignore[index]
        if region is not None and not (region.members & taken):
            found.append(region)
            taken |= region.members
    return found


class _Unfold:
    """Rebuilds a region's vars as ``(n, c, ...)`` tensors, each once."""

    def __init__(self, region: _Region, values: Mapping[relax.Var, relax.Expr],
                 views: dict[relax.Expr, relax.Expr]) -> None:
        self.region, self.values = region, values
        self.done: dict[relax.Var, relax.Expr] = {}
        # a reshape bound here (of every region, so one filter's view out of its planes and
        # the next one's fold are one view) → what it views
        self.views = views

    def _view(self, x: relax.Expr, shape: Shape) -> relax.Expr:
        """``reshape(x, shape)``, of what `x` views when `x` is a reshape emitted here: one
        view from the fold to each op, which the layout stages carry like any view."""
        return relax.op.reshape(self.views.get(x, x), shape)

    def __call__(self, m: PyExprMutator, exit_var: relax.Var) -> relax.Expr:
        back = self.values[exit_var]
        assert isinstance(back, relax.Call)
        out = self._view(self.unfolded(m, back.args[0]), known_shape(exit_var))  # type: ignore[arg-type]
        self.views[exit_var] = out.args[0]
        return out

    def unfolded(self, m: PyExprMutator, var: relax.Var) -> relax.Expr:
        if var not in self.done:
            value = self._rebuilt(m, var)
            self.done[var] = m.builder_.emit(value)
            if op_name(value) == "relax.reshape":
                self.views[self.done[var]] = value.args[0]
        return self.done[var]

    def _arg(self, m: PyExprMutator, a: relax.Expr) -> relax.Expr:
        if a in self.region.members or a in self.region.entries:
            return self.unfolded(m, a)  # type: ignore[arg-type]
        return m.visit_expr(a)

    def _rebuilt(self, m: PyExprMutator, var: relax.Var) -> relax.Expr:
        n, c = self.region.n, self.region.c
        shape: Shape = known_shape(var)  # type: ignore[assignment]
        value = self.values[var]
        assert isinstance(value, relax.Call)
        if var in self.region.entries:
            return self._view(m.visit_expr(self.region.entries[var]), (n, c, *shape[1:]))
        args = [self._arg(m, a) for a in value.args]
        name = op_name(value)
        if name == "relax.reshape":
            return self._view(args[0], (n, c, *shape[1:]))
        if name == "relax.permute_dims":
            # one that moves only size-1 axes (a plane's channel axis) is a view: the layout
            # stages then see one chain of views from the fold to the filter
            perm, src = permute_axes(value), known_shape(value.args[0])
            assert perm is not None and src is not None  # a member's shapes are known
            if moves_only_unit_axes(src, perm):
                return self._view(args[0], (n, c, *shape[1:]))
            axes = [0, 1, *(a + 1 for a in perm[1:])]
            return mark_origin(relax.op.permute_dims(args[0], axes), origin_tag(value))
        if name == "relax.nn.pad":
            widths = [0, 0, *(int(w) for w in value.attrs.pad_width)]
            return remake(value, args, with_fields(value.attrs, pad_width=widths))
        if name == "relax.strided_slice":
            axes, begin, end, *strides = strided_slice_args(value)  # type: ignore[misc]
            return relax.op.strided_slice(
                args[0], [int(a) % len(shape) + 1 for a in axes], begin, end,
                strides[0] if strides else None,
                assume_inbound=bool(value.attrs.assume_inbound))
        if name == "relax.take":
            axis = int(value.attrs.axis) % len(known_shape(value.args[0])) + 1  # type: ignore[arg-type]
            return remake(value, args, with_fields(value.attrs, axis=axis))
        if name in _CONVS:
            return self._depthwise(m, value, args[0], shape)
        return remake(value, args)  # elementwise: the same op on (n, c, ...) operands

    def _depthwise(self, m: PyExprMutator, conv: relax.Call, data: relax.Expr,
                   shape: Shape) -> relax.Expr:
        """``(n, c, 1, ...) * (k, 1, ...)`` as ``(n, c, ...) * (c·k, 1, ...)``, groups = c."""
        n, c = self.region.n, self.region.c
        planes = known_shape(conv.args[0])[2:]  # type: ignore[index]
        kernel = m.visit_expr(conv.args[1])
        rank = len(known_shape(conv.args[1]))  # type: ignore[arg-type]
        repeated = m.builder_.emit(relax.op.tile(kernel, [c] + [1] * (rank - 1)))
        flat = m.builder_.emit(self._view(data, (n, c, *planes)))
        out = m.builder_.emit(remake(conv, [flat, repeated], with_fields(conv.attrs, groups=c)))
        return self._view(out, (n, c, *shape[1:]))


def unfold_channel_filters(func: relax.Function) -> relax.Function:
    """Every batch-folded one-channel filter as a depthwise convolution on ``(N, C, …)``."""
    values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    plans: dict[relax.Var, _Unfold] = {}
    views: dict[relax.Expr, relax.Expr] = {}
    for region in _regions(func, values):
        unfold = _Unfold(region, values, views)
        plans.update(dict.fromkeys(region.exits, unfold))
    return rebind(func, plans, lambda m, unfold, var: unfold(m, var))


UnfoldChannelFilters = relax_function_pass("UnfoldChannelFilters")(unfold_channel_filters)

__all__ = ["UnfoldChannelFilters", "unfold_channel_filters"]
