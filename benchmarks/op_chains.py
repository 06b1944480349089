"""Random chains of the ops CNNs and hybrids are built from, each compiled through the ``nhwc``
pipeline for llvm and run against PyTorch on the same weights and input: a probe for wrong
programs and failed builds that no hand-written test names.

Each draw is a convolution followed by 2-7 ops of the vocabulary below (norms written out and
as modules, channel shuffles, space-to-depth, transposes of H and W, flips, pads, resizes,
gates, scans, sorts, ...), at a random size, batch, input layout (NCHW or NHWC) and, with
``--dtype``, in half precision. A float32 draw passes when TVM is within rtol = atol = 1e-4 of
eager PyTorch; a half-precision one when TVM's distance from the float32 model is at most 4x
eager half's own plus 1e-3 of the output's scale. A failed import or build is a finding too.

    python benchmarks/op_chains.py [--count N] [--seed S] [--dtype float16|bfloat16]

Prints one line per draw (``OK``, ``BAD`` with the error ratio, ``EXC`` with the message)
and exits 1 when any draw is not OK. The 2026-11-30 findings are in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

#: The vocabulary: `Chain` makes each op's modules, `_apply` computes it.
OPS = ["conv", "conv1", "dw", "bn", "relu", "gelu", "shuffle", "maxpool", "avgpool", "pad",
       "up", "bilinear", "reflect", "cat_self", "chunk_add", "se", "gn", "ln_perm", "ln2d",
       "pixshuf", "unshuffle", "slice_c", "slice_hw", "res", "transpose_hw", "roll", "flip",
       "mean_keep", "softmax_c", "mul_const", "index_c", "where", "cbam", "eca", "cumsum_w",
       "sort_c", "tile_c", "mlp_last", "tokens_linear", "reshape_groups", "convT"]


class Chain(nn.Module):
    """A convolution, then `plan`'s ops in order on an NCHW map."""

    def __init__(self, plan: list[str], channels: int = 3) -> None:
        super().__init__()
        self.plan, c = plan, channels
        self.mods = nn.ModuleList()
        for op in plan:
            m: nn.Module = nn.Identity()
            if op == "conv":
                m, c = nn.Conv2d(c, 6, 3, padding=1), 6
            elif op == "conv1":
                m, c = nn.Conv2d(c, 8, 1), 8
            elif op in ("dw", "res"):
                m = nn.Conv2d(c, c, 3, padding=1, groups=c if op == "dw" else 1)
            elif op == "bn":
                m = nn.BatchNorm2d(c)
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
            elif op == "se":
                m = nn.Sequential(nn.Conv2d(c, 4, 1), nn.ReLU(), nn.Conv2d(4, c, 1))
            elif op == "gn":
                m = nn.GroupNorm(2 if c % 2 == 0 else 1, c)
            elif op in ("ln_perm", "ln2d", "mlp_last", "tokens_linear"):
                m = nn.LayerNorm(c) if op.startswith("ln") else nn.Linear(c, c)
            elif op == "pixshuf":
                m, c = nn.Conv2d(c, 8, 1), 2
            elif op == "unshuffle":
                m = nn.Conv2d(4 * c, c, 1)
            elif op == "cbam":
                m = nn.Conv2d(2, 1, 7, padding=3)
            elif op == "eca":
                m = nn.Conv1d(1, 1, 3, padding=1, bias=False)
            elif op == "convT":
                m, c = nn.ConvTranspose2d(c, 4, 2, 2), 4
            elif op in ("cat_self", "tile_c"):
                c *= 2
            self.mods.append(m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for op, m in zip(self.plan, self.mods, strict=True):
            x = _apply(op, m, x)
        return x


def _apply(op: str, m: Any, x: torch.Tensor) -> torch.Tensor:
    b, c, h, w = x.shape
    if op in ("conv", "conv1", "dw", "bn", "gn", "convT"):
        return m(x)  # type: ignore[no-any-return]
    if op == "res":
        return x + m(x)
    if op in ("relu", "gelu"):
        return F.relu(x) if op == "relu" else F.gelu(x)
    if op == "shuffle":
        g = 2 if c % 2 == 0 else 1
        return x.view(b, g, c // g, h, w).transpose(1, 2).reshape(b, c, h, w)
    if op == "maxpool":
        return F.max_pool2d(x, 3, 1, 1)
    if op == "avgpool":
        return F.avg_pool2d(x, 2, 2) if h % 2 == 0 and w % 2 == 0 else x
    if op == "pad":
        return F.pad(x, (1, 0, 0, 1))
    if op == "reflect":
        return F.pad(x, (1, 1, 2, 0), mode="reflect") if h > 2 and w > 2 else x
    if op == "up":
        return F.interpolate(x, scale_factor=2, mode="nearest") if h < 16 else x
    if op == "bilinear":
        return F.interpolate(x, size=(h + 3, w + 1), mode="bilinear", align_corners=False)
    if op == "cat_self":
        return torch.cat([x, x * 0.5], 1)
    if op == "tile_c":
        return x.repeat(1, 2, 1, 1)
    if op == "chunk_add":
        if c % 2:
            return x
        p, q = x.chunk(2, 1)
        return torch.cat([p + q, p * q], 1)
    if op == "se":
        return x * torch.sigmoid(m(x.mean((2, 3), keepdim=True)))
    if op == "ln_perm":
        return m(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)  # type: ignore[no-any-return]
    if op == "ln2d":  # ConvNeXt's LayerNorm over the channels of an NCHW map, written out
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        return (x - u) / torch.sqrt(s + 1e-6) * m.weight[:, None, None] + m.bias[:, None, None]
    if op == "mlp_last":
        return m(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)  # type: ignore[no-any-return]
    if op == "tokens_linear":
        return m(x.flatten(2).transpose(1, 2)).transpose(1, 2).reshape(b, c, h, w)  # type: ignore[no-any-return]
    if op == "pixshuf":
        return F.pixel_shuffle(m(x), 2)
    if op == "unshuffle":
        return m(F.pixel_unshuffle(x, 2)) if h % 2 == 0 and w % 2 == 0 else x  # type: ignore[no-any-return]
    if op == "slice_c":
        return x[:, 1:] if c > 2 else x
    if op == "slice_hw":
        return x[:, :, 1:, :-1] if h > 3 and w > 3 else x
    if op == "transpose_hw":
        return x.transpose(2, 3)
    if op == "roll":
        return torch.roll(x, shifts=(1, -1), dims=(2, 3))
    if op == "flip":
        return torch.flip(x, [3])
    if op == "mean_keep":
        return x - x.mean((2, 3), keepdim=True)
    if op == "softmax_c":
        return x.softmax(1)
    if op == "mul_const":
        return x * torch.arange(c, dtype=x.dtype).view(1, c, 1, 1)
    if op == "index_c":
        return x[:, torch.arange(c - 1, -1, -1)]
    if op == "where":
        return torch.where(x > 0, x, x * 0.1)
    if op == "cbam":
        s = torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], 1)
        return x * torch.sigmoid(m(s))
    if op == "eca":
        return x * torch.sigmoid(m(x.mean((2, 3))[:, None, :])[:, 0])[:, :, None, None]
    if op == "cumsum_w":
        return x.cumsum(3) * 0.2
    if op == "sort_c":
        return x.sort(1).values
    if op == "reshape_groups":
        return x.reshape(b, 2, c // 2, h * w).softmax(-1).reshape(b, c, h, w) if c % 2 == 0 else x
    raise ValueError(op)


def _draw(rng: random.Random) -> tuple[list[str], list[int], str]:
    plan = ["conv"] + [rng.choice(OPS) for _ in range(rng.randint(2, 7))]
    h, w = rng.choice([(8, 8), (6, 10), (9, 7)])
    return plan, [rng.choice([1, 2]), 3, h, w], rng.choice(["NCHW", "NHWC"])


def probe(i: int, plan: list[str], shape: list[int], layout: str, dtype: str,
          folder: Path) -> tuple[str, float | str, int]:
    """One draw: ("OK" | "BAD" | "EXC", error ratio or message, runtime transforms)."""
    import numpy as np  # lazy: the script's --help stays light
    import tvm

    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.execute import run_torch, run_tvm
    from cl_validate.session.inputs import make_inputs, torch_inputs
    from cl_validate.spec import load_case

    path = folder / f"chain_{i}.toml"
    path.write_text(f'model = "x:y"\nseed = {i}\n[[inputs]]\nname = "x"\nshape = {shape}\n'
                    f'dtype = "{dtype}"\nlayout = "{layout}"\n'
                    '[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n')
    case = load_case(path)
    torch.manual_seed(i)
    model32 = Chain(plan).eval()
    model = copy.deepcopy(model32).to(getattr(torch, dtype))
    arrays = make_inputs(case)
    tensors = torch_inputs(case, arrays)
    with torch.no_grad():
        want = run_torch(model, tensors)[0].astype("float32")
        ref = model32(tensors[0].float()).numpy()
    try:
        compiled = compile_case(export_and_import(model, case, tensors), case, "llvm")
        got = run_tvm(compiled.executable, case, arrays, tvm.cpu())[0].astype("float32")
    except Exception as exc:  # a failed import or build is a finding
        return "EXC", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}", -1
    transforms = len(read_kernel_list(compiled).runtime_transforms)
    if got.shape != want.shape:
        return "BAD", float("inf"), transforms
    if dtype == "float32":
        err = float(np.max(np.abs(got - want) / (1e-4 + 1e-4 * np.abs(want))))
    else:
        bound = 4 * float(np.max(np.abs(want - ref))) + 1e-3 * float(np.max(np.abs(ref)))
        err = float(np.max(np.abs(got - ref))) / max(bound, 1e-30)
    return ("OK" if err <= 1.0 else "BAD"), err, transforms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100, help="draws (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="the draws' seed (default 0)")
    parser.add_argument("--dtype", default="float32",
                        choices=["float32", "float16", "bfloat16"])
    args = parser.parse_args()
    rng = random.Random(args.seed)
    found = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.count):
            plan, shape, layout = _draw(rng)
            verdict, err, transforms = probe(i, plan, shape, layout, args.dtype, Path(tmp))
            found += verdict != "OK"
            figure = f"{err:.3g}" if isinstance(err, float) else err
            print(f"{i:4d} {verdict:3s} {figure} transforms={transforms} {layout} {shape} "
                  f"{plan}", flush=True)
    print(f"{args.count - found} of {args.count} OK")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
