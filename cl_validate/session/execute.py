"""Running a case: PyTorch's outputs (eager float32, and the float64 reference), and the
compiled program's on a device, back in PyTorch's layout for the comparison
(`cl_validate.checks.numerics`). Runs where the model's code runs (it imports torch and TVM).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from tvm import relax

from cl_validate.compile.model_outputs import is_flat, named_outputs
from cl_validate.compile.tvm_targets import device_for
from cl_validate.session.device_host import flatten_outputs, host_for, hosted
from cl_validate.session.inputs import program_args, program_arrays
from cl_validate.spec import CaseSpec

#: The float dtypes numpy holds as they are.
_NUMPY_FLOATS = (torch.float16, torch.float32, torch.float64)


def _to_numpy(t: Any) -> np.ndarray:
    """A copy: an output may be a view of the model's own memory (a buffer it returns, a
    cache) that its next forward overwrites."""
    if hasattr(t, "detach"):
        t = t.detach()
        if t.dtype.is_floating_point and t.dtype not in _NUMPY_FLOATS:
            t = t.float()  # bfloat16, the float8s: exact in float32, which numpy holds
        elif t.dtype == torch.complex32:
            t = t.to(torch.complex64)
        return np.array(t.cpu().numpy(), copy=True)
    out = np.array(t.numpy(), copy=True)
    if out.dtype.kind == "V" or out.dtype.name == "bfloat16":  # TVM's bfloat16 (ml_dtypes)
        out = out.astype(np.float32)  # exact, as torch's bfloat16 outputs are read
    return out


def run_torch(model: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> list[np.ndarray]:
    """PyTorch eager reference outputs."""
    return run_torch_named(model, inputs).arrays


@dataclass(frozen=True)
class TorchOutputs:
    """A forward's outputs: their names and arrays (`model_outputs`), and whether the
    forward returned them as a tensor or a flat tuple (else export goes through a wrapper
    that does)."""

    names: list[str]
    arrays: list[np.ndarray]
    flat: bool
    #: the dtype each output had in PyTorch (``bfloat16`` arrays reach numpy as float32)
    dtypes: list[str]


def run_torch_named(model: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> TorchOutputs:
    """PyTorch eager reference outputs with their names."""
    with torch.no_grad():
        out = model(*inputs)
    named = named_outputs(out)
    return TorchOutputs([n for n, _ in named], [_to_numpy(t) for _, t in named], is_flat(out),
                        [str(getattr(t, "dtype", "")).removeprefix("torch.") for _, t in named])


def float64_model(model: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy of the model for the float64 reference (the model itself is left as it
    is); made once per case, run on every sample with `run_torch64`."""
    return copy.deepcopy(model).double()


def run_torch64(model64: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> list[np.ndarray]:
    """The float64 reference: `float64_model`'s copy on the same inputs in float64 (integer
    inputs stay integers); a quantized model's QDQ ops run in float64 too
    (`_GraphInFloat64`), and a graph module's baked float32 tensors are made float64.

    An eager model whose forward makes float32 tensors of its own (a diffusion model's
    timestep embedding, ``torch.arange(half, dtype=torch.float32)``; a cast ``.float()``)
    keeps them float32 where that runs; where it cannot (they meet the float64 weights in
    an op that does not promote: "mat1 and mat2 must have the same dtype"), it runs again
    with them made float64, as a graph module's always are: float32 is the least precision
    the model asks for. If that fails too, the first error is the one raised."""
    args = [t.double() if t.is_floating_point() else t for t in inputs]
    graph = isinstance(model64, torch.fx.GraphModule)  # exported: dtypes baked in
    try:
        with torch.no_grad(), _GraphInFloat64(promote_factories=graph):
            out = model64(*args)
    except (RuntimeError, TypeError) as first:
        if graph:
            raise
        try:
            with torch.no_grad(), _GraphInFloat64(promote_factories=True):
                out = model64(*args)
        except Exception:
            raise first from None
    return [_to_numpy(t) for _, t in named_outputs(out)]


#: casts a graph module calls with its dtype baked in at export (and the assertion a cast
#: that was a no-op at export leaves)
_CASTS = frozenset({"to", "_to_copy", "_assert_tensor_metadata"})
#: factory ops a graph module calls with its dtype baked in at export
_FACTORIES = frozenset({"zeros", "ones", "full", "empty", "empty_strided", "scalar_tensor",
                        "new_zeros", "new_ones", "new_full", "new_empty", "arange", "linspace",
                        "logspace", "eye"})


class _GraphInFloat64(TorchDispatchMode):
    """The same QDQ graph in float64: ``quantized_decomposed``'s quantize ops accept float32
    only, so here a quantize computes its integer codes from the float64 value exactly
    (``clamp(round(x / scale) + zero_point)``, kept as float64 numbers) and a dequantize
    returns float64. With `promote_factories` (a graph module), a float32 tensor the graph
    creates with the dtype baked in at export or by torch's default (a PT2E-quantized
    LSTM's zero states, ``aten.zeros(..., dtype=float32)``; ``linspace``) is created float64,
    as the eager module creates it from its float64 input; an eager model's own
    ``dtype=float32`` is its code's and stays.
    A cast of a floating tensor to float32 (``x.to(h.dtype)``, ``.float()``, ``type_as``)
    keeps it float64 there, and the assertion of float32 a cast that was a no-op at export
    leaves (``aten._assert_tensor_metadata``) takes float64: float32 is the least precision
    the model asks for (an integer made float32 is made float64 too: the same values).
    Every other op runs as it is."""

    def __init__(self, promote_factories: bool = False) -> None:
        super().__init__()
        self.promote_factories = promote_factories

    def __torch_dispatch__(self, func: Any, _types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        op = func.overloadpacket
        if self.promote_factories:
            args, kwargs = _float64_baked(op.__name__, args, kwargs)
            if op.__name__ in _FACTORIES:  # float32 by a baked dtype or torch's default
                f64 = {**kwargs, "dtype": torch.float64}
                if kwargs.get("dtype") == torch.float32:
                    return func(*args, **f64)
                out = func(*args, **kwargs)  # the default's dtype is known once made
                return func(*args, **f64) if out.dtype == torch.float32 else out
        if getattr(op, "_qualified_op_name", "").startswith("quantized_decomposed::"):
            name = op.__name__
            if name in ("quantize_per_tensor", "dequantize_per_tensor"):
                x, scale, zp, qmin, qmax = args[:5]
                return _qdq64(name, x, scale, zp, qmin, qmax, axis=None)
            if name in ("quantize_per_channel", "dequantize_per_channel"):
                x, scale, zp, axis, qmin, qmax = args[:6]
                return _qdq64(name, x, scale, zp, qmin, qmax, axis=int(axis))
        return func(*args, **kwargs)


def _float64_baked(name: str, args: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """A graph module's cast with float32 baked in at export, float64 (a factory that makes
    float32, by a baked dtype or torch's default, is asked for float64 where it is called):
    a cast to float32 of a float64 tensor (``x.to(h.dtype)``, ``.float()``, ``.type_as``; a
    no-op there is kept as an assertion of float32) or of an integer one (an index made
    float, RAFT's ``coords_grid``: the same values; left float32, it met float64 operands in
    ops that do not promote, a ``matmul``, a ``grid_sample``) — float32 is the least
    precision the model asks for, so float64 stays. Any other call as it is."""
    dtype = getattr(args[0], "dtype", None) if args else None
    cast = name in _CASTS and dtype is not None and (
        dtype == torch.float64 or not (dtype.is_floating_point or dtype.is_complex))
    if cast:
        args = tuple(torch.float64 if a == torch.float32 else a for a in args)
    if cast and kwargs.get("dtype") == torch.float32:
        kwargs = {**kwargs, "dtype": torch.float64}
    return args, kwargs


def _qdq64(name: str, x: torch.Tensor, scale: Any, zp: Any, qmin: int, qmax: int,
           axis: int | None) -> torch.Tensor:
    x = x.double()
    scale = torch.as_tensor(scale, dtype=torch.float64)
    zp = torch.as_tensor(zp, dtype=torch.float64)
    if axis is not None:  # per channel: along `axis`
        shape = [1] * x.dim()
        shape[axis] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    if name.startswith("quantize"):
        return torch.clamp(torch.round(x / scale) + zp, qmin, qmax)
    return (x - zp) * scale


def run_tvm(executable: Any, case: CaseSpec, arrays: Sequence[np.ndarray], device: Any,
            params: Sequence[Any] = ()) -> list[np.ndarray]:
    """Run the compiled program with the declared input layouts; outputs back in torch layout.

    `params` are weights a pipeline left as parameters of main (not bound as constants).
    """
    vm = relax.VirtualMachine(executable, device)
    return torch_layout(case, [_to_numpy(o) for o in flatten_outputs(vm["main"](*program_args(
        case, arrays, device, params)))])


def run_program(executable: Any, case: CaseSpec, arrays: Sequence[np.ndarray], device: str,
                params: Sequence[Any] = ()) -> list[np.ndarray]:
    """`run_tvm` on this machine's `device` (``cpu``, ``cuda``...): a GPU's in a device host
    (`device_host`: a GPU runtime does not survive the forks this process came from)."""
    if not hosted(device):
        return run_tvm(executable, case, arrays, device_for(device), params)
    outs = host_for(device).run_main(executable, program_arrays(case, arrays, params))
    return torch_layout(case, [np.array(o, copy=True) for o in outs])


def torch_layout(case: CaseSpec, outs: list[np.ndarray]) -> list[np.ndarray]:
    """A program's outputs in PyTorch's layout (an output the case declares NHWC, back)."""
    for i, o in enumerate(outs):
        if case.output_layout(i) == "NHWC" and o.ndim == 4:
            outs[i] = np.ascontiguousarray(np.transpose(o, (0, 3, 1, 2)))
    return outs


