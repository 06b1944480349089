"""cl_validate's own cost on top of TVM, for one case: wall time and peak memory.

Runs, alternately and each in a fresh process (so all pay the same imports and cold caches),
(a) ``cl-validate run CASE --target llvm --no-cache``, (b) the shortest raw TVM script that
does the same work: torch.export, Relax import, ConvertLayout, bind + fold the weights,
legalize + fuse + build, one run, compare with PyTorch, and (c) cl_validate's own stages,
driven by the case session a case process runs (`CaseSession`: the model, its export, the
case's pipeline and build, one run), with none of the harness around them. Prints each run, the
median wall-time ratios a / b and a / c, and peak RSS. Ratios are taken within one invocation:
this machine is shared and noisy.

    python benchmarks/overhead.py model_cases/resnet50.toml --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

RAW = textwrap.dedent('''
    import sys, warnings
    warnings.filterwarnings("ignore")
    import numpy as np, torch, tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program
    sys.path[:0] = [{case_dir!r}, {cwd!r}]
    import importlib
    mod_name, _, attr = {model!r}.partition(":")
    factory = getattr(importlib.import_module(mod_name), attr)
    torch.manual_seed(0)
    model = factory().eval()
    x = np.random.default_rng(0).uniform(-1, 1, size={shape!r}).astype("float32")
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
        ep = torch.export.export(model, (torch.from_numpy(x),))
    mod = from_exported_program(ep, keep_params_as_input=True, unwrap_unit_return_tuple=True)
    mod, params = relax.frontend.detach_params(mod)
    mod = relax.transform.ConvertLayout({layout!r})(mod)
    main = mod["main"]
    n = int(main.attrs["num_input"])
    mod = relax.transform.BindParams("main", {{p.name: v for p, v in
                                              zip(main.params[n:], params["main"])}})(mod)
    mod = relax.transform.FoldConstant()(mod)
    target = tvm.target.Target({{"kind": "llvm"}})
    with target:
        mod = tvm.transform.Sequential([
            relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(), relax.transform.FuseOps(),
            relax.transform.FuseTIR()])(mod)
    ex = tvm.compile(mod, target=target)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(out, expected, rtol={rtol}, atol={atol})
''')

# The same stages as cl_validate, through the case session a case process drives (its model,
# export, pipeline, build and one run on the first sample) without any of the harness: no
# worker process, validation of the verdicts, cache key, analysis, attribution or reports.
# cl_validate / this ratio is the toolkit's own cost; cl_validate / RAW also counts what our
# stages do differently from TVM's defaults (faster weight folding, BatchNorm into the convs).
STAGES = textwrap.dedent('''
    import sys, warnings
    warnings.filterwarnings("ignore")
    import numpy as np
    sys.path[:0] = [{case_dir!r}, {cwd!r}]
    from cl_validate.session.case_session import CaseSession
    from cl_validate.spec import load_case
    from cl_validate.spec.options import RunOptions
    case = load_case({case_path!r})
    session = CaseSession(case, RunOptions(targets=("llvm",), isolate=False))
    expected = session.expected[0]
    out = session.run_program("llvm", session.samples[0][1])
    for o, e in zip(out, expected, strict=True):
        np.testing.assert_allclose(o, e, rtol={rtol}, atol={atol})
''')


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one child process tree (largest process in it)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code != 0:  # a failed check or a numerics mismatch makes the timing meaningless
        sys.exit(f"{' '.join(cmd)} failed ({code}):\n{err[-3000:]}")
    return wall, usage.ru_maxrss / 1024.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from cl_validate.spec import load_case

    case = load_case(args.case)
    if len(case.inputs) != 1 or case.inputs[0].layout:
        sys.exit("this benchmark handles single-input NCHW cases")
    tol = case.tolerance_for("llvm")[0]
    fmt = dict(case_dir=str(case.path.resolve().parent), cwd=os.getcwd(),
               case_path=str(args.case.resolve()), model=case.model,
               shape=list(case.inputs[0].shape),
               layout={k: list(v) for k, v in case.layout.items()},
               rtol=tol.rtol, atol=tol.atol)
    scripts = []
    for text in (RAW, STAGES):
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(text.format(**fmt))
            scripts.append(f.name)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    variants = {
        "cl_validate": [sys.executable, "-m", "cl_validate", "run", str(args.case), "--target",
                        "llvm", "--no-cache"],
        "raw TVM": [sys.executable, scripts[0]],
        "same stages": [sys.executable, scripts[1]],
    }
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    print(f"case {case.name}: cl_validate vs raw TVM vs cl_validate's stages called directly, "
          f"{args.repeat} alternating runs each")
    try:
        for i in range(args.repeat):
            for name, cmd in variants.items():
                wall, peak = _run(cmd, env)
                runs[name].append((wall, peak))
                print(f"  run {i + 1} {name:<11} {wall:7.2f} s   peak RSS {peak:7.0f} MB")
    finally:
        for path in scripts:
            Path(path).unlink()
    med = {name: statistics.median(w for w, _ in r) for name, r in runs.items()}
    peak = {name: max(p for _, p in r) for name, r in runs.items()}
    print("median wall: " + ", ".join(f"{n} {w:.2f} s" for n, w in med.items()))
    print(f"ratio cl_validate / raw TVM:     {med['cl_validate'] / med['raw TVM']:.3f}")
    print(f"ratio cl_validate / same stages: {med['cl_validate'] / med['same stages']:.3f}"
          "   (the harness's own cost)")
    print("peak RSS (largest process, max over runs): "
          + ", ".join(f"{n} {p:.0f} MB" for n, p in peak.items()))


if __name__ == "__main__":
    main()
