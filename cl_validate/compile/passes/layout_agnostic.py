"""SinkPermutes: carry the converted layout through layout-agnostic ops.

ConvertLayout leaves every op without a layout rule (``relax.clip``, ``relax.where``, ...) in
NCHW, with a transpose in front and one behind. Ops downstream of it that do have rules
(``divide``, ``mean``, ``concat``, ``split``) then stay NCHW too, because they follow their
input. This pass recomputes such ops in the layout their operands already exist in, so the
transposes meet and CancelPermutes removes them.

How it decides (per function, then again until nothing improves):

* A *seed* is ``t = permute_dims(x, p)`` of a run-time value: ``t`` is available for free as
  ``x`` read through ``p``. The other way round, ``x`` itself is available for free as ``t``
  read through ``inverse(p)`` (a *copy*): a GroupNorm that reads an NCHW input the residual
  add reads transposed runs on that transposed copy, and the transpose ConvertLayout put
  behind it is absorbed. Copies are tried only in a round where the seeds alone gain
  nothing: both at once pull a value's readers in opposite directions.
* Last, a split whose parts all end in the same transpose gets one transpose before it
  (`split_permutes`: XCiT's q, k and v), kept when the rounds after it lower the cost.
* A *candidate* is a layout-agnostic binding (see ``_layout_ops``) whose permuted operands
  share one permutation: it can run on their sources; its result ``w`` gives the original as
  ``permute_dims(w, p')``. Candidates chain: a candidate's result is available permuted too.
  A reshape/permute chain read by nothing else (a channel shuffle) is a candidate too: folded
  with the permutes around it, it is at most one transpose.
* A ``permute_dims`` of a candidate is *absorbed*: it becomes one permute of ``w`` (often the
  identity, which is the whole point).
* Seeds, candidates and absorbed permutes linked by data flow form a *region*, converted all or
  nothing, and only if that lowers the region's cost (``_util.Cost``). A seed still read
  elsewhere stays and is counted; a candidate read outside the region is materialized with a
  permute, and counted. So the pass never adds a transpose, and the graph's boundary permutes
  stay where they are. A seed a pointwise convolution writes through (StridedProducts,
  later; `product_chains`) costs nothing where it is: moved away it would be a transpose
  (YOLOv5's detect head). A value materialized for a matmul that reads it through the
  permute costs nothing either: the permute is the matmul's read (EfficientViT's q, k, v).
  A round is kept only if it lowers the cost left after StridedProducts, for the target
  (`cost_after_products`); a round that relied on the matmuls' reads and does not is
  tried again without them.

Only the placement of data changes, never an arithmetic operation, so results are exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from cl_validate.compile.passes._layout_ops import LAYOUT_AGNOSTIC_OPS, plan_for
from cl_validate.compile.passes._plan import Operand, Plan
from cl_validate.compile.passes._util import (
    FREE,
    Cost,
    Perm,
    Shape,
    UnionFind,
    add_costs,
    alias_var,
    compose,
    inverse,
    permute_cost,
)
from cl_validate.compile.passes.cancel_permutes import fold_permutes
from cl_validate.compile.passes.flatten_linear import matmul_readers
from cl_validate.compile.passes.movement_chains import RESHAPE_OP, MovementChains, folded_movement
from cl_validate.compile.passes.product_chains import (
    Accept,
    accept_for,
    read_by_product,
    written_seeds,
)
from cl_validate.compile.passes.split_permutes import is_shared
from cl_validate.ir import (
    is_identity,
    is_weight_derived,
    mark_origin,
    merge_origins,
    ndim,
    op_name,
    origin_tag,
    permute_axes,
    shape_exprs,
    static_shape,
    weight_derived,
)

Uses = dict[relax.Var, list[relax.Var | None]]

#: 4-D layouts a regrouping chain may come out in (the permute to each from the other)
_TO_NCHW, _TO_NHWC = (0, 3, 1, 2), (0, 2, 3, 1)


def _unpermuted_shape(shape: Shape | None, perm: Perm) -> Shape | None:
    """Shape of ``w`` given the shape of ``permute_dims(w, perm)``."""
    return None if shape is None else tuple(shape[i] for i in inverse(perm))


def _is_free_to_convert(expr: relax.Expr, rank: int) -> bool:
    """Scalars and all-ones tensors broadcast the same way in every layout."""
    shape = static_shape(expr)
    return ndim(expr) == 0 or (shape is not None and len(shape) <= rank
                               and all(d == 1 for d in shape))


class _Analysis:
    """Finds seeds, candidates and absorbed permutes, groups them, and keeps the regions that
    get cheaper. ``plans``/``absorbed``/``seeds`` end up holding only the converted ones."""

    def __init__(self, func: relax.Function, copies: bool = False,
                 reads: Accept | None = None, accept: Accept | None = None) -> None:
        # With `reads` (the products StridedProducts takes on the target): a value
        # materialized for a matmul that reads it through the permute costs nothing.
        self.reads = reads
        self.reads_free = self.relied_on_reads = False  # a region (a kept one) counted one
        self.weights = weight_derived(func)
        self.chains = MovementChains(func)
        self.seeds: dict[relax.Var, tuple[relax.Expr, Perm]] = {}
        self.plans: dict[relax.Var, Plan] = {}
        self.absorbed: dict[relax.Var, tuple[relax.Var, Perm]] = {}
        self.groups = UnionFind()
        # Per candidate: the origin mark of the permute its layout comes from (the model's or
        # the importer's), when it comes from nothing else (no ConvertLayout transpose):
        # materialized, that permute is the same one, sunk to where something needs the
        # original layout.
        self.origin_of: dict[relax.Var, str | None] = {}
        # Set by the rewriter: binds a folded chain's reshape so its permute keeps its span.
        self.emit: Callable[[relax.Expr], relax.Expr] | None = None
        # While visiting: what the current block bound (a region stays inside one block).
        self.visible: set[relax.Var] | None = None
        # x -> (t, p, value) for ``t = permute_dims(x, p)``: x read through inverse(p) is t
        # (the first such permute of x; `copy_of` holds it to t's block).
        self.copies: dict[relax.Var, tuple[relax.Var, Perm, relax.Expr]] = {}
        self.block_vars: set[relax.Var] | None = None
        for block in func.body.blocks:
            if isinstance(block, relax.DataflowBlock):
                self.visible = set()
                self.block_vars = {b.var for b in block.bindings}
                for b in block.bindings:
                    axes = permute_axes(b.value) if isinstance(b, relax.VarBinding) else None
                    src = None if axes is None else b.value.args[0]
                    if (copies and axes is not None and isinstance(src, relax.Var)
                            and src not in self.copies and not is_identity(axes)
                            and not is_weight_derived(src, self.weights)):
                        self.copies[src] = (b.var, axes, b.value)
                for b in block.bindings:
                    if isinstance(b, relax.VarBinding):
                        self._visit(b.var, b.value)
                        self.visible.add(b.var)
        self.visible = self.block_vars = None
        # The seeds a pointwise convolution writes through (StridedProducts, a later stage):
        # free where they stand, so a region gains nothing by moving one of them away.
        self.written = written_seeds(func, {s: src for s, (src, _) in self.seeds.items()},
                                     self.chains.values, self.chains.uses,
                                     accept or accept_for(None))
        self._select(self.chains.uses)

    def _in_block(self, var: relax.Var) -> bool:
        return self.visible is None or var in self.visible

    def perm_of(self, expr: relax.Expr) -> Perm | None:
        """The layout ``expr`` is available in for free; None if only its own (a candidate
        whose result comes out in the original layout, like a global pool, is plain again)."""
        perm = None
        if isinstance(expr, relax.Var) and self._in_block(expr):
            if expr in self.seeds:
                perm = self.seeds[expr][1]
            elif expr in self.plans:
                perm = self.plans[expr].out_perm
            elif expr in self.absorbed:  # a permute of a candidate: the candidate, read so
                src, q = self.absorbed[expr]
                perm = compose(self.plans[src].out_perm, q)
        if perm is None and isinstance(expr, relax.Var) and self.copy_of(expr) is not None:
            perm = inverse(self.copies[expr][1])
        return None if perm is None or is_identity(perm) else perm

    def copy_of(self, var: relax.Var) -> relax.Var | None:
        """The transposed copy ``t`` of ``var`` in the current block, if there is one."""
        if var not in self.copies or var in self.seeds or var in self.plans or (
                var in self.absorbed):
            return None
        t = self.copies[var][0]
        return t if self.block_vars is None or t in self.block_vars else None

    def _visit(self, var: relax.Var, value: relax.Expr) -> None:
        axes = permute_axes(value)
        if axes is not None:
            src = value.args[0]
            if isinstance(src, relax.Var) and src in self.plans and self._in_block(src):
                if not self.plans[src].is_tuple:
                    self.absorbed[var] = (src, axes)
                    self.groups.union(var, src)
                    self.origin_of[var] = origin_tag(value)
            elif isinstance(src, relax.Var) and src in self.absorbed and self._in_block(src):
                inner, q = self.absorbed[src]  # a permute of a permute of a candidate
                self.absorbed[var] = (inner, compose(q, axes))
                self.groups.union(var, src)
            elif not is_identity(axes) and not is_weight_derived(src, self.weights) and \
                    not is_shared(value):  # a shared transpose stays before its split
                self.seeds[var] = (src, axes)
            return
        # A reshape inside a movement chain is left to the chain, which folds as a whole; a
        # reshape that ends one (or only feeds the permute that ends one) is first tried as a
        # free reshape of the permuted data. (A squeeze or expand_dims is no step of a chain:
        # a chain through one starts after it, so it is planned here like any op.)
        plan = None
        if op_name(value) != RESHAPE_OP or not self._inside_chain(var):
            plan = plan_for(value, self.perm_of)
        if plan is None:
            plan = self._chain_plan(var, value)
        if plan is None:
            return
        self.plans[var] = plan
        origins = {self.origin_of.get(op.expr) if op.expr in self.origin_of else None
                   for op in plan.operands if self.perm_of(op.expr) is not None}
        self.origin_of[var] = origins.pop() if len(origins) == 1 else None
        for op in plan.operands:
            if self.perm_of(op.expr) is not None:
                self.groups.union(var, op.expr)

    def _inside_chain(self, var: relax.Var) -> bool:
        """Read by one movement op that a longer chain goes on from."""
        if self.chains.is_chain_end(var):
            return False
        user = self.chains.uses[var][0]
        assert user is not None
        return permute_axes(self.chains.values.get(user)) is None or not (
            self.chains.is_chain_end(user))

    def _chain_plan(self, var: relax.Var, value: relax.Expr) -> Plan | None:
        """A reshape ending a single-use movement chain that starts at a permuted value ``r``
        (layout ``p``): recompute it from ``r``'s source as ``inverse(p)`` of the chain, so its
        result is available in layout ``p`` like every other candidate."""
        users = self.chains.uses.get(var, [])
        read_by_permute = len(users) == 1 and users[0] is not None and permute_axes(
            self.chains.values.get(users[0])) is not None  # absorbed right after
        if op_name(value) != RESHAPE_OP or not (read_by_permute or self.chains.is_chain_end(var)):
            return None
        rank = ndim(var)

        def stop(e: relax.Expr) -> bool:
            # Never walk through a var this analysis already costs on its own (a candidate,
            # an absorbed permute, a seed of the result's rank): it is where the chain starts.
            perm = self.perm_of(e)
            return (perm is not None and len(perm) == rank) or e in self.plans or (
                e in self.absorbed)

        chain = self.chains.chain(var, stop=stop)
        p = None if chain is None else self.perm_of(chain.root)
        if chain is None or p is None or rank is None:
            return None
        # A chain that ends in another rank (patches flattened to tokens) comes out in its
        # own layout: the folded chain reads the root's source and is the result itself.
        if rank != len(p) and not self.chains.is_chain_end(var):
            return None
        src_shape = _unpermuted_shape(static_shape(chain.root), p)
        if src_shape is None or None in src_shape:
            return None
        # The folded chain carries the permute the root's layout came from too (the model's
        # transpose sunk to the root): its origin is both's.
        origin = merge_origins(self.origin_of.get(chain.root), chain.origin)
        # The layout the result comes out in: the root's, or, when the chain regroups axes
        # (attention heads merged back into channels), whichever layout folds cheapest; on
        # a tie, a 4-D result stored NHWC (read as NCHW) first, as the convolutions around
        # it are.
        outs = [p] if rank == len(p) else [tuple(range(rank))]
        if rank == len(p) == 4:
            outs = [_TO_NCHW, *(q for q in (p, _TO_NHWC, inverse(p), (0, 1, 2, 3))
                                if q != _TO_NCHW)]
        best = None
        for out in outs:
            out_shape = _unpermuted_shape(static_shape(var), out)
            if out_shape is None or None in out_shape:
                continue
            steps = [("permute", p), *chain.steps, ("permute", inverse(out))]
            probe = folded_movement(chain.root, src_shape, steps,  # type: ignore[arg-type]
                                    out_shape, origin)  # type: ignore[arg-type]
            if probe is not None and (best is None or probe[1] < best[0][1]):
                best = (probe, out, out_shape, steps)
        if best is None:
            return None
        probe, out, out_shape, steps = best
        cost = probe[1]
        if self._flattened_into_linear(var):  # FoldFlattenIntoLinear takes its transpose
            cost = FREE

        def rebuild(new: Sequence[relax.Expr]) -> relax.Expr:
            folded = folded_movement(new[0], src_shape, steps,  # type: ignore[arg-type]
                                     out_shape, origin, self.emit)  # type: ignore[arg-type]
            assert folded is not None
            return folded[0]

        return Plan(out, (Operand(chain.root, p),), rebuild, cost=cost, replaces=chain.cost,
                    internal=chain.internal)

    def _flattened_into_linear(self, var: relax.Var) -> bool:
        """`var` flattens to (N, K) for Linears by weights alone (through per-tensor QDQ):
        the transpose a flatten needs goes into their weights' rows (FoldFlattenIntoLinear,
        a later stage), so a chain that ends in one costs nothing there."""
        shape = static_shape(var)
        return shape is not None and len(shape) == 2 and bool(matmul_readers(
            var, self.chains.uses, self.chains.values, self.weights))

    # ---- cost model ---------------------------------------------------------------------
    def _conversion_cost(self, op: Operand) -> Cost:
        if self.perm_of(op.expr) == op.perm or is_weight_derived(op.expr, self.weights):
            return FREE
        if _is_free_to_convert(op.expr, len(op.perm)):
            return FREE
        shape = static_shape(op.expr)
        if shape is not None:
            shape = (1,) * (len(op.perm) - len(shape)) + shape
        return permute_cost(shape, inverse(op.perm))

    def _select(self, uses: Uses) -> None:
        members: dict[relax.Var, list[relax.Var]] = {}
        for v in [*self.seeds, *self.plans, *self.absorbed]:
            members.setdefault(self.groups.find(v), []).append(v)
        keep: set[relax.Var] = set()
        for region in members.values():
            self.reads_free = False
            if self._worth_it(region, uses):
                keep.update(region)
                self.relied_on_reads |= self.reads_free
        self.seeds = {v: s for v, s in self.seeds.items() if v in keep}
        self.plans = {v: p for v, p in self.plans.items() if v in keep}
        self.absorbed = {v: a for v, a in self.absorbed.items() if v in keep}

    def _worth_it(self, region: list[relax.Var], uses: Uses) -> bool:
        cands = {v for v in region if v in self.plans}
        if not cands:
            return False
        # Readers that disappear with the region: its candidates, the chains they replace,
        # and (for candidates) the permutes they absorb.
        inside = cands | {i for v in cands for i in self.plans[v].internal}
        absorbed = {v for v in region if v in self.absorbed}
        before: list[Cost] = []
        after: list[Cost] = []
        for v in region:
            if v in self.seeds:
                src, p = self.seeds[v]
                cost = FREE if v in self.written else permute_cost(static_shape(src), p)
                before.append(cost)
                if any(u not in inside for u in uses.get(v, [])):
                    after.append(cost)  # still read in the old layout: it stays
            elif v in self.absorbed:
                src, q = self.absorbed[v]
                before.append(permute_cost(static_shape(src), q))
                p = self.plans[src].out_perm
                if any(u not in inside and u not in absorbed for u in uses.get(v, [])) and \
                        not self._read_by_product(v):
                    # read as it is somewhere: materialized (candidates read ``w`` instead)
                    after.append(permute_cost(_unpermuted_shape(static_shape(src), p),
                                              compose(p, q)))
            else:
                plan = self.plans[v]
                before.append(plan.replaces)
                after.append(plan.cost)
                after.extend(self._conversion_cost(op) for op in plan.operands)
                if any(u not in inside and u not in absorbed for u in uses.get(v, [])):
                    if plan.is_tuple:
                        return False  # a tuple is not put back into the old layout
                    shape = _unpermuted_shape(static_shape(v), plan.out_perm)
                    if not self._read_by_product(v):
                        after.append(permute_cost(shape, plan.out_perm))  # materialized
        return add_costs(after) < add_costs(before)

    def _read_by_product(self, var: relax.Var) -> bool:
        """`var`'s materialization is a matmul's read (counted so only with `reads`)."""
        if self.reads is None or not read_by_product(var, self.chains.values,
                                                      self.chains.uses):
            return False
        self.reads_free = True
        return True


@mutator
class _Sinker(PyExprMutator):  # type: ignore[misc]
    def __init__(self, analysis: _Analysis) -> None:
        super().__init__()
        self.a = analysis
        analysis.emit = self.builder_.emit
        self.new: dict[relax.Var, relax.Var] = {}  # candidate -> its result in the new layout
        self.seen: set[relax.Var] = set()  # bindings visited so far
        self.early: dict[relax.Var, relax.Var] = {}  # a copy emitted before its own binding

    def _copy(self, var: relax.Var) -> relax.Expr:
        """``var``'s transposed copy, emitted here if a reader comes before it."""
        t, axes, value = self.a.copies[var]
        if t in self.seen:
            return self.visit_expr(t)
        if t not in self.early:
            self.early[t] = self.builder_.emit(mark_origin(
                relax.op.permute_dims(self.visit_expr(var), list(axes)), origin_tag(value)),
                name_hint=t.name)
        return self.early[t]

    def _operand(self, op: Operand) -> relax.Expr:
        e = op.expr
        if isinstance(e, relax.Var) and self.a.perm_of(e) == op.perm:
            if e in self.new:
                return self.new[e]
            if e in self.a.seeds:
                return self.visit_expr(self.a.seeds[e][0])
            if e in self.a.absorbed:
                return self.new[self.a.absorbed[e][0]]
            if self.a.copy_of(e) is not None:
                return self._copy(e)
        e = self.visit_expr(e)
        rank = len(op.perm)
        if _is_free_to_convert(e, rank):
            return e
        dims = shape_exprs(e)
        if dims is None:
            raise ValueError(f"operand of unknown shape in a converted region: {e}")
        if len(dims) < rank:  # right-aligned broadcast: spell out the leading 1s
            e = self.builder_.emit(relax.op.reshape(e, [1] * (rank - len(dims)) + dims))
        return self.builder_.emit(relax.op.permute_dims(e, list(inverse(op.perm))))

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        var = binding.var
        self.seen.add(var)
        if var in self.early:  # emitted already, for a reader that came first
            alias_var(self.builder_, self, var, self.early[var])
        elif var in self.a.plans:
            plan = self.a.plans[var]
            call = plan.rebuild([self._operand(op) for op in plan.operands])
            w = self.builder_.emit(call, name_hint=var.name)
            self.new[var] = w
            perm = plan.out_perm
            if not plan.is_tuple:  # unused materializations are dropped afterwards
                alias_var(self.builder_, self, var, w if is_identity(perm) else mark_origin(
                    relax.op.permute_dims(w, list(perm)), self.a.origin_of.get(var)))
        elif var in self.a.absorbed:
            src, q = self.a.absorbed[var]
            perm = compose(self.a.plans[src].out_perm, q)
            w = self.new[src]
            origin = origin_tag(binding.value)  # what is left of a permute keeps its origin
            alias_var(self.builder_, self, var, w if is_identity(perm) else mark_origin(
                relax.op.permute_dims(w, list(perm)), origin))
        else:
            super().visit_var_binding_(binding)


def convert_regions(func: relax.Function, copies: bool = False, reads: Accept | None = None,
                    accept: Accept | None = None) -> tuple[relax.Function, bool]:
    """One round: convert every region that gets cheaper, then fold the permutes that met
    (`copies`: values are read through their transposed copies too; `reads`: the products
    StridedProducts takes, whose reads of a materialized value cost nothing; `accept`: those
    it takes, for the seeds it writes through). Also whether a converted region counted a
    matmul's read free."""
    analysis = _Analysis(func, copies, reads, accept)
    if not analysis.plans:
        return func, False
    new = _Sinker(analysis).visit_expr(func)
    return fold_permutes(relax.analysis.remove_all_unused(new)), analysis.relied_on_reads


__all__ = ["LAYOUT_AGNOSTIC_OPS", "convert_regions"]
