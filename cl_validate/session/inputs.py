"""The inputs of a case: drawn in PyTorch's shape and layout from the case seed, so every run
of a case sees the same data, and handed to the compiled program in the layout the case
declares (``layout = "NHWC"``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ml_dtypes  # apache-tvm's own dependency: its bfloat16 for numpy
import numpy as np
import torch
import tvm

from cl_validate.spec import CaseSpec, InputSpec

_NP_DTYPES = {
    "float32": np.float32, "float16": np.float16, "float64": np.float64, "int8": np.int8,
    "uint8": np.uint8, "int32": np.int32, "int64": np.int64, "bool": np.bool_,
}


def make_inputs(case: CaseSpec, sizes: Mapping[str, int] | None = None,
                seed: int | None = None) -> list[np.ndarray]:
    """Inputs in PyTorch's shape and layout, the same for every run of the same case; a
    dynamic dimension at its size in `sizes` (default: the size export traces with), drawn
    from `seed` (default: the case's seed)."""
    rng = np.random.default_rng(case.seed if seed is None else seed)
    at = case.example_sizes() if sizes is None else sizes
    return [_one_input(rng, spec, spec.concrete(at)) for spec in case.inputs]


def _one_input(rng: np.random.Generator, spec: InputSpec, shape: tuple[int, ...]
               ) -> np.ndarray:
    if spec.dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if spec.dtype in ("int8", "uint8", "int32", "int64"):
        info = np.iinfo(_NP_DTYPES[spec.dtype])
        lo, hi = spec.range or (max(info.min, -128), min(info.max, 127))
        return rng.integers(int(lo), int(hi), size=shape, endpoint=True,
                            dtype=np.int64).astype(_NP_DTYPES[spec.dtype])
    lo, hi = spec.range or (-1.0, 1.0)
    x = rng.uniform(lo, hi, size=shape)
    if spec.dtype == "bfloat16":
        return x.astype(np.float32)  # converted by torch; numpy has no bfloat16
    return x.astype(_NP_DTYPES[spec.dtype])


def torch_inputs(case: CaseSpec, arrays: Sequence[np.ndarray]) -> list[torch.Tensor]:
    """The inputs as tensors of their own: a model that normalizes its input in place
    (``x.sub_(0.5)``) changes its own copy, never the arrays every other consumer of the
    inputs (the compiled program, the float64 reference, the next sample) reads."""
    out = []
    for spec, a in zip(case.inputs, arrays, strict=True):
        t = torch.from_numpy(np.array(a, copy=True, order="C"))
        if spec.dtype == "bfloat16":
            t = t.to(torch.bfloat16)
        out.append(t)
    return out


def program_args(case: CaseSpec, arrays: Sequence[np.ndarray], device: Any,
                 params: Sequence[Any] = ()) -> list[Any]:
    """The compiled program's arguments on `device`: inputs in the layouts the case declares,
    then the weights a pipeline left as parameters. A bfloat16 input (held as float32, numpy
    has no bfloat16) is rounded to bfloat16 as torch rounds it (to nearest, ties to even)."""
    out = program_arrays(case, arrays, params)
    for i, spec in enumerate(case.inputs):
        if spec.dtype == "bfloat16":
            out[i] = out[i].astype(ml_dtypes.bfloat16)
    return [tvm.runtime.tensor(a, device) for a in out]


def program_arrays(case: CaseSpec, arrays: Sequence[np.ndarray], params: Sequence[Any] = ()
                   ) -> list[np.ndarray]:
    """`program_args` as NumPy arrays (for a program run in a device host)."""
    out = []
    for spec, a in zip(case.inputs, arrays, strict=True):
        if spec.layout == "NHWC":
            a = np.ascontiguousarray(np.transpose(a, (0, 2, 3, 1)))
        out.append(a)
    out.extend(p.numpy() for p in params)
    return out
