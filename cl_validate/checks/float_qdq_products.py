"""The ``float_qdq_products`` check: the products of a quantized program that run in float.

A PT2E model holds dequantize → conv / matmul → quantize; a backend with integer kernels runs
each as one int8 product (int8 in, int32 accumulation). TVM 0.27 without QNN does not: left
alone it folds the weights' dequantize into float32 constants and runs every product in
float32. The nhwc pipeline's ``integer_compute`` stage
(`cl_validate.compile.passes.integer_compute`) rewrites them to integer products, and names
each one it leaves in float with the reason (in this check's body).

Every QDQ product counts — convolutions, transposed convolutions and matmuls (a quantized
Linear) alike (`cl_validate.analysis.qdq_products`): a program with one Linear left in float
fails a budget of 0, as one with a convolution left does. Counted on every target from the
compiled program alone (cuda too, with no GPU), against an optional budget with the ratchet.
The budget key ``float_qdq_convs`` (this check's name when it counted convolutions only) is
read as this one. Skipped on a program with no quantize op (a float model).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from cl_validate.checks.ratchet import BudgetCheck, budget_verdict, count_cell
from cl_validate.checks.registry import FailureKind, Judging, register
from cl_validate.checks.verdict import CheckResult, Figures, Status
from cl_validate.measurements.kernel_list import KernelList, QdqProduct
from cl_validate.measurements.kinds import SkipKind
from cl_validate.spec.budget_keys import BudgetKey

NAME = "float_qdq_products"
#: the key this budget had when it counted convolutions only: still read, as this one
ALIAS = "float_qdq_convs"
_QDQ = re.compile(r"^(de)?quantize\d*$")


class QdqKind(FailureKind):
    NOT_MEASURED = ("ProductsUnknown", "the program's quantized products were not recorded "
                    "(a kernel list measured before they were)")


@dataclass(frozen=True)
class QdqFigures(Figures):
    budget: float | None = None
    budget_source: str | None = None
    stale: bool = False
    float_products: int | None = None  # QDQ products computing in float
    integer_products: int | None = None  # QDQ products computing in integers


def quantized(kernels: KernelList) -> bool:
    """Whether the program quantizes at all (a quantize or dequantize op in some kernel)."""
    return any(_QDQ.match(op) for k in kernels for op in k.ops)


def split_products(kernels: KernelList) -> tuple[list[QdqProduct], list[QdqProduct]]:
    """The QDQ products in float and in integers (both empty where not recorded)."""
    products = kernels.qdq_products or ()
    return [p for p in products if not p.integer], [p for p in products if p.integer]


def _tally(products: list[QdqProduct]) -> str:
    """``3 conv2d, 1 matmul``."""
    counts = Counter(p.op for p in products)
    return ", ".join(f"{n} {op}" for op, n in counts.items()) or "none"


def products_text(kernels: KernelList, left: list[str]) -> str:
    """The body: how many of each product in float and in integers, and why each float one
    stayed float (what `integer_compute` said: `left`)."""
    floats, ints = split_products(kernels)
    lines = [f"quantized products: {len(floats)} in float between QDQ ops ({_tally(floats)}), "
             f"{len(ints)} in integers ({_tally(ints)})"]
    if left:
        lines.append("left in float by the integer_compute stage:")
        lines += [f"  {line}" for line in left]
    elif floats:
        lines.append("(no integer_compute stage in this pipeline, or the case says "
                     "integer_compute = false)")
    return "\n".join(lines)


@register
class FloatQdqProducts(BudgetCheck):
    name = NAME
    order = 55
    summary = ("products of a quantized program that run in float (dequantize → float conv, "
               "transposed conv or matmul → quantize, not an integer kernel) ≤ budget (when "
               "the case declares one, as `float_qdq_products` or its old name "
               "`float_qdq_convs`; reported for every quantized program, on every target, "
               "from the compiled program alone)")
    declared_by = ("budget", NAME)
    budget = BudgetKey(NAME, "count", minimum=0, label="float_products", aliases=(ALIAS,))
    kinds = (*BudgetCheck.kinds, QdqKind)
    title = "float products between QDQ"

    def figure(self, kernels: KernelList) -> int | None:
        """Only for a quantized program whose products were recorded."""
        if not quantized(kernels) or kernels.qdq_products is None:
            return None
        return len(split_products(kernels)[0])

    def judge(self, j: Judging) -> CheckResult:
        case, target, kernels = j.case, j.target, j.m.kernels
        assert kernels is not None
        if not quantized(kernels):
            return CheckResult(NAME, Status.SKIPPED, f"no quantize op in the program "
                               f"({target}): quantized models only",
                               kind=SkipKind.NOT_QUANTIZED)
        budget = case.budget_for(target)
        limit = budget.get(NAME)
        if kernels.qdq_products is None:
            return CheckResult(NAME, Status.ERROR, f"the quantized products of this program "
                               f"were not recorded ({target})", kind=QdqKind.NOT_MEASURED,
                               line=budget.line(NAME))
        floats, ints = split_products(kernels)
        figures = QdqFigures(float_products=len(floats), integer_products=len(ints))
        body = products_text(kernels, j.m.float_left)
        if limit is None:
            return CheckResult(NAME, Status.SKIPPED, f"no {NAME} budget declared "
                               f"({len(floats)} float, {len(ints)} integer products)",
                               kind=SkipKind.NOT_DECLARED, body=body, figures=figures)
        why = f"; first: {j.m.float_left[0]}" if j.m.float_left else ""
        return budget_verdict(j, NAME, len(floats), int(limit), budget.line(NAME), body,
                              figures, "a quantized product left to float: see its kernel "
                              f"(`cl-validate show {case.name} --target {target}`){why}")

    def cell(self, result: CheckResult, compact: bool = True) -> str | None:
        """The float products against the budget, and the integer ones beside them:
        ``0/0 +52i`` (console), ``0 / 0, 52 integer`` (Markdown)."""
        f = result.figures
        if not isinstance(f, QdqFigures):
            return None
        cell = count_cell(f.float_products, f.budget, compact)
        if cell is None or f.integer_products is None:
            return cell
        return f"{cell} +{f.integer_products}i" if compact else \
            f"{cell}, {f.integer_products} integer"
