"""Running a case: seeded inputs, the PyTorch reference, and the compiled program on a device.

Inputs are drawn in PyTorch's shape and layout from the case seed, so every run of a case
sees the same data; the compiled program gets them in the layout the case declares
(``layout = "NHWC"``) and its outputs come back in PyTorch's layout for the comparison
(`cl_validate.checks.numerics`). Runs in a worker (it imports torch and TVM).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import tvm
from tvm import relax
from tvm.runtime import Tensor as TvmTensor

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
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(_NP_DTYPES[spec.dtype])
    lo, hi = spec.range or (-1.0, 1.0)
    x = rng.uniform(lo, hi, size=shape)
    if spec.dtype == "bfloat16":
        return x.astype(np.float32)  # converted by torch; numpy has no bfloat16
    return x.astype(_NP_DTYPES[spec.dtype])


def torch_inputs(case: CaseSpec, arrays: Sequence[np.ndarray]) -> list[torch.Tensor]:
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
    # tvm.runtime containers (Array / tuple objects) are sequences
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
    with torch.no_grad():
        out = model(*inputs)
    return [_to_numpy(o) for o in flatten_outputs(out)]


def float64_model(model: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy of the model for the float64 reference (the model itself is left as it
    is); made once per case, run on every sample with `run_torch64`."""
    return copy.deepcopy(model).double()


def run_torch64(model64: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> list[np.ndarray]:
    """The float64 reference: `float64_model`'s copy on the same inputs in float64 (integer
    inputs stay integers)."""
    args = [t.double() if t.is_floating_point() else t for t in inputs]
    with torch.no_grad():
        out = model64(*args)
    return [_to_numpy(o) for o in flatten_outputs(out)]


def program_args(case: CaseSpec, arrays: Sequence[np.ndarray], device: Any,
                 params: Sequence[Any] = ()) -> list[Any]:
    """The compiled program's arguments on `device`: inputs in the layouts the case declares,
    then the weights a pipeline left as parameters."""
    args = []
    for spec, a in zip(case.inputs, arrays, strict=True):
        if spec.layout == "NHWC":
            a = np.ascontiguousarray(np.transpose(a, (0, 2, 3, 1)))
        args.append(tvm.runtime.tensor(a, device))
    args.extend(tvm.runtime.tensor(p.numpy(), device) for p in params)
    return args


def run_tvm(executable: Any, case: CaseSpec, arrays: Sequence[np.ndarray], device: Any,
            params: Sequence[Any] = ()) -> list[np.ndarray]:
    """Run the compiled program with the declared input layouts; outputs back in torch layout.

    `params` are weights a pipeline left as parameters of main (not bound as constants).
    """
    vm = relax.VirtualMachine(executable, device)
    outs = [_to_numpy(o) for o in flatten_outputs(vm["main"](*program_args(
        case, arrays, device, params)))]
    for i, o in enumerate(outs):
        if case.output_layout(i) == "NHWC" and o.ndim == 4:
            outs[i] = np.ascontiguousarray(np.transpose(o, (0, 3, 1, 2)))
    return outs


