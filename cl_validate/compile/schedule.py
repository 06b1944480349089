"""GPU schedules by dlight, with the rule that scheduled each kernel written on its PrimFunc.

TVM's cuda backend schedules every fused PrimFunc with dlight's ``ApplyDefaultSchedule``: the
rules are tried in order (Matmul, GEMV, Reduction, GeneralReduction, Fallback) and the first
that returns a schedule wins. The generic Fallback only binds loops to threads; a kernel that
ends there is slow on a real GPU, and which rule a kernel gets is decided entirely at compile
time — so a CPU runner can see it, no GPU needed.

dlight does not say which rule won. Here each rule is wrapped in an observer that notes the
PrimFunc it returned a schedule for and passes the schedule through untouched, so the pass
that runs is TVM's own, with TVM's own rules: the schedules are exactly what TVM's backend
produces (the tests compare them structurally). Afterwards every PrimFunc carries
`SCHEDULE_ATTR` = the winning rule's name, which the analysis reads into the kernel list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tvm
from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl

from cl_validate.ir import SCHEDULE_ATTR

#: The rule a PrimFunc gets when no rule returned a schedule: it is left unscheduled, and
#: building it for a GPU fails.
NO_RULE = "none"


def default_gpu_rules() -> list[Any]:
    """The rules, in the order TVM 0.27's cuda backend applies them
    (``tvm.relax.backend.cuda.pipeline.legalize_passes``). The attention's two products and
    softmax are theirs too, where the tiled kernel (written scheduled,
    `cl_validate.compile.attention_tiles`) does not fit."""
    return [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
            dl.gpu.GeneralReduction(), dl.gpu.Fallback()]


class _Observed(dl.ScheduleRule):  # type: ignore[misc]
    """A rule that behaves exactly as `rule` and notes each PrimFunc it scheduled."""

    def __init__(self, rule: Any, seen: list[tuple[Any, str]]) -> None:
        self.rule = rule
        self.name = type(rule).__name__.removesuffix("Rule")
        self.seen = seen

    def apply(self, func: Any, target: Any, tunable: bool) -> Any:
        try:
            space = self.rule.apply(func, target, tunable)
        except (AssertionError, AttributeError):
            # dlight's own assertions on shapes it did not foresee (GEMV on a reduction of
            # one element: `assert r_loops`; on a tile it cannot size, the assertion itself
            # fails: `'FloorDiv' object has no attribute 'value'`, single-query attention's
            # scores over a head dimension of 2); as if it had declined: the next rule's turn
            return None
        if isinstance(space, s_tir.Schedule) and unwritten(space.mod["main"]) is not None:
            return None  # a schedule that cannot write its whole output: the next rule's turn
        if space is not None:
            self.seen.append((func, self.name))
        return space


def unwritten(func: tirx.PrimFunc) -> str | None:
    """An output buffer of a scheduled `func` that its blocks cannot write whole, as "NAME:
    at most W of N elements", or None.

    dlight's reduction rules bind a fused kernel's epilogue to the reduction's spatial loops;
    when the epilogue's output is larger than the reduction's (a pad after a pool), the
    extra elements are never written and the kernel leaves whatever the memory held there
    (seen on an H200: ResNet-D's ceil-mode average pool fused with the next ``F.pad``). A
    block writes at most its loops' iterations times its write region per output, so fewer
    than the buffer holds is certainly wrong (the converse is not checked)."""
    allocated: set[Any] = set()
    written: dict[Any, int] = {}

    def visit(stmt: Any, iterations: int) -> bool:  # False: a symbolic extent, no verdict
        if isinstance(stmt, tirx.For):
            if not isinstance(stmt.extent, tirx.IntImm):
                return False
            return visit(stmt.body, iterations * int(stmt.extent))
        if isinstance(stmt, tirx.SeqStmt):
            return all(visit(s, iterations) for s in stmt.seq)
        if isinstance(stmt, s_tir.SBlockRealize):
            block = stmt.block
            for buf in block.alloc_buffers:
                allocated.add(buf.data)
            for region in block.writes:
                size = 1
                for r in region.region:
                    if not isinstance(r.extent, tirx.IntImm):
                        return False
                    size *= int(r.extent)
                key = _buffer_of(region)
                written[key] = written.get(key, 0) + iterations * size
            return visit(block.body, iterations)
        if isinstance(stmt, tirx.IfThenElse):
            return visit(stmt.then_case, iterations) and (
                stmt.else_case is None or visit(stmt.else_case, iterations))
        if isinstance(stmt, tirx.AllocBuffer):
            allocated.add(stmt.buffer.data)
        body = getattr(stmt, "body", None)
        return visit(body, iterations) if isinstance(body, tirx.Stmt) else True

    if not visit(func.body, 1):
        return None
    for buf, count in written.items():
        if buf.data in allocated:
            continue
        shape = [int(d) for d in buf.shape if isinstance(d, tirx.IntImm)]
        if len(shape) != len(buf.shape):
            continue
        total = 1
        for d in shape:
            total *= d
        if count < total:
            return f"{buf.name}: at most {count} of {total} elements"
    return None


def schedule_gpu(mod: tvm.IRModule, target: Any, rules: Sequence[Any] | None = None
                 ) -> tvm.IRModule:
    """dlight's ``ApplyDefaultSchedule`` with `rules` (default: TVM's cuda list) under
    `target`, every PrimFunc it looked at tagged with `SCHEDULE_ATTR`: the rule that scheduled
    it, or `NO_RULE`. PrimFuncs scheduled before (``tirx.is_scheduled``) keep their tag, or
    get none."""
    todo = {gv: f for gv, f in mod.functions_items()
            if isinstance(f, tirx.PrimFunc) and not _scheduled(f)}
    seen: list[tuple[Any, str]] = []
    observed = [_Observed(r, seen) for r in (default_gpu_rules() if rules is None else rules)]
    with target:
        out = dl.ApplyDefaultSchedule(*observed)(mod)
    rule_of = {gv: next((name for f, name in seen if f.same_as(func)), NO_RULE)
               for gv, func in todo.items()}
    funcs = {gv: f.with_attr(SCHEDULE_ATTR, rule_of[gv]) if gv in rule_of else f
             for gv, f in out.functions_items()}
    scheduled = tvm.IRModule(funcs)
    return scheduled.with_attrs(out.attrs) if out.attrs is not None else scheduled


def _scheduled(func: Any) -> bool:
    attrs = func.attrs
    return attrs is not None and "tirx.is_scheduled" in attrs and bool(
        attrs["tirx.is_scheduled"])


def _buffer_of(region: Any) -> Any:
    """The buffer a block's write region is of (``BufferRegion.buffer``; in TVM 0.27 a
    ``TensorRegion`` whose source is a load of the buffer)."""
    buf = getattr(region, "buffer", None)
    if buf is not None:
        return buf
    source = region.source
    return getattr(source, "buffer", source)
