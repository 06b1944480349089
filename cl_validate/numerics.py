"""Numerics: seeded inputs, PyTorch reference, TVM run, and the error statistics.

The bound is elementwise ``|tvm - torch| <= atol + rtol * |torch|`` (numpy.isclose). NaN or
Inf in either output always fails: a model that produces them cannot be validated, and a
tolerance must never hide them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cl_validate.spec import CaseSpec, InputSpec, Tolerance

if TYPE_CHECKING:
    import torch

_NP_DTYPES = {
    "float32": np.float32, "float16": np.float16, "float64": np.float64, "int8": np.int8,
    "uint8": np.uint8, "int32": np.int32, "int64": np.int64, "bool": np.bool_,
}


@dataclass(frozen=True)
class ErrorStats:
    """How far one TVM output is from PyTorch; truthy when within tolerance."""

    output: int
    shape: tuple[int, ...]
    tolerance: Tolerance
    max_abs: float
    max_rel: float
    mean_abs: float
    mismatched: int  # elements outside the bound
    total: int
    nonfinite_tvm: int
    nonfinite_torch: int
    worst_index: tuple[int, ...] | None
    shape_mismatch: str | None = None

    def __bool__(self) -> bool:
        return (self.shape_mismatch is None and self.mismatched == 0
                and self.nonfinite_tvm == 0 and self.nonfinite_torch == 0)

    def summary(self) -> str:
        """One line a reviewer can read alone."""
        if self.shape_mismatch:
            return f"output {self.output}: {self.shape_mismatch}"
        parts = [f"output {self.output}: max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g}"]
        if self.nonfinite_tvm or self.nonfinite_torch:
            parts.append(f"non-finite values: {self.nonfinite_tvm} in TVM, "
                         f"{self.nonfinite_torch} in PyTorch")
        if self.mismatched:
            parts.append(f"{self.mismatched}/{self.total} elements outside "
                         f"rtol {self.tolerance.rtol:g} atol {self.tolerance.atol:g}")
        return "; ".join(parts)

    def detail(self) -> str:
        return (f"output {self.output} shape {list(self.shape)}: max_abs={self.max_abs:.6g} "
                f"max_rel={self.max_rel:.6g} mean_abs={self.mean_abs:.6g} "
                f"mismatched={self.mismatched}/{self.total} "
                f"nonfinite(tvm/torch)={self.nonfinite_tvm}/{self.nonfinite_torch} "
                f"worst_at={list(self.worst_index) if self.worst_index else '-'} "
                f"rtol={self.tolerance.rtol:g} atol={self.tolerance.atol:g}")


def compare(actual: np.ndarray, expected: np.ndarray, tol: Tolerance, output: int = 0
            ) -> ErrorStats:
    """Error statistics of `actual` (TVM) against `expected` (PyTorch)."""
    if actual.shape != expected.shape:
        return ErrorStats(output, tuple(expected.shape), tol, float("inf"), float("inf"),
                          float("inf"), expected.size, expected.size, 0, 0, None,
                          f"shape {list(actual.shape)} from TVM, {list(expected.shape)} from "
                          "PyTorch")
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    fin_a, fin_e = np.isfinite(a), np.isfinite(e)
    both = fin_a & fin_e
    diff = np.where(both, np.abs(a - e), 0.0)
    rel = np.where(both, diff / np.maximum(np.abs(e), np.finfo(np.float64).tiny), 0.0)
    rel = np.where(diff == 0, 0.0, rel)
    bound = tol.atol + tol.rtol * np.abs(e)
    outside = both & (diff > bound)
    worst = None
    if diff.size:
        worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
    return ErrorStats(
        output=output, shape=tuple(expected.shape), tolerance=tol,
        max_abs=float(diff.max()) if diff.size else 0.0,
        max_rel=float(rel.max()) if rel.size else 0.0,
        mean_abs=float(diff.mean()) if diff.size else 0.0,
        mismatched=int(outside.sum()), total=int(e.size),
        nonfinite_tvm=int((~fin_a).sum()), nonfinite_torch=int((~fin_e).sum()),
        worst_index=worst,
    )


def make_inputs(case: CaseSpec) -> list[np.ndarray]:
    """Inputs in PyTorch's shape and layout, the same for every run of the same case."""
    rng = np.random.default_rng(case.seed)
    return [_one_input(rng, spec) for spec in case.inputs]


def _one_input(rng: np.random.Generator, spec: InputSpec) -> np.ndarray:
    if spec.dtype == "bool":
        return rng.integers(0, 2, size=spec.shape).astype(np.bool_)
    if spec.dtype in ("int8", "uint8", "int32", "int64"):
        info = np.iinfo(_NP_DTYPES[spec.dtype])
        lo, hi = spec.range or (max(info.min, -128), min(info.max, 127))
        return rng.integers(int(lo), int(hi) + 1, size=spec.shape).astype(_NP_DTYPES[spec.dtype])
    lo, hi = spec.range or (-1.0, 1.0)
    x = rng.uniform(lo, hi, size=spec.shape)
    if spec.dtype == "bfloat16":
        return x.astype(np.float32)  # converted by torch; numpy has no bfloat16
    return x.astype(_NP_DTYPES[spec.dtype])


def torch_inputs(case: CaseSpec, arrays: Sequence[np.ndarray]) -> list[torch.Tensor]:
    import torch

    out = []
    for spec, a in zip(case.inputs, arrays, strict=True):
        t = torch.from_numpy(np.ascontiguousarray(a))
        if spec.dtype == "bfloat16":
            t = t.to(torch.bfloat16)
        out.append(t)
    return out


def flatten_outputs(out: Any) -> list[Any]:
    """A model or VM result as a flat list of tensors (tuples and lists flattened in order)."""
    if isinstance(out, (tuple, list)):
        return [leaf for o in out for leaf in flatten_outputs(o)]
    try:  # tvm.runtime containers (Array / tuple objects) are sequences
        from tvm.runtime import Tensor as TvmTensor
    except ImportError:  # pragma: no cover
        TvmTensor = ()  # type: ignore[assignment,misc]
    if not isinstance(out, TvmTensor) and hasattr(out, "__len__") and hasattr(
            out, "__getitem__") and not hasattr(out, "numpy"):
        return [leaf for i in range(len(out)) for leaf in flatten_outputs(out[i])]
    return [out]


def _to_numpy(t: Any) -> np.ndarray:
    if hasattr(t, "detach"):
        t = t.detach()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        return np.asarray(t.cpu().numpy())
    return np.asarray(t.numpy())


def run_torch(model: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> list[np.ndarray]:
    """PyTorch eager reference outputs."""
    import torch

    with torch.no_grad():
        out = model(*inputs)
    return [_to_numpy(o) for o in flatten_outputs(out)]


def run_tvm(executable: Any, case: CaseSpec, arrays: Sequence[np.ndarray], device: Any,
            params: Sequence[Any] = ()) -> list[np.ndarray]:
    """Run the compiled program with the declared input layouts; outputs back in torch layout.

    `params` are weights a pipeline left as parameters of main (not bound as constants).
    """
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, device)
    args = []
    for spec, a in zip(case.inputs, arrays, strict=True):
        if spec.layout == "NHWC":
            a = np.ascontiguousarray(np.transpose(a, (0, 2, 3, 1)))
        args.append(tvm.runtime.tensor(a, device))
    args.extend(tvm.runtime.tensor(p.numpy(), device) for p in params)
    outs = [_to_numpy(o) for o in flatten_outputs(vm["main"](*args))]
    for i, o in enumerate(outs):
        if case.output_layout(i) == "NHWC" and o.ndim == 4:
            outs[i] = np.ascontiguousarray(np.transpose(o, (0, 3, 1, 2)))
    return outs


def compare_all(case: CaseSpec, target: str, actual: Sequence[np.ndarray],
                expected: Sequence[np.ndarray]) -> list[ErrorStats]:
    return [compare(a, e, case.tolerance_for(target, i)[0], i)
            for i, (a, e) in enumerate(zip(actual, expected, strict=True))]
