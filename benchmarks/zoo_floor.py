"""The layout floor on architectures nobody here designed: imports, compiles, numerics, and the
runtime transforms left, against the floor derived from each model's exported graph, with
NCHW and with NHWC input.

The models (`benchmarks/wild_zoo/`) are public architectures written from their papers at
reduced width and resolution, with random weights. Each is a case (a temporary case file whose
``model`` names its factory) run through its case session
(`cl_validate.session.case_session.CaseSession`, as ``cl-validate run`` runs it): torch.export
+ Relax import, the ``nhwc`` pipeline for llvm, numerics against PyTorch eager at rtol = atol =
1e-3, and the runtime transforms of the compiled program. The floor is not the tool's:
`graph_floor` derives it from the exported graph alone (the boundaries, and the model's own
permutes that no storage order turns into a view, e.g. window partitions), without any pass or
label of cl_validate's. A model is at its floor when the program has no more transforms than
that. With NCHW input the ``nhwc-plain`` count (TVM's ConvertLayout alone) is given too: the
case's variant with that pipeline, in a session of its own.

    python benchmarks/zoo_floor.py [-k NAME] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
import traceback
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "model_cases"), str(Path(__file__).parent)]

TOLERANCE = 1e-3
CASE = """
model = "{model}"
[[inputs]]
name = "x"
shape = [1, 3, {size}, {size}]
layout = "{layout}"
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
[tolerance]
rtol = {tol}
atol = {tol}
"""


@dataclasses.dataclass
class Row:
    name: str
    imports: bool = False
    compiles: bool = False
    numerics: bool = False
    worst: float = float("nan")  # max |tvm - torch| / (atol + rtol·|torch|)
    plain: int | None = None  # nhwc-plain, NCHW input: all runtime transforms
    nchw: tuple[int, int] | None = None  # (runtime transforms, the graph's floor)
    nhwc: tuple[int, int] | None = None
    error: str = ""
    seconds: float = 0.0

    @property
    def at_floor(self) -> bool:
        return (self.numerics and self.nchw is not None and self.nhwc is not None
                and self.nchw[0] <= self.nchw[1] and self.nhwc[0] <= self.nhwc[1])


#: The module the temporary case files name their model in: every wild_zoo factory by name.
MODULE = "_wild_zoo_models"


def _model_line(name: str, factory: Callable[[], Any]) -> str:
    """``module:name`` for a case file's ``model``: `factory` registered under `name`."""
    module = sys.modules.setdefault(MODULE, types.ModuleType(MODULE))
    setattr(module, name, factory)
    return f"{MODULE}:{name}"


def measure(name: str, factory: Callable[[], Any], size: int, folder: Path) -> Row:
    """One model with NCHW and with NHWC input (plain pipeline too for NCHW)."""
    import numpy as np  # lazy: the script's start stays light

    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.session.case_session import CaseSession
    from cl_validate.session.inputs import torch_inputs
    from cl_validate.spec import load_case

    row = Row(name)
    t0 = time.perf_counter()
    model = _model_line(name, factory)
    for layout in ("NCHW", "NHWC"):
        path = folder / f"{name}_{layout}.toml"
        path.write_text(CASE.format(model=model, size=size, layout=layout, tol=TOLERANCE))
        case = load_case(path)
        session = CaseSession(case)
        error = session.prepare()  # the model, PyTorch's outputs, torch.export + Relax import
        if error is not None:  # a model that does not import is a finding, not a crash
            row.error = f"import: {error.message}".splitlines()[0][:160]
            break
        row.imports = True
        try:
            compiled = session.compiled("llvm")
        except Exception as exc:
            row.error = f"compile: {exc}".splitlines()[0][:160]
            break
        row.compiles = True
        arrays = session.samples[0][1]
        out = session.run_program("llvm", arrays)
        worst = max(float(np.max(np.abs(o - r) / (TOLERANCE + TOLERANCE * np.abs(r))))
                    for o, r in zip(out, session.expected[0], strict=True))
        row.worst = max(worst, row.worst) if row.worst == row.worst else worst
        from graph_floor import floor  # lazy: after sys.path is set

        # The floor from the graph alone: a model of its own, exported by graph_floor.
        counts = (len(read_kernel_list(compiled).runtime_transforms),
                  floor(factory().eval(), torch_inputs(case, arrays)[0],
                        declared_in=(layout,))[0])
        if layout == "NCHW":
            row.nchw = counts
            try:
                plain = CaseSession(dataclasses.replace(case, pipeline="nhwc-plain")
                                    ).compiled("llvm", build=False)
                row.plain = len(read_kernel_list(plain).runtime_transforms)
            except Exception as exc:
                row.error = f"plain: {exc}".splitlines()[0][:160]
        else:
            row.nhwc = counts
    row.numerics = row.compiles and row.worst <= 1.0
    row.seconds = time.perf_counter() - t0
    return row


HEADER = ("model", "imports", "compiles", "numerics (worst/bound)", "plain NCHW",
          "NCHW transforms / floor", "NHWC transforms / floor", "at floor")


def _cells(r: Row) -> tuple[str, ...]:
    def pair(p: tuple[int, ...] | None) -> str:
        return "–" if p is None else " / ".join(map(str, p))

    yes = {True: "yes", False: "no"}
    plain = "error" if r.plain is None and r.compiles else "–" if r.plain is None else str(r.plain)
    return (r.name, yes[r.imports], yes[r.compiles],
            f"{yes[r.numerics]} ({r.worst:.2g})" if r.compiles else "–",
            plain, pair(r.nchw), pair(r.nhwc), yes[r.at_floor])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", dest="pattern", action="append", help="only models whose name has it")
    ap.add_argument("--size", type=int, default=64, help="input height and width")
    ap.add_argument("--markdown", type=Path, help="also write the table as Markdown")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    from wild_zoo import (  # lazy: imports torch
        attention,
        attention2,
        attention3,
        attention4,
        attention5,
        attention6,
        branches,
        classic,
        deploy,
        families,
        heads,
        hybrids,
        idioms,
        idioms2,
        merged,
        mobile,
        positions,
        pyramids,
        sequences,
        variants,
    )

    models = merged(classic, mobile, deploy, attention, variants, positions, hybrids, idioms,
                    heads, sequences, branches, pyramids, attention2, families, idioms2,
                    attention3, attention4, attention5, attention6)
    rows: list[Row] = []
    print("  ".join(HEADER))
    with tempfile.TemporaryDirectory() as tmp:
        for name, factory in models.items():
            if args.pattern and not any(p in name for p in args.pattern):
                continue
            small = {*attention.MODELS, *variants.MODELS, *positions.MODELS, *hybrids.MODELS,
                     *idioms.MODELS, *heads.MODELS, *sequences.MODELS, *attention2.MODELS,
                     *attention3.MODELS, *attention4.MODELS, *attention5.MODELS,
                     *attention6.MODELS}
            size = attention.SIZE if name in small else args.size
            try:
                row = measure(name, factory, size, Path(tmp))
            except Exception:  # a bug of this script: say where, go on with the others
                row = Row(name, error=traceback.format_exc().splitlines()[-1][:160])
            rows.append(row)
            print("  ".join(_cells(row)), f"{row.seconds:.1f}s", row.error, flush=True)
    at = sum(r.at_floor for r in rows)
    gaps = [r.nchw[0] - r.nchw[1] for r in rows if r.nchw is not None]
    above, below = sum(g for g in gaps if g > 0), sum(-g for g in gaps if g < 0)
    plain = sum(r.plain for r in rows if r.plain is not None)
    summary = (f"{at}/{len(rows)} at the floor derived from their graphs or under it; NCHW "
               f"input: {above} runtime transforms above it in all, {below} under it "
               f"(nhwc-plain: {plain} transforms in all)")
    print(summary)
    if args.markdown:
        lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
        args.markdown.write_text("\n".join([*lines, "", summary]) + "\n")


if __name__ == "__main__":
    main()
