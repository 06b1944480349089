"""``F.interpolate`` as cl_validate imports it against TVM 0.27's own converter, on llvm.

TVM's converter maps every mode to ``resize2d`` with the scale in/out (and rounded half-pixel
centres for nearest), which is not PyTorch's function for a nearest resize that is not a
whole upscale, nor for a scale factor whose output size was rounded
(`cl_validate.compile.resample_converters`). There cl_validate writes each axis as the taps
and weights of PyTorch's kernel: a gather and a weighted sum. This times both programs of one
resize of a 64 × 112 × 112 map (TVM's time evaluator, median of repeats, interleaved in one
process so their ratio is comparable on a noisy machine) and prints each one's largest
difference from PyTorch: TVM's is the wrong program's error, cl_validate's rounding.

    python benchmarks/resample.py [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPE = (1, 64, 112, 112)


def _resizes() -> list[tuple[str, Callable[..., object]]]:
    import torch.nn.functional as F

    return [
        ("nearest x1.5", lambda x: F.interpolate(x, scale_factor=1.5)),
        ("nearest to 75x75", lambda x: F.interpolate(x, size=(75, 75))),
        ("nearest x0.5", lambda x: F.interpolate(x, scale_factor=0.5)),
        ("bilinear x1.5 (odd sizes rounded)",
         lambda x: F.interpolate(x[..., :111, :111], scale_factor=1.5, mode="bilinear")),
        ("bicubic x1.5 (odd sizes rounded)",
         lambda x: F.interpolate(x[..., :111, :111], scale_factor=1.5, mode="bicubic")),
        ("bilinear to 150x150 (resize2d kept)",
         lambda x: F.interpolate(x, size=(150, 150), mode="bilinear")),
    ]


def _program(fn: Callable[..., object], x: object, ours: bool) -> object:
    import torch
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map
    from cl_validate.compile.decompositions import decompositions

    class Resize(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> object:
            return fn(x)

    exported = torch.export.export(Resize(), (x,)).run_decompositions(decompositions())
    mod = from_exported_program(exported, custom_convert_map=custom_convert_map() if ours
                                else None)
    executable = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    return relax.VirtualMachine(executable, tvm.cpu())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    import numpy as np
    import torch
    import tvm

    torch.manual_seed(0)
    x = torch.randn(*SHAPE)
    data = tvm.runtime.tensor(x.numpy())
    print(f"{'resize of ' + 'x'.join(map(str, SHAPE)):38s} {'TVM':>9s} {'ours':>9s} "
          f"{'ours/TVM':>8s} {'TVM err':>9s} {'our err':>9s}")
    for name, fn in _resizes():
        want = fn(x).numpy()  # type: ignore[attr-defined]
        vms = {ours: _program(fn, x, ours) for ours in (False, True)}
        errors = {ours: float(np.abs(vm["main"](data)[0].numpy() - want).max())  # type: ignore[index]
                  for ours, vm in vms.items()}
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.repeat):
            for ours, vm in vms.items():
                timer = vm.time_evaluator("main", tvm.cpu(), number=3, repeat=1)  # type: ignore[attr-defined]
                times[ours].append(timer(data).median * 1e3)
        tvm_ms, our_ms = (float(np.median(times[o])) for o in (False, True))
        print(f"{name:38s} {tvm_ms:7.2f}ms {our_ms:7.2f}ms {our_ms / tvm_ms:8.2f} "
              f"{errors[False]:9.2g} {errors[True]:9.2g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
