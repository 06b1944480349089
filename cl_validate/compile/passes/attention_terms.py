"""What stands on attention's scores besides the product: the scale (one number, or one per
head, which folds into q) and masks filled with ``-inf`` (which are additive masks): what
RaiseAttention may take into the raised op, and why it may not when it may not."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from tvm import relax

from cl_validate.ir import is_float, is_tensor_constant, known_shape, op_name, tensor_type


def scalar(e: relax.Expr) -> float | None:
    """The value of a float constant of one element, else None."""
    if is_tensor_constant(e):
        arr = e.value.numpy()  # type: ignore[attr-defined]
        if arr.size == 1 and (arr.dtype.kind == "f" or arr.dtype.name == "bfloat16"):
            return float(arr.reshape(()).astype(np.float32))  # bfloat16: ml_dtypes, kind V
    return None


def per_head(c: relax.Expr, scores: tuple[int, ...] | None) -> bool:
    """`c` scales the scores by head (or batch) alone: its last two axes are one and it
    broadcasts into the scores without growing them."""
    cs = known_shape(c)
    if cs is None or scores is None or len(cs) < 2 or cs[-2:] != (1, 1):
        return False
    ty = tensor_type(c)
    if ty is None or not is_float(ty.dtype):
        return False
    return _fits(cs, scores)


def no_scale(c: relax.Expr, factor: float | None) -> str:
    """Why a factor of the scores is not attention's scale."""
    shape = known_shape(c)
    if factor is not None:
        return "a scale of zero on the scores"
    if shape is not None and all(d == 1 for d in shape):
        return "a scale computed at run time on the scores (not a constant)"
    text = "unknown" if shape is None else f"({', '.join(map(str, shape))})"
    return f"a scale of shape {text} on the scores (not one number or one per head)"


def _fits(shape: tuple[int, ...], scores: tuple[int, ...]) -> bool:
    """`shape` broadcasts into `scores` without growing them."""
    try:
        return tuple(np.broadcast_shapes(shape, scores)) == tuple(scores)
    except ValueError:
        return False


def where_mask(value: relax.Call, scores: tuple[int, ...] | None,
               reads_scores: Callable[[relax.Expr], bool],
               value_of: Callable[[relax.Expr], relax.Expr | None]
               ) -> tuple[relax.Expr, relax.Expr] | str:
    """``(s, bias)`` for ``where(mask, -inf, s)`` or ``where(mask, s, -inf)`` (``masked_fill``
    with ``-inf``, a causal ``triu`` or ``~tril`` mask): ``s + where(mask, -inf, 0)``, the same
    sums (an additive ``-inf`` is the fill itself). A finite fill is not an additive mask: a
    row masked whole is the fill's uniform average, where an add keeps the scores' order.
    `reads_scores`: whether a branch is the scores, read by the where alone."""
    cond, x, y = value.args
    if reads_scores(y):
        s, fill, keeps_fill_where_true = y, x, True
    elif reads_scores(x):
        s, fill, keeps_fill_where_true = x, y, False
    else:
        return "the scores are selected by a where whose branches are not the scores and " \
               "a fill (another product, or the scores read twice)"
    bound = value_of(fill)  # a constant the import bound to a var, made by `full` or
    # broadcast (`torch.full`'s -inf, GPT-2's masked value), that does not grow the scores
    filled = known_shape(bound)
    if op_name(bound) in ("relax.full", "relax.broadcast_to") and filled is not None and \
            scores is not None and _fits(filled, scores):
        bound = bound.args[1 if op_name(bound) == "relax.full" else 0]  # type: ignore[union-attr]
    value_of_fill = scalar(fill if bound is None else bound)
    if value_of_fill is None:
        return "the scores are masked by a where with a fill computed at run time"
    if value_of_fill != float("-inf"):
        return f"the scores are masked with {value_of_fill:g}, not -inf (masked_fill with a " \
               "finite value): only -inf adds as a bias exactly, a row masked whole would " \
               "differ"
    shape = known_shape(cond)
    if shape is None or scores is None:
        return "a bias or mask of unknown shape on the scores"
    try:
        if tuple(np.broadcast_shapes(shape, scores)) != tuple(scores):
            return "a mask that broadcasts the scores to a larger shape"
    except ValueError:
        return "a mask that does not broadcast against the scores"
    zero = relax.const(0.0, str(tensor_type(fill).dtype))  # type: ignore[union-attr]
    bias = relax.op.where(cond, fill, zero) if keeps_fill_where_true else \
        relax.op.where(cond, zero, fill)
    return s, bias


__all__ = ["no_scale", "per_head", "scalar", "where_mask"]
