"""HoistPermutes: a transpose after a concat of single-channel parts moves onto the parts;
(and of broadcast planes, and of a part that is a movement chain already);
InterleaveConcats: a concat whose transpose interleaves its parts writes them interleaved.

Inception-v3's ``transform_input`` (and any model that slices an NCHW input into channels,
rescales each and concatenates them back) builds a (N, C, H, W) tensor from (N, 1, H, W)
parts in NCHW and then needs one real transpose to NHWC for the first convolution. Moved onto
the parts, that transpose only moves their size-1 channel axis: a free reshape each
(PermuteToReshape). SinkPermutes cannot find this, as it only moves permutes downwards.

``permute_dims(concat(parts, axis), q)`` equals ``concat([permute_dims(p, q) for p in
parts], axis=q⁻¹[axis])`` exactly (pure data movement). It is rewritten only when the concat
is read by this permute alone and every part's permute moves only size-1 axes (or those of
a broadcast part's input: CoordConv's coordinate planes, ``expand`` of a ``linspace``), or
joins a movement chain the part already is, read by the concat alone (a space-to-depth,
``pixel_unshuffle``, before CoordConv's concat): FoldMovementChains then makes that chain
and the permute one transpose, so the concat's own transpose is gone and no part gains one.

ShuffleNet's channel shuffle after a concat (``cat([a, b], C)``, then ``view(N, 2, C/2, H,
W).transpose(1, 2)``) is, in NHWC, ``concat → reshape(..., 2, C/2) → permute → reshape``:
the permute interleaves the parts. The same tensor is the parts, each viewed with a size-1
axis, concatenated along that axis — ``concat([reshape(a), reshape(b)], axis=t)``: the
concat's own copy writes each part interleaved, with no transpose anywhere (the data moved
once, as before; the concat and the shuffle were one fused kernel, now without a permute).
It is rewritten only when the concat and its view are read by that permute alone, and the
equality is checked element for element on the index arrays (NumPy), so what is rewritten is
exact by construction.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import relax

from cl_validate.compile.passes._util import (
    inverse,
    moves_only_unit_axes,
    rebind,
    relax_function_pass,
)
from cl_validate.ir import (
    bindings,
    is_identity,
    mark_origin,
    op_name,
    origin_tag,
    permute_axes,
    static_shape,
    use_sites,
)

CONCAT = "relax.concat"


def _hoistable(func: relax.Function) -> dict[relax.Var, tuple[relax.Call, relax.Call]]:
    """Each permute (var -> (the permute, the concat it reads)) of a concat read by nothing
    else, that moves only its parts' size-1 axes."""
    uses = use_sites(func)
    values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    found: dict[relax.Var, tuple[relax.Call, relax.Call]] = {}
    for var, value in values.items():
        axes = permute_axes(value)
        src = value.args[0] if axes is not None else None
        if axes is None or is_identity(axes) or not isinstance(src, relax.Var):
            continue
        concat = values.get(src)
        if op_name(concat) != CONCAT or uses.get(src) != [var] or not isinstance(
                concat.args[0], relax.Tuple):  # type: ignore[union-attr]
            continue
        fields = concat.args[0].fields  # type: ignore[union-attr]
        kinds = [_part_kind(f, axes, values, uses) for f in fields]
        # a real transpose becomes free ones, or joins the ones its parts already are
        if None not in kinds:
            found[var] = (value, concat)  # type: ignore[assignment]
    return found


_CHAIN = ("relax.permute_dims", "relax.reshape")


def _part_kind(part: relax.Expr, axes: tuple[int, ...], values: dict[relax.Var, relax.Expr],
               uses: dict[relax.Var, list[relax.Var | None]]) -> str | None:
    """What the permute `axes` costs on one part of the concat: "free" when it moves only
    size-1 axes, or the part is a broadcast of a value it would move so (coordinate planes:
    CoordConv's ``linspace(...).expand(B, 1, H, W)``); "chain" when the part is a movement
    chain holding a permute, read by the concat alone (a space-to-depth), which the permute
    joins (FoldMovementChains makes them one transpose); None otherwise."""
    shape = static_shape(part)
    if shape is None or len(shape) != len(axes):
        return None
    if moves_only_unit_axes(shape, axes):
        return "free"
    value = values.get(part) if isinstance(part, relax.Var) else None
    if op_name(value) == "relax.broadcast_to":
        small = static_shape(value.args[0])  # type: ignore[union-attr]
        return "free" if small is not None and len(small) == len(axes) and (
            moves_only_unit_axes(small, axes)) else None
    seen = part
    while isinstance(seen, relax.Var) and op_name(values.get(seen)) in _CHAIN and len(
            uses.get(seen, [])) == 1:
        if permute_axes(values[seen]) is not None:
            return "chain"
        seen = values[seen].args[0]  # type: ignore[union-attr]
    return None


def _hoisted(m: Any, hit: tuple[relax.Call, relax.Call], _var: relax.Var) -> relax.Expr:
    """The concat of the parts, each permuted."""
    permute, concat = hit
    axes = permute_axes(permute)
    assert axes is not None
    origin = origin_tag(permute)
    parts = [_permuted(m, m.visit_expr(f), list(axes), origin) for f in concat.args[0].fields]
    return relax.op.concat(parts, axis=inverse(axes)[int(concat.attrs.axis) % len(axes)])


def _permuted(m: Any, part: relax.Expr, axes: list[int], origin: Any) -> relax.Expr:
    """`part` permuted; a broadcast as the broadcast of its permuted input (a free view)."""
    value = m.builder_.lookup_binding(part) if isinstance(part, relax.Var) else None
    if op_name(value) == "relax.broadcast_to":
        small = m.builder_.emit(relax.op.permute_dims(value.args[0], axes))  # type: ignore[union-attr]
        shape = static_shape(part) or ()
        return m.builder_.emit(relax.op.broadcast_to(small, [shape[a] for a in axes]))
    return m.builder_.emit(mark_origin(relax.op.permute_dims(part, axes), origin))


def hoist_permutes(func: relax.Function) -> relax.Function:
    """Permutes of concats move onto the parts where they would only reshape them (or the
    small input of a broadcast part), or join a part's own movement chain."""
    return rebind(func, _hoistable(func), _hoisted)


HoistPermutes = relax_function_pass("HoistPermutes")(hoist_permutes)

RESHAPE = "relax.reshape"
#: Index arrays simulated to prove an interleave (elements of the concat's output)
_MAX_SIMULATED = 1 << 24


def _interleave_axis(part_shapes: list[tuple[int, ...]], axis: int, view: tuple[int, ...],
                     axes: tuple[int, ...]) -> int | None:
    """The axis `t` at which concatenating the parts, each viewed with a size-1 axis there,
    gives ``permute_dims(reshape(concat(parts, axis), view), axes)``; None when no axis
    does (checked on the elements' indices)."""
    whole = list(part_shapes[0])
    whole[axis] = sum(s[axis] for s in part_shapes)
    size = int(np.prod(whole))
    if size > _MAX_SIMULATED or int(np.prod(view)) != size:
        return None
    index = np.arange(size).reshape(whole)
    bounds = np.cumsum([s[axis] for s in part_shapes])[:-1]
    parts = np.split(index, bounds, axis=axis)
    target = index.reshape(view).transpose(axes)
    for t, n in enumerate(target.shape):
        if n != len(parts):
            continue
        each = list(target.shape)
        each[t] = 1
        if any(p.size != int(np.prod(each)) for p in parts):
            continue
        if np.array_equal(np.concatenate([p.reshape(each) for p in parts], axis=t), target):
            return t
    return None


def _known(expr: object) -> tuple[int, ...] | None:
    """`expr`'s shape when every extent is known."""
    shape = static_shape(expr)
    if shape is None or any(d is None for d in shape):
        return None
    return tuple(int(d) for d in shape if d is not None)


def _interleavable(func: relax.Function) -> dict[relax.Var, tuple[relax.Call, int]]:
    """Each permute of a view of a concat (both read by it alone) that interleaves the
    concat's parts: its var → (the concat, the axis to concatenate the viewed parts on)."""
    uses = use_sites(func)
    values = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    found: dict[relax.Var, tuple[relax.Call, int]] = {}
    for var, value in values.items():
        axes = permute_axes(value)
        view_var = value.args[0] if axes is not None else None
        if axes is None or is_identity(axes) or not isinstance(view_var, relax.Var):
            continue
        view = values.get(view_var)
        src = view.args[0] if op_name(view) == RESHAPE else None  # type: ignore[union-attr]
        concat = values.get(src) if isinstance(src, relax.Var) else None
        if (op_name(concat) != CONCAT or uses.get(view_var) != [var] or uses.get(src) != [
                view_var] or not isinstance(concat.args[0], relax.Tuple)):  # type: ignore
            continue
        shapes = [_known(f) for f in concat.args[0].fields]  # type: ignore[union-attr]
        viewed = _known(view_var)
        full = [s for s in shapes if s is not None]
        if viewed is None or len(full) != len(shapes):
            continue
        axis = int(concat.attrs.axis) % len(full[0])  # type: ignore[union-attr]
        t = _interleave_axis(full, axis, viewed, tuple(axes))
        if t is not None:
            found[var] = (concat, t)  # type: ignore[assignment]
    return found


def _interleaved(m: Any, hit: tuple[relax.Call, int], var: relax.Var) -> relax.Expr:
    """The concat of the parts, each viewed with a size-1 axis at the axis found."""
    concat, t = hit
    shape = list(_known(var) or ())
    shape[t] = 1
    parts = [m.builder_.emit(relax.op.reshape(m.visit_expr(f), shape))
             for f in concat.args[0].fields]
    return mark_origin(relax.op.concat(parts, axis=t), origin_tag(concat))


def interleave_concats(func: relax.Function) -> relax.Function:
    """Permutes that interleave a concat's parts become the concat of the viewed parts."""
    return rebind(func, _interleavable(func), _interleaved)


InterleaveConcats = relax_function_pass("InterleaveConcats")(interleave_concats)

__all__ = ["HoistPermutes", "InterleaveConcats", "hoist_permutes", "interleave_concats"]
