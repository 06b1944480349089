"""How data-movement ops run in a permuted layout: views, broadcast_to, nn.pad and matmul.

TVM 0.27 has no layout rule for ``reshape``, ``broadcast_to``, ``nn.pad`` or ``matmul``, so
ConvertLayout puts every one of them back into NCHW, between a transpose pair. Each is exact
in another layout under a condition checked here:

* a **view** (``reshape``, ``squeeze``, ``expand_dims``) whose every output axis is a run of
  elements that is contiguous, in order, in the layout the input is available in: splitting
  the channel axis into (radix, channels) and merging it back (split attention, selective
  kernels), merging H and W into H·W (global-context attention), dropping or adding size-1
  axes. It becomes one ``reshape`` of the permuted data: a free view. The check is the atom
  algebra of `movement_chains.fold_chain`, which must find the identity permutation;
* ``broadcast_to``: copies, in any layout, to the permuted target shape;
* ``nn.pad``, ``take`` and ``strided_slice``: the pad widths, the axis, the sliced axes follow
  the data (``x[:, 0]`` on an NCHW input, as Inception-v3's ``transform_input`` does);
* a 1×1 ``conv2d`` whose input has its spatial axes permuted: per-pixel channel mixing;
* ``matmul(a, b)`` where one operand is available with its last two axes swapped:
  ``a @ b == (bᵀ @ aᵀ)ᵀ``. The same products are summed over the same ``k`` in the same
  order (a product of two floats does not depend on their order), so the result is
  bit-identical; the other operand is read transposed, which the cost model charges unless
  it only moves size-1 axes (a vector).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tvm import relax

from cl_validate.compile.passes._plan import Operand, PermOf, Plan, remake, with_fields
from cl_validate.compile.passes._util import Perm, inverse
from cl_validate.compile.passes.movement_chains import Atoms, fold_chain
from cl_validate.ir import (
    is_identity,
    is_tensor_constant,
    known_shape,
    ndim,
    strided_slice_args,
)

VIEW_OPS = ("relax.reshape", "relax.squeeze", "relax.expand_dims")


def view_layout(w_shape: tuple[int, ...], perm: Perm, out_shape: tuple[int, ...]
                ) -> tuple[tuple[int, ...], Perm] | None:
    """For ``x = permute_dims(w, perm)`` (``w`` of shape `w_shape`) viewed as `out_shape`:
    ``(shape, q)`` with ``reshape(x, out_shape) == permute_dims(reshape(w, shape), q)``, or
    None when some output axis is not contiguous in ``w``. A rank-preserving view keeps
    `perm` itself where that works, so the layout does not change under it."""
    candidates: list[Perm] = [perm] if len(out_shape) == len(perm) else []
    derived = _derived_perm(w_shape, perm, out_shape)
    if derived is not None:
        candidates.append(derived)
    for q in candidates:
        folded = fold_chain(w_shape, [("permute", perm), ("reshape", out_shape),
                                      ("permute", inverse(q))])
        if folded is not None and is_identity(folded[1]):
            inv = inverse(q)
            return tuple(out_shape[i] for i in inv), q
    return None


def _derived_perm(w_shape: tuple[int, ...], perm: Perm, out_shape: tuple[int, ...]
                  ) -> Perm | None:
    """Order the output axes by where their elements sit in ``w`` (size-1 axes right after
    the axis before them): the permutation that makes the view a plain reshape of ``w``."""
    if 0 in w_shape:
        return None
    atoms = Atoms(w_shape)
    atoms.permute(perm)
    if not atoms.reshape(out_shape):
        return None
    position = {a: i for i, a in enumerate(a for d in atoms.root for a in d)}
    keys: list[tuple[int, int, int]] = []
    last = -1
    for j, dim in enumerate(atoms.dims):
        if dim:
            first = position[dim[0]]
            last = position[dim[-1]]
            keys.append((first, 0, j))
        else:
            keys.append((last, 1, j))
    order = [k[2] for k in sorted(keys)]
    return tuple(order.index(j) for j in range(len(out_shape)))


def _view(call: relax.Call, perm_of: PermOf) -> Plan | None:
    x = call.args[0]
    p = perm_of(x)
    in_shape, out_shape = known_shape(x), known_shape(call)
    if p is None or in_shape is None or out_shape is None or len(p) != len(in_shape):
        return None
    w_shape = tuple(in_shape[i] for i in inverse(p))
    found = view_layout(w_shape, p, out_shape)
    if found is None:
        return None
    shape, q = found
    return Plan(q, (Operand(x, p),), lambda new: relax.op.reshape(new[0], list(shape)))


def _broadcast_to(call: relax.Call, perm_of: PermOf) -> Plan | None:
    x = call.args[0]
    p = perm_of(x)
    target = known_shape(call)
    if p is None or target is None or len(target) < len(p):
        return None
    lead = len(target) - len(p)  # new leading axes stay in front
    q = tuple(range(lead)) + tuple(lead + i for i in p)
    shape = [target[i] for i in inverse(q)]
    return Plan(q, (Operand(x, p),), lambda new: relax.op.broadcast_to(new[0], shape))


def _pad(call: relax.Call, perm_of: PermOf) -> Plan | None:
    x = call.args[0]
    p = perm_of(x)
    widths = [int(v) for v in call.attrs.pad_width]
    if p is None or len(widths) != 2 * len(p) or len(call.args) != 1:
        return None
    inv = inverse(p)  # axis k of w is axis inv[k] of x
    new_widths = [w for k in range(len(p)) for w in widths[2 * inv[k]:2 * inv[k] + 2]]
    attrs = with_fields(call.attrs, pad_width=new_widths)
    return Plan(p, (Operand(x, p),), lambda new: remake(call, [new[0]], attrs))


def _take(call: relax.Call, perm_of: PermOf) -> Plan | None:
    """``take(x, indices, axis)``: the axis follows the data; a scalar index drops it (the
    kept axes keep their order, as after a reduction), a 1-D index keeps the rank, and a
    k-D index (``Tensor.unfold``'s windows: (windows, size)) puts its k axes where the
    data's axis was, in their order."""
    x, indices = call.args[0], call.args[1]
    p = perm_of(x)
    rank = ndim(indices)
    if p is None or call.attrs.axis is None or rank is None or \
            (rank > 1 and not is_tensor_constant(indices)):
        return None
    # A computed index (an unfold-style gather's flat index, folded only later) is read as
    # an operand in its own layout (a 0-/1-D tensor has no other), so the rewrite sees it
    # as the region rewrote it; a constant is used as it is.
    index_ops = () if is_tensor_constant(indices) else (Operand(indices, tuple(range(rank))),)
    axis = int(call.attrs.axis) % len(p)
    attrs = with_fields(call.attrs, axis=p[axis])
    out = p
    if rank == 0:
        kept = [p[i] for i in range(len(p)) if i != axis]
        out = tuple(sorted(kept).index(k) for k in kept)
    elif rank > 1:  # the index's axes at the data's axis, the axes after it moved along
        at = p[axis]

        def moved(a: int) -> int:
            return a if a < at else a + rank - 1

        out = (*(moved(p[j]) for j in range(axis)), *range(at, at + rank),
               *(moved(p[j]) for j in range(axis + 1, len(p))))
    return Plan(out, (Operand(x, p), *index_ops), lambda new: remake(
        call, [new[0], new[1] if index_ops else indices], attrs))


def _strided_slice(call: relax.Call, perm_of: PermOf) -> Plan | None:
    """``strided_slice(x, axes, begin, end, strides)``: each sliced axis follows the data."""
    x = call.args[0]
    p = perm_of(x)
    tuples = strided_slice_args(call)
    if p is None or tuples is None:
        return None
    axes = [p[int(a) % len(p)] for a in tuples[0]]
    begin, end = tuples[1], tuples[2]
    strides = tuples[3] if len(tuples) > 3 else None
    inbound = bool(call.attrs.assume_inbound)
    return Plan(p, (Operand(x, p),), lambda new: relax.op.strided_slice(
        new[0], axes, begin, end, strides, assume_inbound=inbound))


def _swap_last(rank: int) -> Perm:
    return (*range(rank - 2), rank - 1, rank - 2)


def _matmul(call: relax.Call, perm_of: PermOf) -> Plan | None:
    a, b = call.args[0], call.args[1]
    ra, rb, rc = ndim(a), ndim(b), ndim(call)
    if ra is None or rb is None or rc is None or min(ra, rb) < 2:
        return None
    sa, sb = _swap_last(ra), _swap_last(rb)
    if perm_of(a) != sa and perm_of(b) != sb:
        return None

    def rebuild(new: Sequence[relax.Expr]) -> relax.Expr:
        return remake(call, [new[0], new[1]])

    return Plan(_swap_last(rc), (Operand(b, sb), Operand(a, sa)), rebuild)


def _pointwise_conv(call: relax.Call, perm_of: PermOf) -> Plan | None:
    """A 1×1 ``conv2d`` (stride 1, no padding) mixes channels per pixel and never looks at a
    neighbour, so the spatial axes may come in any order: on data available with its spatial
    axes permuted (batch and channel axes fixed) it runs on that data, the result permuted
    alike. YOLO's DFL decode is one: a fixed 1×1 conv over the bins of boxes laid out
    ``(anchors, 4)``. The same dot products in the same order: exact."""
    x, weight = call.args[0], call.args[1]
    p = perm_of(x)
    attrs = call.attrs
    layout, kernel = str(attrs.data_layout), str(attrs.kernel_layout)
    w_shape = known_shape(weight)
    if p is None or w_shape is None or len(p) != 4 or str(attrs.out_layout) not in ("", layout):
        return None
    n, c = layout.find("N"), layout.find("C")
    if n < 0 or c < 0 or p[n] != n or p[c] != c or any(
            w_shape[kernel.find(a)] != 1 for a in "HW"):
        return None
    if any(int(v) != 1 for v in (*attrs.strides, *attrs.dilation)) or any(
            int(v) != 0 for v in attrs.padding):
        return None
    return Plan(p, (Operand(x, p),), lambda new: remake(call, [new[0], weight]))


MOVEMENT_HANDLERS: dict[str, Callable[[relax.Call, PermOf], Plan | None]] = {
    **{name: _view for name in VIEW_OPS},
    "relax.broadcast_to": _broadcast_to,
    "relax.nn.pad": _pad,
    "relax.matmul": _matmul,
    "relax.take": _take,
    "relax.strided_slice": _strided_slice,
    "relax.nn.conv2d": _pointwise_conv,
}

__all__ = ["MOVEMENT_HANDLERS", "VIEW_OPS", "view_layout"]
