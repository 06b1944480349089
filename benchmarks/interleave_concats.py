"""A concat that writes its parts interleaved (`InterleaveConcats`) against the same program
with the concat and its interleaving transpose (ShuffleNet's channel shuffle), on llvm or
(``--target cuda``) a GPU, in one process.

Per model, the ``nhwc`` pipeline compiles twice through the case session: as it is, and with
``InterleaveConcats`` left out of its cleanup stage (a pipeline registered here). For each
program: the runtime transforms, the kernels, the median run time (the two programs' timings
interleaved, as in ``strided_products.py``) and the largest difference from PyTorch's output.

- ``shufflenet_v2``: the bundled case's ShuffleNetV2 x1.0 at 224x224 (16 shuffles after a
  concat);
- ``shufflenet_v2_small``: the zoo's reduced ShuffleNetV2 at 64x64 (``benchmarks/wild_zoo``).

    python benchmarks/interleave_concats.py [--target llvm|cuda] [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from strided_products import compare, register_without_pass


def _models() -> dict[str, tuple[Any, list[int]]]:
    from wild_zoo import mobile
    from zoo import shufflenet

    return {"shufflenet_v2": (shufflenet.shufflenet_v2, [1, 3, 224, 224]),
            "shufflenet_v2_small": (mobile.MODELS["shufflenet_v2"], [1, 3, 64, 64])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=("llvm", "cuda"), default="llvm")
    ap.add_argument("--repeat", type=int, default=10, help="timings of each, interleaved")
    args = ap.parse_args()
    print("| model | program | runtime transforms | kernels | run (median) | vs with the "
          "transposes | max abs diff vs PyTorch |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    without = register_without_pass("InterleaveConcats")
    compare(_models(), (("concat + transpose", without),
                        ("interleaving concat", "nhwc")), args.target, args.repeat)


if __name__ == "__main__":
    main()
