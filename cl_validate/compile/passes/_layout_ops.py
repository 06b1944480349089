"""Which Relax ops are layout-agnostic, and how to run each one in a permuted layout.

An op is layout-agnostic when ``op(permute(a, p), ...) == permute(op'(a, ...), p')`` holds
exactly, with ``op'`` the same op under remapped attributes (an axis, a layout string) and
``p'`` derived from ``p``. That is pure bookkeeping on axes: elementwise ops compute the same
floating-point operation per element, so results are bit-identical. Reductions (mean, softmax,
pooling) reduce the same elements; TVM's default lowering visits them in the same order in
either layout (bit-identical in our tests), though a tuned schedule is free to order partial
sums differently for a different memory layout, as it is for the layouts ConvertLayout picks.
GroupNorm / InstanceNorm are the exception by construction: their statistics sum over the
channels of a group and the pixels, and in NHWC the channels come innermost, so the sum runs
in another order (a rounding difference, as under TVM's own group_norm rule).

``plan_for(call, perm_of)`` answers for one call: given the permutation each operand is
available in (``perm_of``), can the call run in that layout, and how is it rebuilt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tvm import relax

from cl_validate.compile.passes._movement_ops import MOVEMENT_HANDLERS
from cl_validate.compile.passes._plan import (
    Operand,
    PermOf,
    Plan,
    remake,
    with_fields,
)
from cl_validate.compile.passes._util import Perm, inverse
from cl_validate.ir import is_tensor_constant, ndim, op_name, tensor_type

# Elementwise ops whose only tensor argument is the first (the rest are PrimValues or attrs).
UNARY_OPS = frozenset(f"relax.{n}" for n in (
    "abs acos acosh asin asinh atan atanh bitwise_not ceil clip cos cosh erf exp floor "
    "isfinite isinf isnan log logical_not negative round rsqrt sigmoid sign sin sinh sqrt "
    "square tan tanh trunc astype zeros_like ones_like "
    "nn.relu nn.gelu nn.gelu_tanh nn.silu nn.selu nn.leakyrelu nn.softplus").split())
# Elementwise ops with numpy broadcasting over all (tensor) arguments.
BROADCAST_OPS = frozenset(f"relax.{n}" for n in (
    "add subtract multiply divide floor_divide floor_mod mod power maximum minimum atan2 "
    "equal not_equal greater greater_equal less less_equal logical_and logical_or logical_xor "
    "bitwise_and bitwise_or bitwise_xor left_shift right_shift log_add_exp where ewise_fma"
).split())
REDUCE_OPS = frozenset(f"relax.{n}" for n in "mean sum max min prod variance std".split())
# quantize/dequantize(x, scale, zero_point, axis): the scale and zero point are scalars (per
# tensor) or vectors along ``axis`` (per channel): the axis follows the data, they stay as
# they are. The int8 codes and the float values are the same, element for element.
# cumsum/cumprod scan, sort/argsort order along their axis alone (argsort's indices count
# along it, which a permutation of the other axes leaves as they are).
AXIS_OPS = frozenset({"relax.nn.softmax", "relax.nn.log_softmax", "relax.nn.prelu",
                      "relax.quantize", "relax.dequantize", "relax.cumsum", "relax.cumprod",
                      "relax.sort", "relax.argsort", "relax.flip"})
LAYOUT_ATTR_OPS = frozenset({"relax.nn.max_pool2d", "relax.nn.avg_pool2d",
                             "relax.nn.adaptive_avg_pool2d", "relax.image.resize2d",
                             "relax.nn.max_pool3d", "relax.nn.avg_pool3d",
                             "relax.nn.adaptive_avg_pool3d"})


def _unary(call: relax.Call, perm_of: PermOf) -> Plan | None:
    x, rest = call.args[0], list(call.args[1:])
    p = perm_of(x)
    if p is None or any(tensor_type(a) is not None for a in rest):
        return None
    return Plan(p, (Operand(x, p),), lambda new: remake(call, [new[0], *rest]))


def _common_perm(exprs: Sequence[relax.Expr], rank: int, perm_of: PermOf) -> Perm | None:
    """The one permutation every permuted operand shares (all must have the result's rank)."""
    perms = set()
    for e in exprs:
        p = perm_of(e)
        if p is not None:
            if len(p) != rank:
                return None
            perms.add(p)
    return perms.pop() if len(perms) == 1 else None


def _broadcast(call: relax.Call, perm_of: PermOf) -> Plan | None:
    rank = ndim(call)
    args = list(call.args)
    if rank is None or any(tensor_type(a) is None for a in args):
        return None
    p = _common_perm(args, rank, perm_of)
    if p is None:
        return None
    # Operands of lower rank are right-aligned by broadcasting; the rewriter pads them to full
    # rank before permuting, so the same per-axis pairing holds in the new layout.
    return Plan(p, tuple(Operand(a, p) for a in args), lambda new: remake(call, new))


def _reduce(call: relax.Call, perm_of: PermOf) -> Plan | None:
    x = call.args[0]
    p = perm_of(x)
    if p is None:
        return None
    n, keep = len(p), bool(call.attrs.keepdims)
    if call.attrs.axis is None:
        out, axis = (p if keep else ()), None
    else:
        reduced = sorted({int(a) % n for a in call.attrs.axis})
        axis = sorted(p[a] for a in reduced)
        if keep:
            out = p
        else:  # the kept axes, in the order the rewritten reduce leaves them
            kept = [p[i] for i in range(n) if i not in reduced]
            order = sorted(kept)
            out = tuple(order.index(k) for k in kept)
    attrs = with_fields(call.attrs, axis=axis)
    return Plan(tuple(out), (Operand(x, p),), lambda new: remake(call, new, attrs))


def _bucketize(call: relax.Call, perm_of: PermOf) -> Plan | None:
    """bucketize(x, boundaries): each element looked up alone in the constant 1-D
    boundaries, which have no layout."""
    x, boundaries = call.args[0], call.args[1]
    p = perm_of(x)
    if p is None or not is_tensor_constant(boundaries) or ndim(boundaries) != 1:
        return None
    return Plan(p, (Operand(x, p),), lambda new: remake(call, [new[0], boundaries]))


def _arg_reduce(call: relax.Call, perm_of: PermOf) -> Plan | None:
    """argmax/argmin(x, axis, keepdims): the index counts along the axis, which follows the
    data; over the flattened tensor (axis None) the index depends on the layout: none."""
    x = call.args[0]
    p = perm_of(x)
    if p is None or call.attrs.axis is None:
        return None
    n, reduced = len(p), int(call.attrs.axis) % len(p)
    if bool(call.attrs.keepdims):
        out = p
    else:
        kept = [p[i] for i in range(n) if i != reduced]
        out = tuple(sorted(kept).index(k) for k in kept)
    attrs = with_fields(call.attrs, axis=p[reduced])
    return Plan(tuple(out), (Operand(x, p),), lambda new: remake(call, new, attrs))


def _axis(call: relax.Call, perm_of: PermOf) -> Plan | None:
    """softmax/log_softmax(x, axis), prelu(x, alpha, axis), quantize/dequantize(x, scale,
    zero_point, axis), cumsum/cumprod, sort/argsort and flip(x, axis): the axis follows the
    data (a scan over the flattened tensor, axis None, has no layout)."""
    x, rest = call.args[0], list(call.args[1:])
    p = perm_of(x)
    if p is None or call.attrs.axis is None:
        return None
    attrs = with_fields(call.attrs, axis=p[int(call.attrs.axis) % len(p)])
    return Plan(p, (Operand(x, p),), lambda new: remake(call, [new[0], *rest], attrs))


def _concat(call: relax.Call, perm_of: PermOf) -> Plan | None:
    tup = call.args[0]
    rank = ndim(call)
    if not isinstance(tup, relax.Tuple) or rank is None or call.attrs.axis is None:
        return None
    fields = list(tup.fields)
    p = _common_perm(fields, rank, perm_of)
    if p is None or any(ndim(f) != rank for f in fields):
        return None
    attrs = with_fields(call.attrs, axis=p[int(call.attrs.axis) % rank])
    return Plan(p, tuple(Operand(f, p) for f in fields),
                lambda new: remake(call, [relax.Tuple(list(new))], attrs))


def _slice_scatter(call: relax.Call, perm_of: PermOf) -> Plan | None:
    """slice_scatter(x, src, start, end, step, axis): `src` replaces a slice of `x` along
    `axis` (FasterNet's partial convolution, ``x[:, :c] = conv(x[:, :c])``; ShiftViT's
    shifts): both follow one permutation, the axis with them."""
    x, src, rest = call.args[0], call.args[1], list(call.args[2:])
    rank = ndim(call)
    if rank is None or ndim(x) != rank or ndim(src) != rank:
        return None
    p = _common_perm([x, src], rank, perm_of)
    if p is None:
        return None
    attrs = with_fields(call.attrs, axis=p[int(call.attrs.axis) % rank])
    return Plan(p, (Operand(x, p), Operand(src, p)),
                lambda new: remake(call, [new[0], new[1], *rest], attrs))


def _elements(call: relax.Call, perm_of: PermOf) -> Plan | None:
    """gather_elements(x, index, axis) / scatter_elements(x, index, updates, axis): every
    tensor operand has the result's rank and is indexed by the same coordinates, the index
    values count along `axis` alone (max_unpool's plane-wise scatter, a gather along the
    channels): all follow one permutation, the axis with them."""
    args = list(call.args)
    rank = ndim(call)
    if rank is None or any(ndim(a) != rank for a in args):
        return None
    p = _common_perm(args, rank, perm_of)
    if p is None:
        return None
    attrs = with_fields(call.attrs, axis=p[int(call.attrs.axis) % rank])
    return Plan(p, tuple(Operand(a, p) for a in args), lambda new: remake(call, new, attrs))


def _split(call: relax.Call, perm_of: PermOf) -> Plan | None:
    """split(x, sections, axis): every part keeps the input's layout; the axis follows."""
    x = call.args[0]
    p = perm_of(x)
    if p is None:
        return None
    attrs = with_fields(call.attrs, axis=p[int(call.attrs.axis) % len(p)])
    return Plan(p, (Operand(x, p),), lambda new: remake(call, new, attrs), is_tuple=True)


def _topk(call: relax.Call, perm_of: PermOf) -> Plan | None:
    """topk(x, k, axis): the k largest (or smallest) of each row along `axis` and their
    indices, which count along that axis alone: any permutation moves through with the
    axis renamed; both results (a tuple) in the permuted layout."""
    x = call.args[0]
    p = perm_of(x)
    if p is None or call.attrs.axis is None:
        return None
    attrs = with_fields(call.attrs, axis=p[int(call.attrs.axis) % len(p)])
    return Plan(p, (Operand(x, p),), lambda new: remake(call, new, attrs),
                is_tuple=str(call.attrs.ret_type) == "both")


def _tuple_get_item(item: relax.TupleGetItem, perm_of: PermOf) -> Plan | None:
    """A part of a split that runs in a permuted layout is available in that layout."""
    tup = item.tuple_value
    p = perm_of(tup)
    if p is None:
        return None
    index = int(item.index)
    if ndim(item) != len(p):  # a batch_norm's per-channel statistics: not in the layout
        return None
    return Plan(p, (Operand(tup, p),), lambda new: relax.TupleGetItem(new[0], index))


def _permuted_layout(layout: str, p: Perm) -> str | None:
    """The layout string of ``w`` when ``x = permute_dims(w, p)`` has layout ``layout``."""
    if len(layout) != len(p) or not (layout.isalpha() and layout.isupper()):
        return None
    inv = inverse(p)
    return "".join(layout[inv[j]] for j in range(len(p)))


#: The layouts an op's kernels take, where not every order of its axes: ``resize2d``'s topi
#: compute takes NCHW and NHWC (a map transposed in H and W, "NWHC", failed the build).
_LAYOUTS_TAKEN = {"relax.image.resize2d": frozenset({"NCHW", "NHWC"})}


def _layout_attr(call: relax.Call, perm_of: PermOf) -> Plan | None:
    """Pooling/resize: the op takes its layout as a string, so the new layout is spelled out."""
    x, rest = call.args[0], list(call.args[1:])
    p = perm_of(x)
    if p is None or any(tensor_type(a) is not None for a in rest):
        return None
    layout = str(call.attrs.layout)
    out_layout = getattr(call.attrs, "out_layout", None)
    if out_layout is not None and str(out_layout) != layout:
        return None
    new_layout = _permuted_layout(layout, p)
    taken = _LAYOUTS_TAKEN.get(op_name(call) or "")
    if new_layout is None or (taken is not None and new_layout not in taken):
        return None
    changes: dict[str, object] = {"layout": new_layout}
    if out_layout is not None:
        changes["out_layout"] = new_layout
    attrs = with_fields(call.attrs, **changes)
    return Plan(p, (Operand(x, p),), lambda new: remake(call, [new[0], *rest], attrs))


def _layer_norm(call: relax.Call, perm_of: PermOf) -> Plan | None:
    """layer_norm(x, gamma, beta, axes): gamma/beta are laid out along ``axes``, so only a
    permutation that keeps the normalized axes in order can move through unchanged."""
    x, gamma, beta = call.args[0], call.args[1], call.args[2]
    p = perm_of(x)
    if p is None:
        return None
    n = len(p)
    axes = [int(a) % n for a in call.attrs.axes]
    new_axes = [p[a] for a in axes]
    if axes != sorted(axes) or new_axes != sorted(new_axes):
        return None
    attrs = with_fields(call.attrs, axes=new_axes)
    return Plan(p, (Operand(x, p),), lambda new: remake(call, [new[0], gamma, beta], attrs))


def _channel_norm(call: relax.Call, perm_of: PermOf) -> Plan | None:
    """group_norm / instance_norm(x, gamma, beta, channel_axis, axes): gamma and beta are
    per channel (1-D), so any permutation moves through with the channel axis and the
    reduced axes renamed (TVM's own rule for group_norm does the same, one call at a time:
    here it also follows a layout the cleanup found after ConvertLayout, e.g. the residual
    stream an attention block's ``transpose.reshape`` leaves)."""
    x, rest = call.args[0], list(call.args[1:])
    p = perm_of(x)
    if p is None or any(ndim(a) not in (None, 1) for a in rest):
        return None
    n = len(p)
    attrs = with_fields(call.attrs, channel_axis=p[int(call.attrs.channel_axis) % n],
                        axes=sorted(p[int(a) % n] for a in call.attrs.axes))
    return Plan(p, (Operand(x, p),), lambda new: remake(call, [new[0], *rest], attrs))


def _batch_norm(call: relax.Call, perm_of: PermOf) -> Plan | None:
    """batch_norm(x, gamma, beta, mean, var, axis): the four vectors are per channel, so
    any permutation moves through with the axis renamed; the result is a tuple (the data,
    then the per-channel mean and variance, which keep their 1-D layout: only the data
    field is read through the permutation, see `_tuple_get_item`). In inference the
    arithmetic per element is the same; in training the statistics reduce the same
    elements."""
    x, rest = call.args[0], list(call.args[1:])
    p = perm_of(x)
    if p is None or any(ndim(a) != 1 for a in rest):
        return None
    attrs = with_fields(call.attrs, axis=p[int(call.attrs.axis) % len(p)])
    return Plan(p, (Operand(x, p),), lambda new: remake(call, [new[0], *rest], attrs),
                is_tuple=True)


_HANDLERS: dict[str, Callable[[relax.Call, PermOf], Plan | None]] = {
    **{name: _unary for name in UNARY_OPS},
    **{name: _broadcast for name in BROADCAST_OPS},
    **{name: _reduce for name in REDUCE_OPS},
    "relax.argmax": _arg_reduce,
    "relax.bucketize": _bucketize,
    "relax.argmin": _arg_reduce,
    **{name: _axis for name in AXIS_OPS},
    **{name: _layout_attr for name in LAYOUT_ATTR_OPS},
    "relax.concat": _concat,
    "relax.split": _split,
    "relax.topk": _topk,
    "relax.slice_scatter": _slice_scatter,
    "relax.gather_elements": _elements,
    "relax.scatter_elements": _elements,
    "relax.nn.layer_norm": _layer_norm,
    "relax.nn.group_norm": _channel_norm,
    "relax.nn.instance_norm": _channel_norm,
    "relax.nn.batch_norm": _batch_norm,
    **MOVEMENT_HANDLERS,
}

#: Every op SinkPermutes carries a layout through.
LAYOUT_AGNOSTIC_OPS = frozenset(_HANDLERS)


def plan_for(call: relax.Expr, perm_of: PermOf) -> Plan | None:
    """How ``call`` can run on its operands' permuted forms, or None if it cannot (or if no
    operand is available permuted, in which case there is nothing to gain)."""
    if isinstance(call, relax.TupleGetItem):
        return _tuple_get_item(call, perm_of)
    handler = _HANDLERS.get(op_name(call) or "")
    if handler is None:
        return None
    assert isinstance(call, relax.Call)
    try:
        return handler(call, perm_of)
    except (AttributeError, TypeError, ValueError, RuntimeError):  # odd attrs: leave it alone
        return None
