"""Matmuls that read and write through the transposes around them (`StridedProducts`) against
the same program with those transposes as kernels, on llvm or (``--target cuda``) a GPU, in
one process.

Per model, the ``nhwc`` pipeline compiles twice through the case session: as it is, and with
the ``strided_products`` stage left out (a pipeline registered here, ``nhwc`` minus that
stage). For each program: the runtime transforms, the kernels, the median run time (TVM's
time evaluator: the median of `--repeat` timings of 5 runs each, the two programs' timings
interleaved so that drift on a shared machine hits both) and the largest difference from
PyTorch's output.

- ``cait_talking_heads``: CaiT's talking-heads attention at ViT-S/16's size (197 tokens, 6
  heads of 64): the scores mixed across heads by a Linear before and after the softmax, so
  the attention is not raised and stays matmuls;
- ``efficientformerv2`` and ``xcit`` (benchmarks/wild_zoo): EfficientFormerV2's attention
  with talking heads (1x1 convs over the heads) and XCiT's cross-covariance attention.

    python benchmarks/strided_products.py [--target llvm|cuda] [--repeat N] [-k NAME]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "model_cases"), str(Path(__file__).parent)]

MODULE = "_strided_products_models"
#: the input's declared layout in every case `prepare` writes (NCHW, the default, unless set)
INPUT_LAYOUT = "NCHW"
CASE = """
model = "{model}"
pipeline = "{pipeline}"
[[inputs]]
name = "x"
shape = {shape}
layout = "{layout}"
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
"""


def _cait() -> Any:
    import torch
    from torch import nn

    class TalkingHeads(nn.Module):
        """CaiT's attention (timm ``TalkingHeadAttn``) in a pre-norm block."""

        def __init__(self, dim: int = 384, heads: int = 6) -> None:
            super().__init__()
            self.heads, self.scale = heads, (dim // heads) ** -0.5
            self.norm = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, dim * 3)
            self.proj_l, self.proj_w = nn.Linear(heads, heads), nn.Linear(heads, heads)
            self.proj = nn.Linear(dim, dim)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, n, c = x.shape
            qkv = self.qkv(self.norm(x)).reshape(b, n, 3, self.heads, c // self.heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            attn = (q * self.scale) @ k.transpose(-2, -1)
            attn = self.proj_l(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).softmax(-1)
            attn = self.proj_w(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            return x + self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))

    return TalkingHeads()


def _lateral() -> Any:
    from torch import nn

    # an FPN lateral on an NCHW feature map: a pointwise convolution reads the input first
    return nn.Sequential(nn.Conv2d(64, 64, 1), nn.ReLU(), nn.Conv2d(64, 64, 1))


def _models() -> dict[str, tuple[Any, list[int]]]:
    from wild_zoo import attention, mobile, variants

    return {"cait_talking_heads": (_cait, [1, 197, 384]),
            "efficientformerv2": (attention.MODELS["efficientformerv2"], [1, 3, 32, 32]),
            "xcit": (variants.MODELS["xcit"], [1, 3, 32, 32]),
            "mobilevit_xxs": (mobile.MODELS["mobilevit_xxs"], [1, 3, 64, 64]),
            "mobilevitv2_layer": (variants.MODELS["mobilevitv2_layer"], [1, 3, 32, 32]),
            "rtdetr_deformable": (attention.MODELS["rtdetr_deformable"], [1, 3, 32, 32]),
            "fpn_lateral": (_lateral, [1, 64, 56, 56])}


def _register_without() -> str:
    """``module:function`` of the ``nhwc`` pipeline without its strided_products stage."""
    from cl_validate.compile.pipeline import PipelineContext, Stage, nhwc

    def without(ctx: PipelineContext) -> list[Stage]:
        return [s for s in nhwc(ctx) if s.name != "strided_products"]

    sys.modules.setdefault(MODULE, types.ModuleType(MODULE)).without = without
    return f"{MODULE}:without"


def register_without_pass(pass_name: str) -> str:
    """``module:function`` of the ``nhwc`` pipeline with our pass `pass_name` left out (a
    pipeline registered in this process): dropped from the cleanup stage, or, for a pass a
    stage of its own builds (``PermuteIntoGather`` in ``normalize_axes``), made a no-op."""
    import tvm

    from cl_validate.compile import pipeline
    from cl_validate.compile.pipeline import PipelineContext, Stage

    def without(ctx: PipelineContext) -> list[Stage]:
        original, factory = pipeline.cleanup_passes, getattr(pipeline, pass_name, None)
        pipeline.cleanup_passes = lambda *args: [  # type: ignore[assignment]
            p for p in original(*args) if p.info.name != pass_name]
        if factory is not None:
            setattr(pipeline, pass_name, lambda: tvm.transform.Sequential([]))
        try:
            return pipeline.nhwc(ctx)
        finally:
            pipeline.cleanup_passes = original  # type: ignore[assignment]
            if factory is not None:
                setattr(pipeline, pass_name, factory)

    attr = f"without_{pass_name}"
    setattr(sys.modules.setdefault(MODULE, types.ModuleType(MODULE)), attr, without)
    return f"{MODULE}:{attr}"


def prepare(name: str, factory: Any, shape: list[int], pipeline: str, folder: Path,
            target: str) -> tuple[int, int, float, Any]:
    """(runtime transforms, kernels, max |tvm - torch|, a timer of one run of the program)."""
    import numpy as np
    import tvm

    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.session.case_session import CaseSession
    from cl_validate.session.inputs import program_args
    from cl_validate.spec import load_case

    setattr(sys.modules.setdefault(MODULE, types.ModuleType(MODULE)), name, factory)
    path = folder / f"{name}_{len(pipeline)}.toml"
    path.write_text(CASE.format(model=f"{MODULE}:{name}", pipeline=pipeline, shape=shape,
                                layout=INPUT_LAYOUT))
    session = CaseSession(load_case(path))
    error = session.prepare()
    if error is not None:
        raise RuntimeError(error.message)
    compiled = session.compiled(target)
    kernels = read_kernel_list(compiled)
    arrays = session.samples[0][1]
    out = session.run_program(target, arrays)
    diff = max(float(np.max(np.abs(o - r))) for o, r in zip(out, session.expected[0],
                                                              strict=True))
    dev = tvm.device(session.case.target_def(target).device, 0)
    vm = tvm.relax.VirtualMachine(compiled.executable, dev)
    args = program_args(session.case, arrays, dev, session.unbound_params(compiled))
    timer = vm.time_evaluator("main", dev, number=5, repeat=1)
    return len(kernels.runtime_transforms), len(kernels.kernels), diff, lambda: float(
        timer(*args).median) * 1e3


def compare(models: dict[str, tuple[Any, list[int]]], variants: tuple[tuple[str, str], ...],
            target: str, repeat: int) -> None:
    """Per model, each (label, pipeline) of `variants` compiled and timed, the timings
    interleaved (drift on a shared machine hits both); a Markdown row each, the last variant
    first, timed against the first."""
    import statistics

    with tempfile.TemporaryDirectory() as tmp:
        for name, (factory, shape) in models.items():
            progs = {label: prepare(name, factory, shape, pipeline, Path(tmp), target)
                     for label, pipeline in variants}
            times: dict[str, list[float]] = {label: [] for label in progs}
            for _ in range(repeat):
                for label, (*_, run) in progs.items():
                    times[label].append(run())
            base = statistics.median(times[variants[0][0]])
            for label, _ in reversed(variants):
                t, k, diff, _ = progs[label]
                ms = statistics.median(times[label])
                print(f"| {name} | {label} | {t} | {k} | {ms:.3f} ms | {ms / base:.2f}x "
                      f"| {diff:.2g} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=("llvm", "cuda"), default="llvm")
    ap.add_argument("--repeat", type=int, default=10, help="timings of each, interleaved")
    ap.add_argument("-k", dest="pattern", action="append", help="only models whose name has it")
    args = ap.parse_args()
    without = _register_without()
    print("| model | program | runtime transforms | kernels | run (median) | vs with "
          "transposes | max abs diff vs PyTorch |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    models = {name: m for name, m in _models().items()
              if not args.pattern or any(p in name for p in args.pattern)}
    compare(models, (("transposes as kernels", without), ("strided products", "nhwc")),
            args.target, args.repeat)


if __name__ == "__main__":
    main()
