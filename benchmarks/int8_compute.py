"""Integer compute against the float QDQ program it replaced, on the bundled quantized cases.

For each case (MobileNetV2 x86, ResNet-18 Arm, the YOLOv8-style backbone x86) the nhwc
pipeline compiles twice in one process: with the ``integer_compute`` stage (int8/uint8 x int8
products, int32 accumulation) and without it (``integer_compute = false``: every product in
float32 between QDQ kernels). Per program, on llvm:

- compile: the pipeline and TVM's build, seconds (the export is shared, not counted): the
  median of `--compiles` compiles of each program, the two programs' compiles interleaved
  after one untimed compile (a process's first compile pays TVM's and LLVM's one-time
  set-up, which would land on whichever program went first), with the pipeline's share;
  and with the first call added: TVM's LLVM module makes its machine code when its
  functions are first looked up, so a program's first run pays the rest of the compile;
- run: the program's median time over repeats (TVM's time evaluator) on the case's input;
- constants: the bytes of every constant the final program holds (weights included);
- convs: integer / float convolutions in the kernel list.

Then the same cases cross-compiled for arm64 (``llvm -mtriple=aarch64-linux-gnu
-mattr=+neon``, static: nothing runs): the kernels that hold a convolution, with the dtype
of its data.

`--mcpu NAME` compiles and runs for the llvm target with that CPU named (``znver4``,
``skylake-avx512``, ...) instead of plain ``llvm``, whose generic x86-64 has SSE2 alone: there
sign-extending int8 takes several instructions and LLVM makes more machine code for the
integer programs.

    python benchmarks/int8_compute.py [--repeat N] [--compiles N] [--case NAME ...] [--mcpu CPU]
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "model_cases"))

CASES = ("quant_mobilenet_v2", "quant_resnet", "quant_yolo", "quant_vit_block")
#: the target name of llvm with `--mcpu` named
HOST = "llvm_mcpu"
ARM64 = ('[tool.cl_validate.targets.arm64]\ntarget = { kind = "llvm", mtriple = '
         '"aarch64-linux-gnu", mattr = ["+neon"] }\n')


def _constant_bytes(mod: object) -> int:
    from tvm import relax

    from cl_validate.ir import is_tensor_constant, tensor_bytes

    total = 0

    def visit(expr: object) -> None:
        nonlocal total
        if is_tensor_constant(expr):
            total += tensor_bytes(expr, {}) or 0

    relax.analysis.post_order_visit(mod["main"], visit)  # type: ignore[index]
    return total


def _case(name: str, folder: Path, mcpu: str | None) -> object:
    """The bundled case with an arm64 target added, and `HOST` (llvm with `mcpu` named) when
    given (a copy beside the original's folder)."""
    from cl_validate.spec import load_case
    from cl_validate.spec.config import load_config

    host = f'[tool.cl_validate.targets.{HOST}]\ntarget = {{ kind = "llvm", mcpu = "{mcpu}" }}\n'
    (folder / "pyproject.toml").write_text(ARM64 + (host if mcpu else ""))
    text = (ROOT / "model_cases" / f"{name}.toml").read_text()
    path = folder / f"{name}.toml"
    targets = ", ".join(f'"{t}"' for t in ("llvm", "arm64", *([HOST] if mcpu else [])))
    path.write_text(f"targets = [{targets}]\n{text}")
    return load_case(path, load_config(folder).targets)


def measure(name: str, repeat: int, compiles: int = 3, mcpu: str | None = None
            ) -> list[dict[str, object]]:
    import statistics

    import tvm
    from tvm import relax

    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.checks.float_qdq_products import split_products
    from cl_validate.compile.program import compile_case
    from cl_validate.session.case_session import CaseSession
    from cl_validate.session.inputs import program_args

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = _case(name, Path(tmp), mcpu)
        target = HOST if mcpu else "llvm"
        sessions = {}
        for integer in (True, False):
            case = dataclasses.replace(base, integer_compute=integer)  # type: ignore[type-var]
            session = CaseSession(case)
            error = session.prepare()
            if error is not None:
                raise RuntimeError(error.message)
            sessions[integer] = session
        times: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
        programs = {}  # each program's last timed compile: what is run and counted below
        compile_case(sessions[True].front, sessions[True].case, target)  # untimed set-up
        for _ in range(compiles):
            for integer, session in sessions.items():
                t0 = time.perf_counter()
                programs[integer] = compile_case(session.front, session.case, target)
                total = time.perf_counter() - t0
                # the first call: the LLVM module's machine code is made when first looked up
                t1 = time.perf_counter()
                relax.VirtualMachine(programs[integer].executable, tvm.cpu())["main"](
                    *program_args(session.case, session.samples[0][1], tvm.cpu()))
                first = time.perf_counter() - t1
                times[integer].append(
                    (total, sum(s.seconds for s in programs[integer].stages[1:]), first))
        for integer, session in sessions.items():
            case = session.case
            compiled = programs[integer]
            kernels = read_kernel_list(compiled, case.max_sizes())
            floats, ints = split_products(kernels)
            vm = relax.VirtualMachine(compiled.executable, tvm.cpu())
            args = program_args(case, session.samples[0][1], tvm.cpu())
            timer = vm.time_evaluator("main", tvm.cpu(), number=5, repeat=repeat)
            run_ms = float(timer(*args).median) * 1e3
            arm = session.compiled("arm64", build=False)
            arm_kernels = read_kernel_list(arm, case.max_sizes())
            rows.append({"case": name, "program": "int8" if integer else "float QDQ",
                         "compile_s": statistics.median(t for t, _, _ in times[integer]),
                         "pipeline_s": statistics.median(p for _, p, _ in times[integer]),
                         "first_call_s": statistics.median(f for _, _, f in times[integer]),
                         "run_ms": run_ms, "constants": _constant_bytes(compiled.final),
                         "int": len(ints), "float": len(floats), "kernels": len(kernels),
                         "arm64": arm_kernels})
    return rows


def _conv_dtypes(k: object) -> list[str | None]:
    """The data dtype of each convolution fused into kernel `k`."""
    ops, dtypes = k.ops, k.dtypes or (None,) * len(k.ops)  # type: ignore[attr-defined]
    return [d for op, d in zip(ops, dtypes, strict=False) if re.match(r"^conv[123]d", op)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--compiles", type=int, default=3, help="compiles timed per program")
    parser.add_argument("--case", action="append", choices=CASES)
    parser.add_argument("--mcpu", help="llvm with this CPU named (znver4, skylake-avx512, ...)")
    args = parser.parse_args()
    for name in args.case or CASES:
        rows = measure(name, args.repeat, args.compiles, args.mcpu)
        base = next(r for r in rows if r["program"] == "float QDQ")
        where = f"llvm -mcpu={args.mcpu}" if args.mcpu else "llvm"
        print(f"{name} ({where}, median of {args.repeat} x 5 runs):")
        for r in rows:
            ratio = float(r["run_ms"]) / float(base["run_ms"])  # type: ignore[arg-type]
            cratio = float(r["compile_s"]) / float(base["compile_s"])  # type: ignore[arg-type]
            whole = float(r["compile_s"]) + float(r["first_call_s"])  # type: ignore[arg-type]
            wratio = whole / (float(base["compile_s"])  # type: ignore[arg-type]
                              + float(base["first_call_s"]))  # type: ignore[arg-type]
            print(f"  {r['program']:<10} compile {r['compile_s']:6.2f} s ({cratio:.2f}x; "
                  f"pipeline {r['pipeline_s']:5.2f} s; with the first call's machine code "
                  f"{whole:5.2f} s, {wratio:.2f}x)   run "
                  f"{r['run_ms']:8.3f} ms ({ratio:.2f}x float)   constants "
                  f"{int(r['constants']) / 1024:8.1f} KiB   products {r['int']} int / "  # type: ignore[call-overload]
                  f"{r['float']} float   {r['kernels']} kernels")
        int8 = next(r for r in rows if r["program"] == "int8")
        print("  arm64 (static), int8 program: kernels with a convolution")
        for k in int8["arm64"]:  # type: ignore[attr-defined]
            dtypes = _conv_dtypes(k)
            if dtypes:
                print(f"    {k.index:3d}  {k.name[:70]:<70}  data {', '.join(map(str, dtypes))}")


if __name__ == "__main__":
    main()
