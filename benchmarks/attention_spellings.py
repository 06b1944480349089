"""Attention however it is spelled: the same attention written five ways, each compiled
through the case pipeline raised (today: one attention kernel) and with the raise left out
(the products, mask and softmax as the import wrote them), timed on one machine in one run.

The spellings are the bundled ``attention_spellings`` case's, at ViT-S/16's size (197
tokens, 384 channels, 6 heads; GQA with 3 K/V heads): ``matmul`` (raised before too, for
scale), ``einsum`` with a ``triu`` mask filled with ``-inf`` and the softmax written out
(``EinsumCausalAttention``), and ``repeat_interleave`` grouped heads with ``baddbmm`` on
batch and heads folded and a ``~tril`` mask (``GroupedFoldedAttention``). Per spelling:
kernels, runtime transforms and the median of TVM's time evaluator for each program, and
the raised one's time as a fraction of the other's; outputs compared with eager PyTorch.

    python benchmarks/attention_spellings.py [--target llvm] [--repeat N] [--tokens N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "model_cases"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # `unraised`, as a case names it


def unraised(ctx):  # type: ignore[no-untyped-def]
    """The nhwc pipeline without its raise_attention stage."""
    from cl_validate.compile.pipeline import nhwc

    return [s for s in nhwc(ctx) if s.name != "raise_attention"]


def _models(dim: int, heads: int) -> dict[str, object]:
    from zoo.attention import Attention, EinsumCausalAttention, GroupedFoldedAttention

    return {"matmul": Attention(dim, heads, fused=False),
            "einsum, triu -inf, softmax written out": EinsumCausalAttention(dim, heads,
                                                                             fused=False),
            "repeat_interleave GQA, baddbmm, ~tril": GroupedFoldedAttention(dim, heads)}


def measure(target_kind: str, repeat: int, tokens: int) -> list[tuple[str, str, int, int,
                                                                         float, float]]:
    import numpy as np
    import torch
    import tvm

    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.execute import run_torch
    from cl_validate.session.inputs import make_inputs, torch_inputs
    from cl_validate.spec import load_case
    from cl_validate.spec.targets import BUILTIN

    dev = tvm.device(BUILTIN[target_kind].device, 0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in _models(384, 6).items():
            torch.manual_seed(0)
            model = model.eval()  # type: ignore[attr-defined]
            for pipeline in ("nhwc", "attention_spellings:unraised"):
                path = Path(tmp) / "case.toml"
                path.write_text(f'model = "x:y"\npipeline = "{pipeline}"\n[[inputs]]\n'
                                f'name = "x"\nshape = [1, {tokens}, 384]\n')
                case = load_case(path)
                arrays = make_inputs(case)
                tensors = torch_inputs(case, arrays)
                compiled = compile_case(export_and_import(model, case, tensors), case,
                                        target_kind)
                kernels = read_kernel_list(compiled)
                vm = tvm.relax.VirtualMachine(compiled.executable, dev)
                args = [tvm.runtime.tensor(a, dev) for a in arrays]
                got = vm["main"](*args)
                got = (got[0] if isinstance(got, tvm.ir.Array) else got).numpy()
                err = float(np.abs(got - run_torch(model, tensors)[0]).max())
                timer = vm.time_evaluator("main", dev, number=5, repeat=repeat)
                ms = float(timer(*args).median) * 1e3
                rows.append((name, pipeline, len(kernels), len(kernels.runtime_transforms),
                             ms, err))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=("llvm", "cuda"), default="llvm")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=197)
    args = ap.parse_args()
    rows = measure(args.target, args.repeat, args.tokens)
    print(f"| spelling ({args.tokens} tokens, {args.target}) | program | kernels | transforms "
          "| median ms | max abs vs eager |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for name, pipeline, kernels, transforms, ms, err in rows:
        program = "raised" if pipeline == "nhwc" else "not raised"
        print(f"| {name} | {program} | {kernels} | {transforms} | {ms:.3f} | {err:.1e} |")
    for i in range(0, len(rows), 2):
        print(f"{rows[i][0]}: raised {rows[i][4] / rows[i + 1][4]:.2f}x the time of not raised")


if __name__ == "__main__":
    main()
