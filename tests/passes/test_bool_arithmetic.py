"""BoolArithmetic: a model's mask arithmetic (products, sums, min/max, comparisons, all/any,
arg-max, cumulative sums of booleans) builds for llvm and computes what PyTorch does."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
import tvm
from torch import nn

from cl_validate.compile.converters import custom_convert_map
from cl_validate.compile.passes import BoolArithmetic

#: mask arithmetic as models write it: (a, b) two masks of the same shape -> a tensor
MASK_OPS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "product (and)": lambda a, b: a * b,
    "sum (or)": lambda a, b: a + b,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "all": lambda a, b: (a * b).all(1, keepdim=True),
    "any": lambda a, b: a.any(1, keepdim=True),
    "compare": lambda a, b: a > b,
    "equal": lambda a, b: a == b,
    "cumsum": lambda a, b: a.cumsum(1),
}


class Masks(nn.Module):
    """Two masks of a convolution's sigmoid (RT-DETR's anchor validity is made so)."""

    def __init__(self, op: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.conv, self.op = nn.Conv2d(3, 4, 1), op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x).sigmoid()
        return self.op(y > 0.3, y < 0.7)


def _imported(model: nn.Module) -> tuple[tvm.IRModule, np.ndarray]:
    """`model` exported and imported as the pipeline does (its converters), weights bound."""
    from tvm.relax.frontend.torch import from_exported_program

    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        exported = torch.export.export(model.eval(), (x,))
    return from_exported_program(exported, custom_convert_map=custom_convert_map(),
                                 unwrap_unit_return_tuple=True), x.numpy()


@pytest.mark.parametrize("name", list(MASK_OPS))
def test_mask_arithmetic_builds_and_is_exact(name: str,
                                             run_llvm: Callable[..., list[np.ndarray]]
                                             ) -> None:
    model = Masks(MASK_OPS[name])
    mod, x = _imported(model)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    (got,) = run_llvm(BoolArithmetic()(mod), x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_tvm_alone_cannot_build_it(run_llvm: Callable[..., list[np.ndarray]]) -> None:
    """Why the pass exists (TVM 0.27's llvm code generation on booleans); if this starts to
    build, the pass may go."""
    mod, x = _imported(Masks(MASK_OPS["product (and)"]))
    with pytest.raises(tvm.error.InternalError, match="kDLFloat"):
        run_llvm(mod, x)


def test_a_failed_build_names_the_kernel_it_failed_on() -> None:
    """A build that fails in code generation says which kernel (its name lists the ops
    fused into it), found by building each kernel alone."""
    from tvm import relax

    from cl_validate.compile.culprit import failing_kernel

    mod, _ = _imported(Masks(MASK_OPS["product (and)"]))
    mod = relax.transform.FuseTIR()(relax.transform.FuseOps()(relax.transform.LegalizeOps()(
        mod)))
    llvm = tvm.target.Target({"kind": "llvm"})
    with pytest.raises(tvm.error.InternalError) as failed:
        tvm.compile(mod, target=llvm)
    where = failing_kernel(mod, llvm, failed.value)
    assert where is not None and where.startswith("kernel ") and "multiply" in where
