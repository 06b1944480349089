"""What a quantized LayerNorm's view costs: the `sink_views` stage on and off, on llvm.

`tests/data/quant_models.py`'s ``NormHead`` (a conv stem to sequence-first tokens, a
LayerNorm, ``transpose(0, 1)`` to batch-first, a quantized Linear head; DETR's decoder end)
through PT2E with the x86 quantizer, at `--size` x `--size` input (``(size/4)²`` tokens) and
`--channels` channels. Compiled twice in one process from one export: with `SinkViews` (the
quantize runs in the LayerNorm's kernel, the view after it is free) and without (the
LayerNorm's float32 output goes to memory, and a kernel of its own reads it back through the
view to quantize it). Outputs compared bit for bit; each program's median (TVM's time
evaluator, `--repeat` rounds of 20 calls, the two programs alternating so that drift on a
shared machine hits both) and the ratio.

    python benchmarks/sink_views.py [--size 256] [--channels 64] [--repeat 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "data")]
CASE = """model = "quant_models:norm_head"
[[inputs]]
name = "x"
shape = [1, 3, {size}, {size}]
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
"""


def measure(size: int, channels: int, repeat: int) -> dict[str, object]:
    import functools

    import numpy as np
    import quant_models
    import tvm
    from tvm import relax

    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.compile import pipeline
    from cl_validate.compile.program import compile_case
    from cl_validate.session.case_session import CaseSession
    from cl_validate.session.inputs import program_args
    from cl_validate.spec import load_case

    quant_models.norm_head = functools.partial(quant_models.norm_head, channels, size)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "norm_head.toml"
        path.write_text(CASE.format(size=size))
        session = CaseSession(load_case(path))
        error = session.prepare()
        if error is not None:
            raise RuntimeError(error.message)
    real = pipeline.SinkViews
    runs, outputs, kernels = {}, {}, {}
    try:
        for on in (False, True):
            pipeline.SinkViews = real if on else (lambda: tvm.transform.Sequential([]))
            compiled = compile_case(session.front, session.case, "llvm")
            kernels[on] = len(read_kernel_list(compiled))
            vm = relax.VirtualMachine(compiled.executable, tvm.cpu())
            args = program_args(session.case, session.samples[0][1], tvm.cpu())
            outputs[on] = vm["main"](*args).numpy()
            runs[on] = (vm.time_evaluator("main", tvm.cpu(), number=20, repeat=1), args)
    finally:
        pipeline.SinkViews = real
    times: dict[bool, list[float]] = {False: [], True: []}
    for i in range(repeat):
        for on in ((False, True) if i % 2 else (True, False)):
            timer, args = runs[on]
            times[on].append(float(timer(*args).median))
    off, on = (statistics.median(times[k]) * 1e3 for k in (False, True))
    return {"kernels": (kernels[False], kernels[True]), "off_ms": off, "on_ms": on,
            "identical": bool(np.array_equal(outputs[False], outputs[True]))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=256, help="input height and width")
    ap.add_argument("--channels", type=int, default=64, help="the LayerNorm's channels")
    ap.add_argument("--repeat", type=int, default=15, help="timing rounds per program")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    r = measure(args.size, args.channels, args.repeat)
    tokens = (args.size // 4) ** 2
    print(f"NormHead, {tokens} tokens x {args.channels} channels, llvm: kernels "
          f"{r['kernels'][0]} without sink_views, {r['kernels'][1]} with; outputs "
          f"{'bit-identical' if r['identical'] else 'DIFFER'}; {r['off_ms']:.3f} ms -> "
          f"{r['on_ms']:.3f} ms ({r['on_ms'] / r['off_ms']:.3f}x)")


if __name__ == "__main__":
    main()
