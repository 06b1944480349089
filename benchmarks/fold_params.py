"""The weights' transform (`fold_params`) in numpy against building it with TVM, per case.

For each case (the bundled ones unless named), in one process: the case's pipeline up to
`fold_params` once, then its lifted weights' transform computed `--repeat` times each way,
alternately (`fold_values.evaluate`; `fold.built_transform`: TVM's build for the host and
one run), and the case's whole compile (the pipeline and TVM's build of the program, llvm)
with and without the numpy route, alternately. Checks that both ways give the same values
bit for bit (a NaN matching any NaN) and prints medians: the transform's seconds each way,
the compile's seconds each way and their ratio; a case whose transform holds an op numpy does
not compute exactly says so (TVM builds it either way).

    python benchmarks/fold_params.py [CASE ...] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "model_cases"))


def measure(name: str, repeat: int) -> dict[str, Any]:
    from cl_validate.compile import fold
    from cl_validate.compile.fold_values import identical
    from cl_validate.compile.program import compile_case
    from cl_validate.session.case_session import CaseSession
    from cl_validate.spec import load_case

    session = CaseSession(load_case(ROOT / "model_cases" / f"{name}.toml"))
    error = session.prepare()
    if error is not None:
        raise RuntimeError(error.message)
    seen: list[tuple[Any, str, list[Any]]] = []
    real = fold._transformed

    def keep(prep: Any, fname: str, values: list[Any]) -> Any:
        seen.append((prep, fname, values))
        return real(prep, fname, values)

    fold._transformed = keep  # type: ignore[assignment]
    try:
        compile_case(session.front, session.case, "llvm", build=False)
    finally:
        fold._transformed = real  # type: ignore[assignment]
    row: dict[str, Any] = {"case": name, "transforms": len(seen)}
    if not seen:
        return row
    prep, fname, values = seen[0]
    arrays = [v.numpy() for v in values]
    ours, theirs = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        mine = fold.evaluate(prep[fname], arrays)
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        built = fold.built_transform(prep, fname, values)
        theirs.append(time.perf_counter() - t0)
    row["numpy"] = mine is not None
    row["same"] = mine is not None and all(
        identical(a, b.numpy()) for a, b in zip(mine, built, strict=True))
    row["numpy_s"], row["tvm_s"] = statistics.median(ours), statistics.median(theirs)
    whole: dict[bool, list[float]] = {True: [], False: []}
    evaluate = fold.evaluate
    for _ in range(repeat):
        for use in (True, False):
            if not use:
                fold.evaluate = lambda func, arrays: None  # type: ignore[assignment]
            try:
                t0 = time.perf_counter()
                compile_case(session.front, session.case, "llvm")
                whole[use].append(time.perf_counter() - t0)
            finally:
                fold.evaluate = evaluate  # type: ignore[assignment]
    row["compile_numpy_s"] = statistics.median(whole[True])
    row["compile_tvm_s"] = statistics.median(whole[False])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", nargs="*", help="bundled case names (default: every one)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    names = args.case or sorted(p.stem for p in (ROOT / "model_cases").glob("*.toml"))
    total = {"numpy": 0.0, "tvm": 0.0}
    print(f"{'case':28} {'transform: numpy':>17} {'TVM build':>10}  {'compile: numpy':>15} "
          f"{'TVM':>7} {'ratio':>6}")
    for name in names:
        try:
            r = measure(name, args.repeat)
        except Exception as exc:  # a case that does not compile here: said, and the next
            print(f"{name:28} {type(exc).__name__}: {str(exc)[:80]}")
            continue
        if not r["transforms"]:
            print(f"{name:28} no weights' transform")
            continue
        note = "" if r["numpy"] else "  (an op numpy does not compute exactly: TVM builds it)"
        if r["numpy"] and not r["same"]:
            note = "  VALUES DIFFER"
        total["numpy"] += r["compile_numpy_s"]
        total["tvm"] += r["compile_tvm_s"]
        print(f"{name:28} {r['numpy_s']:16.3f}s {r['tvm_s']:9.3f}s  "
              f"{r['compile_numpy_s']:14.2f}s {r['compile_tvm_s']:6.2f}s "
              f"{r['compile_numpy_s'] / r['compile_tvm_s']:5.2f}x{note}")
    if total["tvm"]:
        print(f"{'all':28} {'':>17} {'':>10}  {total['numpy']:14.2f}s {total['tvm']:6.2f}s "
              f"{total['numpy'] / total['tvm']:5.2f}x")


if __name__ == "__main__":
    main()
