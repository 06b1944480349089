"""Validate one case file into a `CaseSpec`: every mistake a user can make, with file and line.

Unknown keys (with a did-you-mean), wrong types, bad shapes, dtypes, layouts, targets and
pipeline names are reported here, in one line, before anything is exported or compiled. Only
the file is read: importing the model's module and calling its factory run user code, which
happens in a case process (`cl_validate.compile.factory`).
"""

from __future__ import annotations

import difflib
import errno
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cl_validate.errors import CaseFileError
from cl_validate.paths import FOLDER, NotRegularFile, display_path, read_regular
from cl_validate.spec.budget_keys import budget_keys
from cl_validate.spec.checker import IDENT_RE, MAX_SEED, Checker
from cl_validate.spec.config import load_config
from cl_validate.spec.lines import syntax_error, toml_text, tomllib, too_many_digits
from cl_validate.spec.model import (
    BUILTIN_PIPELINES,
    DEFAULT_MAX_MEMORY_MB,
    DEFAULT_PIPELINE,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TOLERANCE,
    DTYPES,
    SENSITIVITY,
    WEIGHTS,
    Budget,
    CaseSpec,
    DynamicDim,
    InputSpec,
    OutputSpec,
    Tolerance,
)
from cl_validate.spec.shapes import check_dynamic_used, dynamic_dims, parse_shape
from cl_validate.spec.shapes import variants as parse_variants
from cl_validate.spec.targets import NAME_RE, TargetDef, case_targets, override_names

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_FACTORY_RE = re.compile(rf"^{_DOTTED}:{_DOTTED}$")
_LAYOUT_STR_RE = re.compile(r"^[A-Za-z0-9]+$")
_PIPELINE_RE = re.compile(rf"^(?:[A-Za-z0-9_.-]+|{_DOTTED}:{_DOTTED})$")

_TOP_KEYS = (
    "name", "model", "description", "targets", "pipeline", "seed", "inputs", "outputs",
    "layout", "budget", "tolerance", "targets_override", "timeout", "max_memory_mb",
    "layout_overrides", "dynamic", "variants", "seeds", "profile", "weights",
    "input_sensitivity", "integer_compute",
)
MAX_SEEDS = 32
#: The longest a case may take: a week.
MAX_TIMEOUT_S = 7 * 24 * 3600
#: The largest case file read (a case with thousands of outputs is a few MB).
MAX_CASE_FILE = 16 << 20
_INPUT_KEYS = ("name", "shape", "dtype", "layout", "range")
_OUTPUT_KEYS = ("name", "layout", "tolerance", "targets_override", "selection")


def load_case(path: str | Path, project: Mapping[str, TargetDef] | None = None) -> CaseSpec:
    """Parse and validate one case file. Raises `CaseFileError` with file and line.

    `project`: the targets of ``[tool.cl_validate.targets]`` (default: read from the nearest
    pyproject.toml, as the rest of ``[tool.cl_validate]``)."""
    path = Path(path)
    if project is None:
        project = load_config().targets
    display = display_path(path)
    try:
        raw = read_regular(path, MAX_CASE_FILE)
    except FileNotFoundError:
        raise CaseFileError("case file not found", file=display) from None
    except NotRegularFile as exc:
        if exc.kind == FOLDER:
            raise CaseFileError("is a folder, not a case file", file=display,
                                hint="rename the folder, or pass a .toml file") from None
        raise CaseFileError(f"is {exc.kind}, not a case file", file=display,
                            hint="a case file is a plain TOML file: remove or rename this "
                            "one") from None
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            raise CaseFileError(f"case file is over {MAX_CASE_FILE >> 20} MB", file=display,
                                line=1, hint="a case file declares a case; keep long text "
                                "and generated tables in files of their own") from None
        raise CaseFileError(f"cannot read case file: {exc.strerror or exc}",
                            file=display) from None
    text = toml_text(raw, display)
    if not text.strip():
        raise CaseFileError("case file is empty", file=display,
                            hint="a case needs at least model = \"module:factory\" and "
                            "one [[inputs]]")
    try:
        data = tomllib.loads(text)
        return _validate(path, text, display, data, project)
    except tomllib.TOMLDecodeError as exc:
        raise syntax_error(str(exc), text, display) from None
    except ValueError as exc:  # an integer of more digits than Python converts
        error = too_many_digits(exc, text, display)
        if error is None:
            raise
        raise error from None
    except RecursionError:  # nesting `toml_text` did not see (inside a multi-line string?)
        raise CaseFileError("nested too deeply to read", file=display,
                            hint="a case file needs a few levels of tables at most") from None


def _validate(path: Path, text: str, display: str, data: dict[str, Any],
              project: Mapping[str, TargetDef]) -> CaseSpec:
    v = Checker(path, text, display)
    v.keys(data, _TOP_KEYS, (), "[case]")

    name = v.file_name(data.get("name", path.stem), ("name",), "case")
    if "model" not in data:
        raise v.fail((), "missing required key 'model'",
                     "model = \"package.module:factory\" naming a callable returning nn.Module")
    model = v.string(data["model"], ("model",), "model")
    if not _FACTORY_RE.match(model):
        raise v.fail(("model",), f"model '{model}' is not of the form 'module:callable'",
                     "e.g. model = \"zoo.resnet:resnet50\"")
    description = v.string(data.get("description", ""), ("description",), "description")

    target_defs = case_targets(data.get("targets"), project, v.fail, file=display,
                               line=lambda p: v.line(*p))
    v.targets = override_names(target_defs, project)  # what a targets_override may name
    pipeline = v.string(data.get("pipeline", DEFAULT_PIPELINE), ("pipeline",), "pipeline")
    if not _PIPELINE_RE.match(pipeline):
        raise v.fail(("pipeline",),
                     f"pipeline '{pipeline}' is neither a name nor 'module:function'")
    if ":" not in pipeline and pipeline not in BUILTIN_PIPELINES:
        raise v.fail(("pipeline",), f"unknown pipeline '{pipeline}'",
                     "registered: " + ", ".join(BUILTIN_PIPELINES))
    seed = v.integer(data.get("seed", 0), ("seed",), "seed", 0, MAX_SEED,
                     "a seed is an unsigned 32-bit integer, what numpy and torch both take")
    seeds = v.integer(data.get("seeds", 1), ("seeds",), "seeds", 1)
    if seeds > MAX_SEEDS:
        raise v.fail(("seeds",), f"seeds = {seeds} runs the model {seeds} times per shape",
                     f"at most {MAX_SEEDS}; a handful of draws catches an unlucky input")
    timeout = v.number(data.get("timeout", DEFAULT_TIMEOUT_S), ("timeout",), "timeout")
    if timeout <= 0:
        raise v.fail(("timeout",), f"timeout must be > 0 seconds, got {timeout:g}")
    if timeout > MAX_TIMEOUT_S:
        raise v.fail(("timeout",), f"timeout must be <= {MAX_TIMEOUT_S:,} seconds (a week), "
                     f"got {timeout:g}", "a case that runs longer is stuck: check for a typo")
    max_memory_mb = v.integer(data.get("max_memory_mb", DEFAULT_MAX_MEMORY_MB),
                              ("max_memory_mb",), "max_memory_mb", 256)

    profile = data.get("profile", False)
    if not isinstance(profile, bool):
        raise v.fail(("profile",), f"profile must be true or false, got {profile!r}",
                     "profile = true times every kernel of this case on every run")
    dynamic = dynamic_dims(v, data.get("dynamic", {}))
    inputs = _inputs(v, data.get("inputs"), dynamic)
    variants = parse_variants(v, data.get("variants", []), inputs, dynamic)
    check_dynamic_used(v, dynamic, [i.shape for i in inputs] +
                       [s for var in variants for s in var.shapes.values()])
    outputs = _outputs(v, data.get("outputs", []))

    layout = _layouts(v, data.get("layout", {}), "layout")
    layout_overrides = _layouts(v, data.get("layout_overrides", {}), "layout_overrides")

    b = v.budget(data.get("budget", {}), ("budget",))
    budget = Budget(
        {k.name: b.get(k.name, k.default) for k in budget_keys()},
        # a budget that applies by default is about the whole case: its model line
        {k.name: v.line("budget", k.name) or (v.line("model") if k.default is not None
                                              else None) for k in budget_keys()},
        reason=b.get("reason"),
    )
    weights = v.choice(data["weights"], ("weights",), "weights", WEIGHTS) \
        if "weights" in data else WEIGHTS[0]
    input_sensitivity = v.choice(data["input_sensitivity"], ("input_sensitivity",),
                                 "input_sensitivity", SENSITIVITY) \
        if "input_sensitivity" in data else SENSITIVITY[0]
    integer_compute = data.get("integer_compute", True)
    if not isinstance(integer_compute, bool):
        raise v.fail(("integer_compute",), "integer_compute must be true or false, got "
                     f"{integer_compute!r}", "integer_compute = false keeps a quantized "
                     "network's convolutions in float between its QDQ ops")
    t = v.tolerance(data.get("tolerance", {}), ("tolerance",))
    tolerance = Tolerance(DEFAULT_TOLERANCE[0], DEFAULT_TOLERANCE[1]).merged(t)

    overrides = v.target_overrides(data.get("targets_override", {}), ("targets_override",))

    return CaseSpec(
        name=name, path=path, model=model, description=description,
        targets=tuple(target_defs), target_defs=target_defs,
        inputs=inputs, outputs=outputs, layout=layout, pipeline=pipeline, seed=seed,
        budget=budget, tolerance=tolerance, overrides=overrides, lines=v.lines,
        timeout=timeout, max_memory_mb=max_memory_mb, layout_overrides=layout_overrides,
        dynamic=dynamic, variants=variants, seeds=seeds, profile=profile, weights=weights,
        input_sensitivity=input_sensitivity, integer_compute=integer_compute,
    )


def _layouts(v: Checker, raw: Any, table: str) -> dict[str, tuple[str, ...]]:
    """[layout] (Relax op → layouts) or [layout_overrides] (nn.Module path → layouts)."""
    tab = v.table(raw, (table,), f"[{table}]")
    out: dict[str, tuple[str, ...]] = {}
    for key, lay in tab.items():
        if table == "layout" and (not key.startswith("relax.") or not NAME_RE.match(key)):
            raise v.fail((table, key), f"[layout] key '{key}' is not a Relax op name",
                         "e.g. \"relax.nn.conv2d\" = [\"NHWC\", \"OHWI\"]")
        if table == "layout_overrides" and not re.match(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$",
                                                        key):
            raise v.fail((table, key), f"[layout_overrides] key '{key}' is not an nn.Module path",
                         "e.g. \"layer1.0.conv1\" = [\"NCHW\", \"OIHW\"]")
        if isinstance(lay, str):
            lay = [lay]
        if not isinstance(lay, list) or not lay or not all(isinstance(s, str) for s in lay):
            raise v.fail((table, key), f"[{table}] '{key}' must be an array of layout strings")
        for s in lay:
            if not _LAYOUT_STR_RE.match(s) or s == "default":
                raise v.fail((table, key), f"'{s}' is not a layout string",
                             "name the layout, e.g. \"NHWC\" (TVM 0.27 rejects \"default\")")
        out[key] = tuple(lay)
    return out


def _inputs(v: Checker, raw: Any, dynamic: Mapping[str, DynamicDim]
            ) -> tuple[InputSpec, ...]:
    if raw is None:
        raise v.fail((), "missing [[inputs]]", "declare at least one [[inputs]] with name, shape")
    if not isinstance(raw, list) or not raw:
        raise v.fail(("inputs",), "inputs must be a non-empty array of tables ([[inputs]])")
    seen: set[str] = set()
    out: list[InputSpec] = []
    for i, item in enumerate(raw):
        p = ("inputs", str(i))
        item = v.table(item, p, "[[inputs]] entry")
        v.keys(item, _INPUT_KEYS, p, "[[inputs]]")
        name = v.string(item.get("name", f"input{i}"), (*p, "name"), "input name")
        if not IDENT_RE.match(name):
            raise v.fail((*p, "name"), f"input name '{name}' is not an identifier")
        if name in seen:
            raise v.fail((*p, "name"), f"duplicate input name '{name}'")
        seen.add(name)
        if "shape" not in item:
            raise v.fail(p, f"input '{name}' has no shape", "shape = [1, 3, 224, 224]")
        shape = parse_shape(v, item["shape"], (*p, "shape"), name, dynamic)
        dtype = v.string(item.get("dtype", "float32"), (*p, "dtype"), "dtype")
        if dtype not in DTYPES:
            close = difflib.get_close_matches(dtype, DTYPES, n=1)
            hint = f"did you mean '{close[0]}'?" if close else "use one of " + ", ".join(DTYPES)
            raise v.fail((*p, "dtype"), f"unsupported dtype '{dtype}'", hint)
        layout = None
        if "layout" in item:
            layout = v.io_layout(item["layout"], (*p, "layout"))
            if len(shape) != 4:
                raise v.fail((*p, "layout"), f"layout '{layout}' needs a 4-D input, '{name}' "
                             f"is {len(shape)}-D", "omit layout for inputs that are not images")
            if layout == "NCHW":
                layout = None  # as PyTorch holds it: nothing to permute
        rng = None
        if "range" in item:
            r = item["range"]
            if not isinstance(r, list) or len(r) != 2:
                raise v.fail((*p, "range"), "range must be [low, high]")
            lo, hi = (v.number(x, (*p, "range"), "range bound") for x in r)
            if not lo < hi:
                raise v.fail((*p, "range"), f"range low {lo:g} must be below high {hi:g}")
            _within_dtype(v, (*p, "range"), lo, hi, dtype)
            rng = (lo, hi)
        out.append(InputSpec(name, shape, dtype, layout, rng, v.line(*p)))
    return tuple(out)


#: The largest magnitude each input dtype holds (integers: their own bounds, below).
_FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895e38, "float32": 3.4028e38,
              "float64": 1.7976e308}
_INT_BOUNDS = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-(1 << 31), (1 << 31) - 1),
               "int64": (-(1 << 63), (1 << 63) - 1), "bool": (0, 1)}


def _within_dtype(v: Checker, path: tuple[str, ...], lo: float, hi: float, dtype: str) -> None:
    """A range the input's values can be drawn from: inside what `dtype` holds, and (a float)
    narrow enough that its width is a number (uniform draws over [-1e308, 1e308] overflow)."""
    if dtype in _INT_BOUNDS:
        low, high = _INT_BOUNDS[dtype]
        if lo < low or hi > high:
            raise v.fail(path, f"range [{lo:g}, {hi:g}] is outside what {dtype} holds "
                         f"[{low}, {high}]", f"keep the range within [{low}, {high}]")
        return
    top = _FLOAT_MAX.get(dtype)
    if top is not None and max(abs(lo), abs(hi)) > top:
        raise v.fail(path, f"range [{lo:g}, {hi:g}] is outside what {dtype} holds (about "
                     f"±{top:.4g})", "inputs drawn from it would be infinite: narrow it")
    if not math.isfinite(hi - lo):
        raise v.fail(path, f"range [{lo:g}, {hi:g}] is wider than a float64 can hold",
                     "narrow it: its width must be at most about 1.8e308")


def _outputs(v: Checker, raw: Any) -> tuple[OutputSpec, ...]:
    if not isinstance(raw, list):
        raise v.fail(("outputs",), "outputs must be an array of tables ([[outputs]])")
    out: list[OutputSpec] = []
    for i, item in enumerate(raw):
        p = ("outputs", str(i))
        item = v.table(item, p, "[[outputs]] entry")
        v.keys(item, _OUTPUT_KEYS, p, "[[outputs]]")
        name = v.string(item["name"], (*p, "name"), "output name") if "name" in item else None
        layout = v.io_layout(item["layout"], (*p, "layout")) if "layout" in item else None
        if layout == "NCHW":
            layout = None
        tol: dict[str, float | str] = (v.tolerance(item["tolerance"], (*p, "tolerance"))
                                         if "tolerance" in item else {})
        tgt_tol: dict[str, dict[str, float | str]] = {}
        over = v.table(item.get("targets_override", {}), (*p, "targets_override"),
                       "targets_override")
        for tgt, entry in over.items():
            if tgt not in v.targets:
                raise v.fail((*p, "targets_override"), f"unknown target '{tgt}'",
                             "targets: " + ", ".join(v.targets))
            entry = v.table(entry, (*p, "targets_override"), "targets_override entry")
            v.keys(entry, ("tolerance",), (*p, "targets_override"), "[[outputs]] override")
            if "tolerance" in entry:
                tgt_tol[tgt] = v.tolerance(entry["tolerance"], (*p, "targets_override"))
        selection = _selection(v, item["selection"], (*p, "selection")) \
            if "selection" in item else None
        out.append(OutputSpec(i, name, layout, tol, tgt_tol, v.line(*p), selection))
    return tuple(out)


def _selection(v: Checker, raw: Any, path: tuple[str, ...]) -> tuple[int, int]:
    """``selection = { axis = 1, differing = 0 }``: the axis the output's selected items lie
    along, and how many may be other items altogether (a near-tie at the cut)."""
    tab = v.table(raw, path, "selection")
    v.keys(tab, ("axis", "differing"), path, "selection")
    if "axis" not in tab:
        raise v.fail(path, "selection needs the axis its items lie along",
                     "e.g. selection = { axis = 1 } for (batch, k, values) detections")
    axis = v.integer(tab["axis"], (*path, "axis"), "selection axis", 0, 16)
    differing = v.integer(tab.get("differing", 0), (*path, "differing"), "selection differing",
                          0, 1 << 20)
    return axis, differing
