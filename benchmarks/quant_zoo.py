"""The held-out architectures quantized as a new user would: each `benchmarks/wild_zoo/` model
(or those named) through PT2E with the x86 quantizer, or Arm's (``--quantizer arm``: int8
per-tensor weights; `model_cases/zoo/quant.py`'s ``pt2e_quantize``), as a case that asks
every quantized product to compute in integers
(``float_qdq_products = 0``) and the outputs to be within one quantization step of the same
QDQ graph in float64; then ``cl-validate run`` on them, llvm. The run's table is the result:
runtime transforms, products in float / in integers (``+Ni``), numerics in steps.

    python benchmarks/quant_zoo.py [-k NAME] [-j N] [--keep DIR] [--quantizer x86|arm]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FACTORIES = f'''"""PT2E-quantized wild_zoo models (written by benchmarks/quant_zoo.py)."""
import sys
sys.path[:0] = [{str(ROOT / "benchmarks")!r}, {str(ROOT / "model_cases")!r}]
import torch
from zoo.quant import _arm, _x86, pt2e_quantize
from wild_zoo import (attention, attention2, attention3, attention4, attention5, attention6,
                      branches, families, heads, hybrids, idioms, idioms2, merged, positions,
                      pyramids, sequences, variants)

MODELS = merged(positions, hybrids, idioms, heads, attention, variants, sequences, branches,
                pyramids, attention2, families, idioms2, attention3, attention4, attention5,
                attention6)


def quantized(name, size):
    torch.manual_seed(0)
    return pt2e_quantize(MODELS[name]().eval(), torch.randn(1, 3, size, size), __QUANTIZER__())
'''
CASE = """model = "quant_zoo_models:{name}"
targets = ["llvm"]
[[inputs]]
name = "x"
shape = [1, 3, {size}, {size}]
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
[budget]
float_qdq_products = 0
layout_transforms = 1000  # counted, not gated here: the count is a result
[tolerance]
reference = "float64"
steps = 1
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", dest="pattern", action="append", help="only models whose name has it")
    ap.add_argument("-j", dest="jobs", default="2", help="cases run at once (default 2)")
    ap.add_argument("--keep", type=Path, help="write the cases here (kept) instead of a temp dir")
    ap.add_argument("--quantizer", choices=("x86", "arm"), default="x86",
                    help="PT2E quantizer (default x86)")
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "model_cases")]
    from wild_zoo import (  # lazy: imports torch
        attention,
        attention2,
        attention3,
        attention4,
        attention5,
        attention6,
        branches,
        families,
        heads,
        hybrids,
        idioms,
        idioms2,
        merged,
        positions,
        pyramids,
        sequences,
        variants,
    )

    modules = (positions, hybrids, idioms, heads, attention, variants, sequences, branches,
               pyramids, attention2, families, idioms2, attention3, attention4, attention5,
               attention6)
    names = [n for n in merged(*modules) if not args.pattern or any(p in n for p in args.pattern)]
    # 32×32 unless a module says a model needs another size (`SIZES`)
    sizes = {n: s for m in modules for n, s in getattr(m, "SIZES", {}).items()}
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        factories = FACTORIES.replace("__QUANTIZER__", f"_{args.quantizer}") + "".join(
            f"\n\ndef {n}():\n    return quantized({n!r}, {sizes.get(n, 32)})\n" for n in names)
        cases = where / "cases"
        cases.mkdir(exist_ok=True)
        (cases / "quant_zoo_models.py").write_text(factories)
        for n in names:
            (cases / f"q_{n}.toml").write_text(CASE.format(name=n, size=sizes.get(n, 32)))
        # the count is a result, not gated: a budget above it is no failure here
        (where / "pyproject.toml").write_text('[tool.cl_validate]\nstale_budget = "warn"\n')
        code = subprocess.call([sys.executable, "-m", "cl_validate", "run", "cases",
                                "-j", args.jobs, "--no-cache"], cwd=where)
    sys.exit(0 if code in (0, 1) else code)  # 1: some case failed, which is a finding


if __name__ == "__main__":
    main()
