"""How long a sum a strided product may read strided through both operands, on llvm.

A strided product (`StridedProducts`) reads each operand through its chain of views and
permutes. When neither operand is contiguous along the summed depth, every term of the sum
touches a new cache line in each; TVM's matmul reads its rows' operand contiguously. Here,
Restormer's ``q @ kᵀ`` over channels-last tokens (q and k split from one computed
(tokens, 2 x heads x depth) tensor, q permuted to (heads, depth, tokens), k to
(heads, tokens, depth)) is compiled twice for each size in one process:

- ``both``: both operands read in place (`product_index.STRIDED_DEPTH` lifted), no transpose;
- ``rule``: as `walk_problem` decides (past `STRIDED_DEPTH` tokens, q keeps its transpose).

Each program's median (TVM's time evaluator, `--repeat` timings of 20 runs each, the two
programs interleaved so that drift on a shared machine hits both), the transposes left, and
the ratio. Outputs are compared bit for bit.

    python benchmarks/strided_depth.py [--tokens 64,128,...] [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = ((2, 16), (8, 8), (4, 32))  # (heads, depth): Restormer's, ViT-like, wider heads


def q_times_k(tokens: int, heads: int = 2, depth: int = 4):  # type: ignore[no-untyped-def]
    """The program: (1, tokens, 2 x heads x depth) in, (1, heads, depth, depth) out."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, tokens, heads * depth * 2], "float32"))
    with bb.function("main", [x], attrs={"num_input": 1}):
        with bb.dataflow():
            y = bb.emit(relax.op.multiply(x, x))  # computed at run time, as q and k are
            qk = bb.emit(relax.op.split(y, 2, axis=2))
            q, k = (bb.emit(relax.op.reshape(relax.TupleGetItem(qk, i),
                                             (1, tokens, heads, depth))) for i in (0, 1))
            qh = bb.emit(relax.op.permute_dims(q, [0, 2, 3, 1]))
            kt = bb.emit(relax.op.permute_dims(k, [0, 2, 1, 3]))
            out = bb.emit_output(relax.op.matmul(qh, kt))
        bb.emit_func_output(out)
    return bb.get()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", default="64,128,192,256,1024,4096,16384")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    import numpy as np
    import tvm
    from tvm import relax

    from cl_validate.compile.passes import product_index
    from cl_validate.compile.passes.strided_products import strided_products
    from cl_validate.ir import count_permutes

    llvm = tvm.target.Target({"kind": "llvm"})
    rule = product_index.STRIDED_DEPTH
    print(f"STRIDED_DEPTH = {rule}; llvm, {args.repeat} timings of 20 runs, medians")
    for heads, depth in SHAPES:
        for tokens in (int(t) for t in args.tokens.split(",")):
            mod = q_times_k(tokens, heads, depth)
            x = np.random.default_rng(0).standard_normal((1, tokens, heads * depth * 2))
            arg = tvm.runtime.tensor(x.astype("float32"))
            programs = {}
            for name, limit in (("both", 1 << 62), ("rule", rule)):
                product_index.STRIDED_DEPTH = limit
                new = strided_products(mod, llvm)
                ex = tvm.compile(relax.transform.LegalizeOps()(new), target=llvm)
                vm = relax.VirtualMachine(ex, tvm.cpu())
                programs[name] = (vm, count_permutes(new), vm["main"](arg).numpy())
            product_index.STRIDED_DEPTH = rule
            times: dict[str, list[float]] = {n: [] for n in programs}
            for _ in range(args.repeat):
                for name, (vm, _, _) in programs.items():
                    timer = vm.time_evaluator("main", tvm.cpu(), number=20, repeat=1)
                    times[name].append(timer(arg).median * 1e3)
            same = np.array_equal(programs["both"][2], programs["rule"][2])
            both, ruled = (float(np.median(times[n])) for n in ("both", "rule"))
            print(f"heads {heads} depth {depth} tokens {tokens:6d}: "
                  f"both in place {both:9.4f} ms ({programs['both'][1]} transposes); "
                  f"rule {ruled:9.4f} ms ({programs['rule'][1]}); "
                  f"both/rule {both / ruled:5.2f}; outputs identical {same}", flush=True)


if __name__ == "__main__":
    main()
