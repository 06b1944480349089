"""SinkPermutes' rounds: `convert_regions` (`layout_agnostic`) again until the run-time
transform cost stops going down.

A round converts every region that gets cheaper by its own estimate; the round is kept only
if the function's cost went down. With a target, that cost is what StridedProducts (a later
stage) leaves: the transposes a product reads or writes through are free
(`product_chains.cost_after_products`). A round whose regions counted a matmul's read free
(`product_chains.read_by_product`, an estimate) and that does not pay is tried again without
those reads, so the estimate never costs a round that would have paid. Then a transpose
shared before a split (`split_permutes`), kept only where the rounds after it lower the cost
(and, in a trial the cleanup stage runs where a ``relax.split`` allows it, before the first
round: `splits_first`).
Last, a transpose a few layout-agnostic ops below a matmul (EfficientViT's output divided by
its last column, then its heads moved back): the matmul's result read through a transpose
and its inverse (`with_write_pair`), the one written by the matmul, the other carried down by
the rounds to cancel the model's; kept only where the rounds lower the cost (StridedProducts
taking the write is part of it). And a transpose after an elementwise join of operands
transposed in different ways, lifted onto them (`lift_permutes`), kept the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import tvm
from tvm import relax

from cl_validate.compile.passes._util import (
    Cost,
    canonicalize,
    cost_text,
    note,
    relax_function_pass,
    runtime_cost,
)
from cl_validate.compile.passes.cancel_permutes import fold_permutes
from cl_validate.compile.passes.layout_agnostic import convert_regions
from cl_validate.compile.passes.lift_permutes import lift_sites
from cl_validate.compile.passes.product_chains import (
    Accept,
    accept_for,
    cost_after_products,
    with_pairs,
    with_write_pair,
    write_sites,
)
from cl_validate.compile.passes.split_permutes import hoist, split_plans

#: Rounds `sink_permutes` runs at most. Each kept round lowers the run-time transform cost,
#: a pair of counts, so the rounds end on their own; the cap bounds the compile time of a
#: graph that would need many (a second round is rare: every graph in tests/passes needs one).
#: Stopping at it is reported (`note`): the program is right, but may keep transforms another
#: round would remove.
MAX_ROUNDS = 8
#: Write pairs `_written_through` tries at most per call (each is rounds of the whole
#: function): bounds the compile time of a graph with many matmuls and transposes near them.
MAX_WRITE_TRIALS = 8


def sink_permutes_once(func: relax.Function, copies: bool = False,
                       accept: Accept | None = None, reads: bool = True) -> relax.Function:
    """One round (`convert_regions`): `accept` the products StridedProducts takes, whose
    reads cost nothing unless `reads` is off."""
    return convert_regions(func, copies, accept if reads else None, accept)[0]


_COSTS: dict[tuple[int, int], tuple[relax.Function, Cost]] = {}


def _cost(func: relax.Function, accept: Accept | None) -> Cost:
    """The run-time transform cost, after StridedProducts when the target is known (kept
    for the last functions asked about: a round compares against the same one often)."""
    if accept is None:
        return runtime_cost(func)
    key = (hash(func), id(accept))
    if key not in _COSTS or not _COSTS[key][0].same_as(func):
        if len(_COSTS) > 256:
            _COSTS.clear()
        _COSTS[key] = (func, cost_after_products(func, accept))
    return _COSTS[key][1]


def sink_permutes(func: relax.Function, accept: Accept | None = None) -> relax.Function:
    """Rounds until nothing improves; a region converted in one round can expose the next
    (e.g. an absorbed permute of a model's own transpose becomes a seed). A round that does
    not lower the function's run-time transform cost (with `accept`, the products
    StridedProducts takes on the target: what it leaves) is discarded, and a function where
    no round helps is returned untouched. At most `MAX_ROUNDS` rounds: when one more would
    still lower the cost, the pass says so (`note`) and returns what the rounds reached."""
    start = fold_permutes(canonicalize(func))
    trial = _SPLITS_FIRST.get()
    shared = None if trial is None else hoist(start, unbinds=False)
    if trial is None or shared is None:
        current = _rounds(start, accept)
    elif trial.on:
        return _rounds(shared, accept)  # the rounds from the splits' transposes shared
    else:
        current = _rounds(start, accept)
        # a split whose parts still each end in a transpose, and the rounds from it shared
        # reach fewer: worth the cleanup's second run
        trial.found = bool(split_plans(current)) and \
            _cost(_rounds(shared, accept), accept)[0] < _cost(current, accept)[0]
    return func if current is start else current


@dataclass
class SplitsFirst:
    """`splits_first`'s trial: `on`, the rounds start from the ``relax.split``s' transposes
    shared; `found`, set when a function had such a split and the rounds from it shared
    left fewer transposes than those from the function as it is."""

    on: bool
    found: bool = False


_SPLITS_FIRST: ContextVar[SplitsFirst | None] = ContextVar("cl_validate_splits_first",
                                                           default=None)


@contextmanager
def splits_first(on: bool) -> Iterator[SplitsFirst]:
    """SinkPermutes run inside the ``with`` starts its rounds from each ``relax.split``'s
    parts' one transpose shared before it (`hoist`) if `on`; either way the trial says
    whether there was such a split. The rounds, run from the function as it is, can move a
    split so that its parts' transposes no longer meet (HaloNet's keys and values: a
    transpose each, where one before the split serves both); from the hoisted start they
    can reach fewer. Off, both are tried and the trial says whether the hoisted start
    reached fewer; the ``cleanup`` stage then runs again with it on and keeps the program
    with fewer transposes at its end (`cl_validate.compile.pipeline`): fewer after the
    rounds can be as many after the passes that follow them (SHViT's q, k and v)."""
    trial = SplitsFirst(on)
    token = _SPLITS_FIRST.set(trial)
    try:
        yield trial
    finally:
        _SPLITS_FIRST.reset(token)


def _rounds(start: relax.Function, accept: Accept | None) -> relax.Function:
    """`sink_permutes`' rounds from `start` (`start` itself when none lowers the cost)."""
    current = start
    for _ in range(MAX_ROUNDS):
        new = _improved(current, False, accept) or _improved(current, True, accept) or \
            _hoisted(current, accept) or _written_through(current, accept) or \
            _lifted(current, accept)
        if new is None:
            break
        current = new
    else:
        more = _improved(current, False, accept) or _improved(current, True, accept)
        if more is not None:
            note(f"SinkPermutes stopped at its cap of {MAX_ROUNDS} rounds with run-time "
                 f"transforms still going down ({cost_text(_cost(current, accept))} -> "
                 f"{cost_text(_cost(more, accept))} in the next round): more transforms "
                 f"may remain than the pass would leave")
    return current


def _improved(func: relax.Function, copies: bool = False,
              accept: Accept | None = None) -> relax.Function | None:
    """One more round, if it lowers the run-time transform cost; None otherwise. A round that
    counted matmuls' reads free and does not pay is tried again without them."""
    for reads in (accept, None):
        new, relied = convert_regions(func, copies, reads, accept)
        if not new.same_as(func) and _cost(new, accept) < _cost(func, accept):
            return new
        if not relied:
            return None
    return None


def _hoisted(func: relax.Function, accept: Accept | None) -> relax.Function | None:
    """A transpose shared before a split (`split_permutes`), then rounds until nothing
    improves; kept only if the run-time transform cost went down."""
    shared = hoist(func)
    return None if shared is None else _settled(shared, func, accept)


def _written_through(func: relax.Function, accept: Accept | None) -> relax.Function | None:
    """A matmul's result read through a transpose and its inverse (`with_write_pair`), for
    each `write_sites` in turn, then rounds: the first that lowers the cost is kept (the
    matmul writes through the one, the other is carried down to the model's transpose)."""
    if accept is None:
        return None
    for var, perm, origin in write_sites(func, accept)[:MAX_WRITE_TRIALS]:
        paired = with_write_pair(func, var, perm, origin)
        first = _improved(paired, False, accept)  # the pair's own region, or nothing
        kept = None if first is None else _settled(first, func, accept)
        if kept is not None:
            return kept
    return None


def _lifted(func: relax.Function, accept: Accept | None) -> relax.Function | None:
    """A transpose after an elementwise join lifted onto the join's operands
    (`lift_permutes`), for each site in turn, then rounds: the first that lowers the cost is
    kept."""
    for _var, leaves, perm, origin in lift_sites(func)[:MAX_WRITE_TRIALS]:
        paired = with_pairs(func, {x: perm for x in leaves}, origin)
        first = _improved(paired, False, accept)
        kept = None if first is None else _settled(first, func, accept)
        if kept is not None:
            return kept
    return None


def _settled(start: relax.Function, func: relax.Function,
             accept: Accept | None) -> relax.Function | None:
    """Rounds from `start` until nothing improves; what they reach if it costs less than
    `func`, else None."""
    current = start
    for _ in range(MAX_ROUNDS):
        new = _improved(current, False, accept) or _improved(current, True, accept)
        if new is None:
            break
        current = new
    return current if _cost(current, accept) < _cost(func, accept) else None


def SinkPermutes(target: tvm.target.Target | None = None) -> tvm.transform.Pass:
    """The pass (`sink_permutes`), its costs taken after StridedProducts on `target`."""
    accept = None if target is None else accept_for(target)
    return relax_function_pass("SinkPermutes")(lambda f: sink_permutes(f, accept))()


__all__ = ["MAX_ROUNDS", "SinkPermutes", "sink_permutes", "sink_permutes_once"]
