"""The attention kernel against the decomposed form it replaced, on llvm, at ViT-S/16's size
(224 px: 197 tokens, 6 heads of 64).

Three programs of one attention, BSHD in and out, timed with TVM's time evaluator (median of
repeats) in one process, so their ratios are comparable on a noisy machine:

- ``kernel``: Relax's ``nn.attention`` lowered by cl_validate (`cl_validate.compile.attention`);
- ``tvm``: the same op lowered by TVM 0.27's own legalization (transposes inside the kernel);
- ``decomposed``: what a model's SDPA became before (torch.export's decomposition): a
  transpose of q, k and v to BHSD, matmul, scale, softmax, matmul, a transpose back.

Then a whole ViT-S/16 encoder block (LayerNorm, attention, MLP) compiled through the case
pipeline both ways: with SDPA kept (today) and with it decomposed by torch.export's default
table (before), timed the same way.

    python benchmarks/attention_kernel.py [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPE = (1, 197, 6, 64)  # ViT-S/16 at 224: the class token and 14 x 14 patches


def _op_module(decomposed: bool) -> object:
    from tvm import relax

    bb = relax.BlockBuilder()
    q, k, v = (relax.Var(n, relax.TensorType(SHAPE, "float32")) for n in "qkv")
    with bb.function("main", [q, k, v]):
        with bb.dataflow():
            if decomposed:
                qh = bb.emit(relax.op.permute_dims(q, [0, 2, 1, 3]))
                kt = bb.emit(relax.op.permute_dims(k, [0, 2, 3, 1]))
                vh = bb.emit(relax.op.permute_dims(v, [0, 2, 1, 3]))
                s = bb.emit(relax.op.multiply(relax.op.matmul(qh, kt),
                                              relax.const(SHAPE[3] ** -0.5, "float32")))
                p = bb.emit(relax.op.nn.softmax(s, axis=3))
                out = bb.emit(relax.op.permute_dims(relax.op.matmul(p, vh), [0, 2, 1, 3]))
            else:
                out = bb.emit(relax.op.nn.attention(q, k, v))
            bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.get()


def _time(run: Callable[[], object], args: list[object], repeat: int) -> float:
    import tvm

    timer = run.time_evaluator("main", tvm.cpu(), number=3, repeat=repeat)  # type: ignore[attr-defined]
    return float(timer(*args).median) * 1e3


def op_times(repeat: int) -> dict[str, float]:
    import numpy as np
    import tvm
    from tvm import relax

    from cl_validate.compile.attention import attention_legalizations

    target = tvm.target.Target({"kind": "llvm"})
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.standard_normal(SHAPE).astype("float32")) for _ in "qkv"]
    out = {}
    for name, decomposed, ours in (("kernel", False, True), ("tvm", False, False),
                                   ("decomposed", True, False)):
        mod = _op_module(decomposed)
        with target:
            mod = relax.transform.LegalizeOps(
                customize_legalize_map=attention_legalizations() if ours else None)(mod)
        mod = relax.transform.FuseTIR()(relax.transform.FuseOps()(
            relax.transform.AnnotateTIROpPattern()(mod)))
        vm = relax.VirtualMachine(tvm.compile(mod, target=target), tvm.cpu())
        out[name] = _time(vm, args, repeat)
    return out


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
            out[name] = _time(vm, params, repeat)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    ops = op_times(args.repeat)
    print(f"one attention {SHAPE} (BSHD), llvm, median of {args.repeat} x 3 runs:")
    for name, ms in ops.items():
        print(f"  {name:<11} {ms:8.2f} ms   {ms / ops['decomposed']:.2f}x the decomposed form")
    blocks = block_times(args.repeat)
    print("ViT-S/16 block (LayerNorm, attention, MLP) through the nhwc pipeline:")
    for name, ms in blocks.items():
        print(f"  {name:<16} {ms:8.2f} ms   {ms / blocks['sdpa decomposed']:.2f}x")


if __name__ == "__main__":
    main()
