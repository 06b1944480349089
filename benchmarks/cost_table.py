"""What the transforms cost per case, and how dlight schedules each case's cuda kernels.

For every case (static: no numerics, cuda needs no GPU): the program's traffic and the bytes
its runtime transforms move (llvm), the kernels per dlight rule on cuda and how many were
left to the generic Fallback, and how long the cuda compile took with the rules noted. Each
case goes through its case session (`cl_validate.session.case_session.CaseSession`, static:
``budget tighten``'s options), so the programs are the ones ``cl-validate run`` compiles.

    python benchmarks/cost_table.py model_cases [-k PATTERN] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RULES = ("Matmul", "GEMV", "Reduction", "GeneralReduction", "Fallback")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=["model_cases"])
    ap.add_argument("-k", dest="pattern", help="only cases whose name contains PATTERN")
    ap.add_argument("--markdown", type=Path, help="also write the table as Markdown")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")

    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.measurements.units import bytes_text, share_text
    from cl_validate.session.case_session import CaseSession
    from cl_validate.spec import load_cases
    from cl_validate.spec.options import RunOptions

    header = ("case", "traffic", "transform bytes", "share", *(f"cuda {r}" for r in RULES),
              "cuda IR s")
    rows = []
    print("  ".join(header))
    for case in load_cases(args.paths):
        if args.pattern and args.pattern not in case.name:
            continue
        session = CaseSession(case, RunOptions(static_only=True))
        llvm = read_kernel_list(session.compiled("llvm", build=False), case.max_sizes())
        cells = [case.name, bytes_text(llvm.traffic), bytes_text(llvm.transform_bytes),
                 share_text(llvm.share(llvm.transform_bytes))]
        if "cuda" in case.targets:
            t0 = time.perf_counter()
            cuda = read_kernel_list(session.compiled("cuda", build=False), case.max_sizes())
            seconds = time.perf_counter() - t0
            counts = cuda.schedule_counts()
            cells += [str(counts.get(r, 0)) for r in RULES] + [f"{seconds:.1f}"]
        else:
            cells += ["–"] * (len(RULES) + 1)
        rows.append(cells)
        print("  ".join(cells), flush=True)
    if args.markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        args.markdown.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
