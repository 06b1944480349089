"""Selection outputs: a top-k (a detector's kept boxes, a classifier's top-5) is a set of
items, and its order among near-tied scores is rounding's choice.

``[[outputs]] selection = { axis = 1, differing = 0 }`` says an output holds selected items
along `axis` (each item everything at one index of that axis: a box's row, an index, a
score). TVM's items are then put in the order of PyTorch's they match — each item matched to
the nearest one PyTorch has, greedily, nearest pairs first — before the usual comparison,
so a reordering of near-ties is no error and a wrong value still is. At most `differing`
items per selection may be different ones altogether (a near-tie at the k-th place selects
another item): those count as matched to their nearest and are named in the report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The most items one selection may hold: the match weighs every pair (k² distances), so a
#: larger one is refused by name rather than let run out of memory or time
MAX_ITEMS = 4096


class TooManyItems(ValueError):
    """A selection output with more than `MAX_ITEMS` items."""


@dataclass(frozen=True)
class Matched:
    """TVM's output with its items in PyTorch's order, and what it took."""

    actual: np.ndarray
    reordered: int  # items not at the index they are at in PyTorch's output
    differing: int  # items that matched none of PyTorch's within the tolerance (the worst)


def match_items(actual: np.ndarray, expected: np.ndarray, axis: int, atol: float,
                rtol: float, differing: int) -> Matched:
    """`actual`'s items along `axis` reordered to match `expected`'s (same shape); up to
    `differing` items per selection that match none within ``atol + rtol·|expected|`` are
    taken as PyTorch's (counted in `Matched.differing`); more than that, and they are left as
    the nearest pairing has them, so the comparison reports their error."""
    if actual.shape != expected.shape or actual.ndim == 0 or axis >= actual.ndim or \
            actual.size == 0:  # nothing selected (an empty top-k): nothing to match
        return Matched(actual, 0, 0)
    a = np.moveaxis(actual, axis, 0)
    e = np.moveaxis(expected, axis, 0)
    k = a.shape[0]
    if k > MAX_ITEMS:
        raise TooManyItems(f"a selection of {k} items along axis {axis} (at most {MAX_ITEMS}: "
                           f"each is weighed against every other)")
    # one selection per index of every axis before `axis` (the batch); items are the rest
    lead = int(np.prod(actual.shape[:axis], dtype=np.int64)) if axis else 1
    a_items = np.moveaxis(a.reshape(k, lead, -1), 1, 0)  # (selection, item, values)
    e_items = np.moveaxis(e.reshape(k, lead, -1), 1, 0)
    out = np.empty_like(a_items)
    reordered = unmatched = 0
    for s in range(lead):
        order, far = _pair(a_items[s].astype(np.float64), e_items[s].astype(np.float64),
                           atol, rtol)
        out[s] = a_items[s][order]
        reordered += int(np.count_nonzero(order != np.arange(k)))
        if 0 < len(far) <= differing:  # allowed: judged as PyTorch's own item
            out[s][far] = e_items[s][far]
            unmatched = max(unmatched, len(far))
    result = np.moveaxis(np.moveaxis(out, 0, 1).reshape(a.shape), 0, axis)
    return Matched(np.ascontiguousarray(result), reordered, unmatched)


def _pair(a: np.ndarray, e: np.ndarray, atol: float, rtol: float
          ) -> tuple[np.ndarray, np.ndarray]:
    """For each of `e`'s items the index of `a`'s paired with it (nearest pairs first), and
    the items of `e` whose pair is farther apart than the tolerance."""
    k = len(e)
    # the largest tolerance-scaled difference of each pair (a's item, e's item): <= 1 is
    # "within"; one value at a time, so memory stays k·k
    dist = np.zeros((k, k))
    for f in range(e.shape[1]):
        scale = np.maximum(atol + rtol * np.abs(e[:, f]), 1e-300)[None, :]
        dist = np.fmax(dist, np.abs(a[:, f][:, None] - e[:, f][None, :]) / scale)
    dist = np.where(np.isnan(dist), np.inf, dist)
    order = np.full(k, -1, dtype=np.int64)
    taken = np.zeros(k, dtype=bool)
    far: list[int] = []
    # keep an item where it is when it matches there: stable for the common, unreordered case
    for j in range(k):
        if dist[j, j] <= 1.0:
            order[j], taken[j] = j, True
    flat = np.argsort(dist, axis=None, kind="stable")
    for idx in flat:
        i, j = divmod(int(idx), k)
        if taken[i] or order[j] >= 0:
            continue
        order[j], taken[i] = i, True
        if dist[i, j] > 1.0:
            far.append(j)
    return order, np.array(far, dtype=np.int64)
