"""What each case-file and ``[tool.cl_validate]`` key means, one sentence each.

The keys themselves are the validator's (the tuples `cl_validate.spec.validate`,
`cl_validate.spec.checker`, `cl_validate.spec.shapes`, `cl_validate.spec.targets` and
`cl_validate.spec.config` accept); this module only says what they mean, for the generated
reference (`cl_validate.report.reference`). `tables()` pairs the two and refuses a key that
is accepted but not described, or described but not accepted, so adding a key without a line
here fails the reference test. ``[budget]`` keys are described by the check that declares
them (`cl_validate.spec.budget_keys`), not here.
"""

from __future__ import annotations

from dataclasses import dataclass

from cl_validate.spec import checker, config, shapes, targets, validate
from cl_validate.spec.model import (
    BUILTIN_PIPELINES,
    DEFAULT_FLOOR,
    DEFAULT_MAX_MEMORY_MB,
    DEFAULT_MULTIPLIER,
    DEFAULT_PIPELINE,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TOLERANCE,
    DTYPES,
    IO_LAYOUTS,
    REFERENCES,
)

_PIPELINES = ", ".join(f'`"{p}"`' for p in BUILTIN_PIPELINES)

#: table heading -> key -> what it means
DOCS: dict[str, dict[str, str]] = {
    "top level of a case file": {
        "name": "the case's name in reports, `[A-Za-z0-9_.-]+` (default: the file's stem)",
        "model": "`module:callable` returning the `nn.Module`; the case file's folder and the "
                 "working directory are on the import path (required)",
        "description": "one line saying what the case is",
        "targets": "the targets the case runs on: names (`llvm`, `cuda`, or any declared in "
                   "`[tool.cl_validate.targets]`) or `[targets.<name>]` tables (default: "
                   "llvm and cuda)",
        "pipeline": f"{_PIPELINES}, or your own `module:function` (default: "
                    f'`"{DEFAULT_PIPELINE}"`)',
        "seed": "seeds the weights (torch) and the inputs (numpy) (default: 0)",
        "seeds": f"numerics on this many input draws, `seed` .. `seed + seeds - 1`, each "
                 f"checked; the weights stay those of `seed` (1 to {validate.MAX_SEEDS})",
        "inputs": "`[[inputs]]`: one table per `forward()` argument, in order",
        "outputs": "`[[outputs]]`: optional, one table per output, in order; one whose "
                   "`name` is an output's name is that output wherever it stands",
        "layout": "desired layouts for ConvertLayout, which are also the expected final "
                  "layouts: Relax op name to `[data, kernel]` layouts; `relax.nn.conv1d`, "
                  "unless named, follows `relax.nn.conv2d` (`NHWC`/`OHWI`: `NWC`/`OWI`); an "
                  "op whose layout differs from the declared one only in axes of size one (a "
                  "one-channel map in NCHW) is in the declared layout: it lies the same in "
                  "memory; an op TVM 0.27 lowers in one layout only "
                  "(`relax.image.grid_sample`: NCHW) is expected in it unless named here",
        "layout_overrides": "`nn.Module` path to layouts: pins one module to another layout "
                            "(its transforms are attributed to the pin)",
        "budget": "`[budget]`: ceilings that are also records (below)",
        "tolerance": "`[tolerance]`: how close TVM must be to PyTorch (below)",
        "targets_override": "`[targets_override.<target>]`: `budget` and `tolerance` for one "
                            "target",
        "timeout": f"seconds for the whole case, all targets (default: {DEFAULT_TIMEOUT_S:g})",
        "max_memory_mb": f"resident memory cap of the case's processes, the processes they "
                         f"start included (default: {DEFAULT_MAX_MEMORY_MB})",
        "dynamic": "`[dynamic.<name>]`: a dimension compiled symbolically, named in an "
                   "input's `shape`",
        "variants": "`[[variants]]`: other shapes the model is deployed at, each checked as a "
                    "run of its own",
        "profile": "`true` times every kernel on every run, as `--profile` does (default: "
                   "false)",
        "weights": '`"calibrated"` recomputes every BatchNorm\'s running statistics on random '
                   "inputs drawn like the case's before anything is measured, so a deep random "
                   'network keeps its signal through depth; `"signal-preserving"` first draws '
                   "every weight matrix and convolution kernel again from N(0, 1/fan-in) (for "
                   "models without BatchNorm, or initialised with a small std as transformers "
                   'are), then calibrates (default: `"as-built"`)',
        "integer_compute": "`false` keeps a quantized network's convolutions and matmuls "
                           "in float between its QDQ ops; by default the nhwc pipeline "
                           "computes them in integers (int8/uint8 codes, int32 accumulation) "
                           "(default: true)",
        "input_sensitivity": '`"fail"`: numerics fails when PyTorch\'s outputs on another '
                             "input would pass the comparison (it could not catch a wrong "
                             'kernel); `"warn"` passes and says so (default: `"fail"`)',
    },
    "[[inputs]]": {
        "name": "the argument's name in reports and in `[dynamic]` sizes",
        "shape": "the PyTorch shape; a string instead of a size names a `[dynamic]` "
                 "dimension; `[]` is a 0-d tensor (a diffusion timestep passed as "
                 "`torch.tensor(500)`)",
        "dtype": "one of " + ", ".join(f"`{d}`" for d in DTYPES),
        "layout": " or ".join(f'`"{x}"`' for x in IO_LAYOUTS) + ": with NHWC the compiled "
                  "program takes this input channels-last; the shape stays the PyTorch shape "
                  "(default: NCHW)",
        "range": "`[low, high]`: value range of the generated input",
    },
    "[[outputs]]": {
        "name": "the output's name in reports; the name the model gives it (a dict key "
                "`logits`, a field, a path `1.k` into nested results) binds this table to it",
        "layout": "`\"NHWC\"`: the compiled program returns this 4-D output channels-last",
        "tolerance": "this output's own `rtol`/`atol`/`reference`/...",
        "targets_override": "`{ <target> = { tolerance = {...} } }`: this output on one "
                            "target",
        "selection": "`{ axis = 1, differing = 0 }`: the output holds selected items (a "
                     "top-k) along `axis`, compared as a set: TVM's items matched to "
                     "PyTorch's nearest first, so near-ties in another order pass and wrong "
                     "values fail; `differing` items may be other ones (a tie at the cut); "
                     "at most 4096 items (`SelectionTooLarge`)",
    },
    "[tolerance]": {
        "rtol": f"relative tolerance: `|tvm - torch| <= atol + rtol·|torch|` elementwise "
                f"(default: {DEFAULT_TOLERANCE[0]:g})",
        "atol": f"absolute tolerance (default: {DEFAULT_TOLERANCE[1]:g})",
        "reference": " or ".join(f'`"{r}"`' for r in REFERENCES) + ": judge against eager "
                     "float32 with rtol/atol, or against a float64 run of the model (the "
                     "float64 rule; rtol/atol unused) (default: float32)",
        "multiplier": f"float64 rule: TVM's RMSE against float64 may be this many times eager "
                      f"float32's, at least 1 (default: {DEFAULT_MULTIPLIER:g})",
        "floor": f"float64 rule: added to the bound, so outputs whose errors are all tiny "
                 f"pass (default: {DEFAULT_FLOOR:g})",
        "steps": "a quantized model: the largest error against the reference (`reference`), "
                 "counted in steps of the output's quantization scale (read off the QDQ "
                 "graph: the output's quantize, else the last one before it), at most this "
                 "many; rtol/atol/multiplier/floor unused (default: not used)",
    },
    "[targets_override.<target>]": {
        "budget": "the `[budget]` keys that differ on this target",
        "tolerance": "the `[tolerance]` keys that differ on this target",
    },
    "[dynamic.<name>]": {
        "min": "the smallest size the program must run at",
        "max": "the largest size (bytes are reported at the maxima)",
        "values": "the sizes the numerics run at (default: min, max and one between)",
    },
    "[[variants]]": {
        "name": "reported as `case[name]` and `check[name-target]`",
        "shapes": "input name to shape, only for the inputs it changes",
        "budget": "this variant's budgets where they differ from the case's",
        "tolerance": "this variant's tolerance where it differs",
        "targets_override": "`[variants.targets_override.<target>]`: this variant on one "
                            "target; overrides all of the above",
    },
    "[targets.<name>] and [tool.cl_validate.targets.<name>]": {
        "target": "the TVM target config, the dict `tvm.target.Target({...})` takes: `kind` "
                  "(llvm, cuda, rocm, opencl, vulkan) and TVM's attributes",
        "host": "the host code's target for a GPU kind (default: this machine's CPU)",
        "rpc_key": "the RPC tracker key of the boards that run this target's numerics",
        "cc": "the compiler that links the module uploaded to a board (default: "
              "`<mtriple>-gcc`, or `$TVM_NDK_CC` for Android triples)",
    },
    "[tool.cl_validate] in pyproject.toml": {
        "stale_budget": "`\"fail\"` (default) or `\"warn\"`: what a budget above the measured "
                        "figure does",
        "targets": "`[tool.cl_validate.targets.<name>]`: targets every case may list by name",
    },
}

#: table heading -> the keys the validator accepts there
ACCEPTED: dict[str, tuple[str, ...]] = {
    "top level of a case file": validate._TOP_KEYS,
    "[[inputs]]": validate._INPUT_KEYS,
    "[[outputs]]": validate._OUTPUT_KEYS,
    "[tolerance]": checker._TOL_KEYS,
    "[targets_override.<target>]": checker._OVERRIDE_KEYS,
    "[dynamic.<name>]": shapes._DYNAMIC_KEYS,
    "[[variants]]": shapes._VARIANT_KEYS,
    "[targets.<name>] and [tool.cl_validate.targets.<name>]": targets.DECL_KEYS,
    "[tool.cl_validate] in pyproject.toml": config._KEYS,
}


@dataclass(frozen=True)
class Table:
    heading: str
    keys: tuple[tuple[str, str], ...]  # (key, what it means), in the validator's order


def tables() -> tuple[Table, ...]:
    """Every table but ``[budget]``, its keys in the validator's order with their meaning.

    Raises ValueError when this module and the validator disagree on a table's keys."""
    if set(DOCS) != set(ACCEPTED):
        raise ValueError(f"case-file tables documented {sorted(DOCS)} != validated "
                         f"{sorted(ACCEPTED)}")
    out = []
    for heading, accepted in ACCEPTED.items():
        docs = DOCS[heading]
        missing, extra = set(accepted) - set(docs), set(docs) - set(accepted)
        if missing or extra:
            raise ValueError(f"{heading}: keys accepted but not described {sorted(missing)}, "
                             f"described but not accepted {sorted(extra)} "
                             "(cl_validate/spec/key_docs.py)")
        out.append(Table(heading, tuple((k, docs[k]) for k in accepted)))
    return tuple(out)
