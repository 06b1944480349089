"""Runtime layout transforms per case: TVM's plain ConvertLayout vs cl_validate's pipeline.

For every case: transforms and kernels under ``nhwc-plain`` (ConvertLayout alone) and under
``nhwc`` (ConvertLayout + cl_validate's cleanup passes), and the compile time of each
(export + import + the Relax stages + the build). Each pipeline is a variant of the case
(``dataclasses.replace``) in a case session of its own
(`cl_validate.session.case_session.CaseSession`), as ``cl-validate run`` compiles a variant.
No numerics run (the test suite and ``cl-validate run`` check those).

    python benchmarks/layout_floor.py model_cases [--target llvm] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PIPELINES = ("nhwc-plain", "nhwc")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=["model_cases"])
    ap.add_argument("--target", default="llvm", choices=("llvm", "cuda"))
    ap.add_argument("-k", dest="pattern", help="only cases whose name contains PATTERN")
    ap.add_argument("--markdown", type=Path, help="also write the table as Markdown")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")

    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.session.case_session import CaseSession
    from cl_validate.spec import load_cases

    rows = []
    header = ("case", "plain transforms", "nhwc transforms", "plain kernels", "nhwc kernels",
              "plain compile s", "nhwc compile s")
    print("  ".join(header))
    for case in load_cases(args.paths):
        if args.pattern and args.pattern not in case.name:
            continue
        cells: dict[str, tuple[int, int, float]] = {}
        for pipe in PIPELINES:
            session = CaseSession(dataclasses.replace(case, pipeline=pipe))
            front = session.front  # the model built, PyTorch's outputs, the export
            t0 = time.perf_counter()
            try:
                compiled = session.compiled(args.target)
            except Exception as exc:  # a pipeline that cannot build this case: say so
                print(f"  {case.name} [{pipe}]: {exc}")
                cells[pipe] = (-1, -1, time.perf_counter() - t0)
                continue
            seconds = time.perf_counter() - t0 + front.export_seconds + front.import_seconds
            kernels = read_kernel_list(compiled)
            cells[pipe] = (len(kernels.runtime_transforms), len(kernels), seconds)
        plain, ours = cells["nhwc-plain"], cells["nhwc"]

        def count(n: int) -> str:
            return "error" if n < 0 else str(n)  # the pipeline could not build the case

        row = (case.name, count(plain[0]), count(ours[0]), count(plain[1]), count(ours[1]),
               f"{plain[2]:.1f}", f"{ours[2]:.1f}")
        rows.append(row)
        print("  ".join(row), flush=True)
    if args.markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        args.markdown.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
