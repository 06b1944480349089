"""cl_validate's attention against the decomposed form it replaced and TVM's own lowering, on
llvm (ViT-S/16's size: 197 tokens, 6 heads of 64) or on a GPU (``--target cuda``: 197, 1024
and 4096 tokens, 6, 8 and 16 heads of 64; 2048 tokens, 8 heads of 128), with PyTorch's SDPA on
the same GPU.

Per shape, the programs of one attention, BSHD in and out, timed with TVM's time evaluator
(median of repeats) in one process, so their ratios are comparable on a noisy machine:

- ``ours``: Relax's ``nn.attention`` lowered by cl_validate (`cl_validate.compile.attention`:
  one kernel on a CPU; on a GPU one tiled kernel, K and V in shared memory, an online softmax);
- ``parts``: (cuda only) the GPU's other lowering, the two products and the softmax between
  them, scheduled by dlight (what ``ours`` was before the tiled kernel);
- ``tiled RxKxT``: (cuda only) the tiled kernel cut other ways (R query rows and K keys per
  tile, T threads per block), where it fits;
- ``tvm``: the same op lowered by TVM 0.27's own legalization (transposes inside the kernel);
- ``decomposed``: what a model's SDPA became before (torch.export's decomposition): a
  transpose of q, k and v to BHSD, matmul, scale, softmax, matmul, a transpose back;
- ``torch``: (cuda only) ``F.scaled_dot_product_attention`` in float32 on the same GPU,
  timed with CUDA events (median), BHSD views of the same BSHD tensors.

Each program's output is compared with the decomposed one's (max abs difference printed).
On llvm, a whole ViT-S/16 encoder block (LayerNorm, attention, MLP) is also compiled through
the case pipeline both ways: with SDPA kept (today) and decomposed (before).

    python benchmarks/attention_kernel.py [--target llvm|cuda] [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPE = (1, 197, 6, 64)  # ViT-S/16 at 224: the class token and 14 x 14 patches
GPU_SHAPES = (SHAPE, (1, 1024, 8, 64), (1, 4096, 16, 64), (1, 2048, 8, 128))


def _op_module(shape: tuple[int, ...], decomposed: bool) -> object:
    from tvm import relax

    bb = relax.BlockBuilder()
    q, k, v = (relax.Var(n, relax.TensorType(shape, "float32")) for n in "qkv")
    with bb.function("main", [q, k, v]):
        with bb.dataflow():
            if decomposed:
                qh = bb.emit(relax.op.permute_dims(q, [0, 2, 1, 3]))
                kt = bb.emit(relax.op.permute_dims(k, [0, 2, 3, 1]))
                vh = bb.emit(relax.op.permute_dims(v, [0, 2, 1, 3]))
                s = bb.emit(relax.op.multiply(relax.op.matmul(qh, kt),
                                              relax.const(shape[3] ** -0.5, "float32")))
                p = bb.emit(relax.op.nn.softmax(s, axis=3))
                out = bb.emit(relax.op.permute_dims(relax.op.matmul(p, vh), [0, 2, 1, 3]))
            else:
                out = bb.emit(relax.op.nn.attention(q, k, v))
            bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.get()


def _time(run: Callable[[], object], args: list[object], repeat: int, dev: object) -> float:
    timer = run.time_evaluator("main", dev, number=3, repeat=repeat)  # type: ignore[attr-defined]
    return float(timer(*args).median) * 1e3


def op_times(shape: tuple[int, ...], target_kind: str, repeat: int
             ) -> dict[str, tuple[float, float]]:
    """name → (median ms, max abs difference from the decomposed form's output)."""
    import numpy as np
    import tvm
    from tvm import relax

    from cl_validate.compile.attention import attention_legalizations
    from cl_validate.compile.tvm_targets import make_target
    from cl_validate.spec.targets import BUILTIN

    target = make_target(BUILTIN[target_kind])
    dev = tvm.device(BUILTIN[target_kind].device, 0)
    rng = np.random.default_rng(0)
    host = [rng.standard_normal(shape).astype("float32") for _ in "qkv"]
    args = [tvm.runtime.tensor(x, dev) for x in host]
    out: dict[str, tuple[float, float]] = {}
    results: dict[str, np.ndarray] = {}
    forms = [("decomposed", True, None), ("ours", False, True)]
    if target_kind == "cuda":
        forms.append(("parts", False, False))
    for name, decomposed, tiled in (*forms, ("tvm", False, None)):
        mod = _op_module(shape, decomposed)
        if tiled is not None:
            with target:
                mod = relax.transform.LegalizeOps(
                    customize_legalize_map=attention_legalizations(tiled))(mod)
        try:
            vm = relax.VirtualMachine(tvm.compile(mod, target=target), dev)
        except Exception as exc:  # TVM's own lowering does not build everywhere
            print(f"  {name}: does not build ({type(exc).__name__})", file=sys.stderr)
            continue
        results[name] = vm["main"](*args).numpy()
        diff = float(np.abs(results[name] - results["decomposed"]).max())
        out[name] = (_time(vm, args, repeat, dev), diff)
    if target_kind == "cuda":
        out.update(_tile_sizes(shape, target, dev, args, results["decomposed"], repeat))
        out["torch"] = _torch_sdpa(host, repeat, results["decomposed"])
    return out


#: Other cuts of the tiled kernel (query rows, keys, threads), timed beside the default one.
TILE_SIZES = ((64, 32, 128), (32, 32, 128), (64, 32, 64), (32, 32, 64), (32, 16, 128))


def _tile_sizes(shape: tuple[int, ...], target: object, dev: object, args: list[object],
                want: object, repeat: int) -> dict[str, tuple[float, float]]:
    """The tiled kernel alone, cut each way of `TILE_SIZES` that fits."""
    import numpy as np
    import tvm

    from cl_validate.compile.attention_tiles import (
        Operands,
        choose_tiles,
        tiled_attention,
        tiles_for,
    )

    ops = Operands(shape, shape, shape, None, "float32", "float32", (False, False, False),
                   None, None)
    out = {}
    for size in TILE_SIZES:
        tiles = tiles_for(shape[3], shape[3], (size,))
        if tiles is None or tiles == choose_tiles(ops):  # None, or what `ours` runs
            continue
        func = tiled_attention(ops, tiles).with_attr("global_symbol", "main")
        try:
            lib = tvm.compile(tvm.IRModule({"main": func}), target=target).mod
            result = tvm.runtime.tensor(np.zeros(shape, "float32"), dev)
            lib["main"](*args, result)
            diff = float(np.abs(result.numpy() - want).max())
            timer = lib.time_evaluator("main", dev, number=3, repeat=repeat)
            out["tiled " + "x".join(map(str, size))] = (
                float(timer(*args, result).median) * 1e3, diff)
        except Exception as exc:  # one cut that fails must not cost the others
            print(f"  tiled {size}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return out


def _torch_sdpa(host: list[object], repeat: int, want: object) -> tuple[float, float]:
    """PyTorch's SDPA, float32, on the GPU (BHSD views of the BSHD tensors)."""
    import numpy as np
    import torch

    q, k, v = (torch.from_numpy(x).cuda().transpose(1, 2) for x in host)  # type: ignore[arg-type]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    got = sdpa(q, k, v).transpose(1, 2).cpu().numpy()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            sdpa(q, k, v)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 3)
    return float(np.median(times)), float(np.abs(got - want).max())


def block_times(repeat: int) -> dict[str, float]:
    """A ViT-S/16 block through the case pipeline, SDPA kept and SDPA decomposed."""
    import tempfile

    import numpy as np
    import torch
    import tvm
    from torch import nn

    import cl_validate.compile.frontend as frontend
    from cl_validate.session.case_session import CaseSession
    from cl_validate.spec import load_case

    class Block(nn.Module):
        def __init__(self, dim: int = 384, heads: int = 6) -> None:
            super().__init__()
            self.heads = heads
            self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, n, c = x.shape
            q, k, v = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, c // self.heads
                                                      ).permute(2, 0, 3, 1, 4).unbind(0)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            x = x + self.proj(a.transpose(1, 2).reshape(b, n, c))
            return x + self.mlp(self.norm2(x))

    sys.modules["_vit_block"] = type(sys)("_vit_block")
    sys.modules["_vit_block"].block = Block  # type: ignore[attr-defined]
    out = {}
    keep = frontend.decompositions
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "vit_s_block.toml"
        path.write_text('model = "_vit_block:block"\ntargets = ["llvm"]\n[[inputs]]\n'
                        'name = "x"\nshape = [1, 197, 384]\n')
        case = load_case(path)
        for name, table in (("sdpa kept", keep),
                            ("sdpa decomposed", torch.export.default_decompositions)):
            frontend.decompositions = table  # type: ignore[assignment]
            try:
                session = CaseSession(case)
                compiled = session.compiled("llvm")
            finally:
                frontend.decompositions = keep  # type: ignore[assignment]
            vm = tvm.relax.VirtualMachine(compiled.executable, tvm.cpu())
            x = np.random.default_rng(0).standard_normal((1, 197, 384)).astype("float32")
            params = [tvm.runtime.tensor(x), *session.unbound_params(compiled)]
            out[name] = _time(vm, params, repeat, tvm.cpu())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=("llvm", "cuda"), default="llvm")
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    for shape in GPU_SHAPES if args.target == "cuda" else (SHAPE,):
        ops = op_times(shape, args.target, args.repeat)
        base = ops["decomposed"][0]
        print(f"one attention {shape} (BSHD), {args.target}, median of {args.repeat} x 3 runs:")
        for name, (ms, diff) in ops.items():
            torch = f"   {ms / ops['torch'][0]:.2f}x PyTorch" if "torch" in ops else ""
            print(f"  {name:<15} {ms:8.3f} ms   {ms / base:.2f}x the decomposed form{torch}"
                  f"   max abs diff {diff:.1e}", flush=True)
    if args.target == "llvm":
        blocks = block_times(args.repeat)
        print("ViT-S/16 block (LayerNorm, attention, MLP) through the nhwc pipeline:")
        for name, ms in blocks.items():
            print(f"  {name:<16} {ms:8.2f} ms   {ms / blocks['sdpa decomposed']:.2f}x")


if __name__ == "__main__":
    main()
