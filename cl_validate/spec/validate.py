"""Validate one case file into a `CaseSpec`: every mistake a user can make, with file and line.

Unknown keys (with a did-you-mean), wrong types, bad shapes, dtypes, layouts, targets and
pipeline names are reported here, in one line, before anything is exported or compiled. Only
the file is read: importing the model's module and calling its factory run user code, which
happens in a worker (`cl_validate.compile.factory`).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cl_validate.errors import CaseFileError
from cl_validate.paths import display_path
from cl_validate.spec.lines import locate_lines, syntax_error, tomllib
from cl_validate.spec.model import (
    BUILTIN_PIPELINES,
    DEFAULT_MAX_MEMORY_MB,
    DEFAULT_PIPELINE,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TOLERANCE,
    DTYPES,
    IO_LAYOUTS,
    KNOWN_TARGETS,
    MAX_INPUT_ELEMENTS,
    Budget,
    CaseSpec,
    InputSpec,
    OutputSpec,
    Tolerance,
    nearest_line,
)

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_FACTORY_RE = re.compile(rf"^{_DOTTED}:{_DOTTED}$")
_LAYOUT_STR_RE = re.compile(r"^[A-Za-z0-9]+$")
_PIPELINE_RE = re.compile(rf"^(?:[A-Za-z0-9_.-]+|{_DOTTED}:{_DOTTED})$")

_TOP_KEYS = (
    "name", "model", "description", "targets", "pipeline", "seed", "inputs", "outputs",
    "layout", "budget", "tolerance", "targets_override", "timeout", "max_memory_mb",
    "layout_overrides",
)
_INPUT_KEYS = ("name", "shape", "dtype", "layout", "range")
_OUTPUT_KEYS = ("name", "layout", "tolerance", "targets_override")
_BUDGET_KEYS = ("layout_transforms", "kernels", "reason")
_TOL_KEYS = ("rtol", "atol")
_OVERRIDE_KEYS = ("budget", "tolerance")


class _Validator:
    """Walks one parsed case file; every complaint carries the file and line."""

    def __init__(self, path: Path, text: str, display: str) -> None:
        self.path = path
        self.display = display
        self.lines = locate_lines(text)

    def line(self, *path: str) -> int | None:
        return nearest_line(self.lines, path)

    def fail(self, path: Iterable[str], message: str, hint: str | None = None) -> CaseFileError:
        return CaseFileError(message, file=self.display, line=self.line(*path), hint=hint)

    def table(self, value: Any, path: tuple[str, ...], what: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"{what} must be a table, got {_kind(value)}")
        return value

    def keys(self, table: Mapping[str, Any], allowed: Iterable[str], path: tuple[str, ...],
             where: str) -> None:
        allowed = tuple(allowed)
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
                hint = f"did you mean '{close[0]}'?" if close else "allowed: " + ", ".join(allowed)
                raise self.fail((*path, key), f"unknown key '{key}' in {where}", hint)

    def string(self, value: Any, path: tuple[str, ...], what: str) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"{what} must be a string, got {_kind(value)}")
        return value

    def integer(self, value: Any, path: tuple[str, ...], what: str, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"{what} must be an integer, got {_kind(value)} {value!r}")
        if value < minimum:
            raise self.fail(path, f"{what} must be >= {minimum}, got {value}")
        return value

    def number(self, value: Any, path: tuple[str, ...], what: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(path, f"{what} must be a number, got {_kind(value)} {value!r}")
        if not math.isfinite(value):
            raise self.fail(path, f"{what} must be finite, got {value}")
        return float(value)

    def tolerance(self, value: Any, path: tuple[str, ...]) -> dict[str, float]:
        tab = self.table(value, path, "tolerance")
        self.keys(tab, _TOL_KEYS, path, "[" + ".".join(p for p in path if not p.isdigit()) + "]")
        out: dict[str, float] = {}
        for key in _TOL_KEYS:
            if key in tab:
                v = self.number(tab[key], (*path, key), key)
                if v < 0:
                    raise self.fail((*path, key), f"{key} must be >= 0, got {v:g}")
                out[key] = v
        return out

    def budget(self, value: Any, path: tuple[str, ...]) -> dict[str, Any]:
        tab = self.table(value, path, "budget")
        self.keys(tab, _BUDGET_KEYS, path, "[" + ".".join(path) + "]")
        out: dict[str, Any] = {}
        if "reason" in tab:  # written by `budget tighten --allow-increase --reason TEXT`
            out["reason"] = self.string(tab["reason"], (*path, "reason"), "reason")
        if "layout_transforms" in tab:
            out["layout_transforms"] = self.integer(
                tab["layout_transforms"], (*path, "layout_transforms"), "layout_transforms", 0)
        if "kernels" in tab:
            out["kernels"] = self.integer(tab["kernels"], (*path, "kernels"), "kernels", 1)
        return out

    def io_layout(self, value: Any, path: tuple[str, ...]) -> str:
        s = self.string(value, path, "layout")
        if s not in IO_LAYOUTS:
            close = difflib.get_close_matches(s.upper(), IO_LAYOUTS, n=1)
            hint = f"did you mean '{close[0]}'?" if close else "use one of " + ", ".join(IO_LAYOUTS)
            raise self.fail(path, f"unsupported layout '{s}'", hint)
        return s


def _kind(value: Any) -> str:
    return {
        str: "a string", int: "an integer", float: "a number", bool: "a boolean",
        list: "an array", dict: "a table",
    }.get(type(value), type(value).__name__)


def load_case(path: str | Path) -> CaseSpec:
    """Parse and validate one case file. Raises `CaseFileError` with file and line."""
    path = Path(path)
    display = display_path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CaseFileError("case file not found", file=display) from None
    except IsADirectoryError:
        raise CaseFileError("is a folder, not a case file", file=display,
                            hint="rename the folder, or pass a .toml file") from None
    except OSError as exc:
        raise CaseFileError(f"cannot read case file: {exc.strerror or exc}",
                            file=display) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise CaseFileError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x})", file=display,
                            line=line, hint="case files are UTF-8 TOML: save it as UTF-8"
                            ) from None
    if not text.strip():
        raise CaseFileError("case file is empty", file=display,
                            hint="a case needs at least model = \"module:factory\" and "
                            "one [[inputs]]")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise syntax_error(str(exc), text, display) from None
    return _validate(path, text, display, data)


def _validate(path: Path, text: str, display: str, data: dict[str, Any]) -> CaseSpec:
    v = _Validator(path, text, display)
    v.keys(data, _TOP_KEYS, (), "[case]")

    name = v.string(data.get("name", path.stem), ("name",), "name")
    if not _NAME_RE.match(name):
        raise v.fail(("name",), f"case name '{name}' may only use letters, digits, '_', '.', '-'",
                     "names become file names in reports")
    if name.startswith("."):  # ".", "..", ".bashrc": a parent reference or a hidden file
        raise v.fail(("name",), f"case name '{name}' must not start with '.'",
                     "names become file names in reports; set name = \"...\"")
    if "model" not in data:
        raise v.fail((), "missing required key 'model'",
                     "model = \"package.module:factory\" naming a callable returning nn.Module")
    model = v.string(data["model"], ("model",), "model")
    if not _FACTORY_RE.match(model):
        raise v.fail(("model",), f"model '{model}' is not of the form 'module:callable'",
                     "e.g. model = \"zoo.resnet:resnet50\"")
    description = v.string(data.get("description", ""), ("description",), "description")

    targets_raw = data.get("targets", list(KNOWN_TARGETS))
    if not isinstance(targets_raw, list) or not targets_raw:
        raise v.fail(("targets",), "targets must be a non-empty array of strings",
                     "e.g. targets = [\"llvm\"]; omit targets for both llvm and cuda")
    targets: list[str] = []
    for t in targets_raw:
        t = v.string(t, ("targets",), "a target")
        if t not in KNOWN_TARGETS:
            close = difflib.get_close_matches(t, KNOWN_TARGETS, n=1)
            raise v.fail(("targets",), f"unknown target '{t}'",
                         f"did you mean '{close[0]}'?" if close else "use llvm or cuda")
        if t in targets:
            raise v.fail(("targets",), f"target '{t}' listed twice")
        targets.append(t)

    pipeline = v.string(data.get("pipeline", DEFAULT_PIPELINE), ("pipeline",), "pipeline")
    if not _PIPELINE_RE.match(pipeline):
        raise v.fail(("pipeline",),
                     f"pipeline '{pipeline}' is neither a name nor 'module:function'")
    if ":" not in pipeline and pipeline not in BUILTIN_PIPELINES:
        raise v.fail(("pipeline",), f"unknown pipeline '{pipeline}'",
                     "registered: " + ", ".join(BUILTIN_PIPELINES))
    seed = v.integer(data.get("seed", 0), ("seed",), "seed", 0)
    timeout = v.number(data.get("timeout", DEFAULT_TIMEOUT_S), ("timeout",), "timeout")
    if timeout <= 0:
        raise v.fail(("timeout",), f"timeout must be > 0 seconds, got {timeout:g}")
    max_memory_mb = v.integer(data.get("max_memory_mb", DEFAULT_MAX_MEMORY_MB),
                              ("max_memory_mb",), "max_memory_mb", 256)

    inputs = _inputs(v, data.get("inputs"))
    outputs = _outputs(v, data.get("outputs", []))

    layout = _layouts(v, data.get("layout", {}), "layout")
    layout_overrides = _layouts(v, data.get("layout_overrides", {}), "layout_overrides")

    b = v.budget(data.get("budget", {}), ("budget",))
    budget = Budget(
        layout_transforms=b.get("layout_transforms", 0),
        kernels=b.get("kernels"),
        layout_transforms_line=v.line("budget", "layout_transforms") or v.line("model"),
        kernels_line=v.line("budget", "kernels"),
        reason=b.get("reason"),
    )
    t = v.tolerance(data.get("tolerance", {}), ("tolerance",))
    tolerance = Tolerance(rtol=t.get("rtol", DEFAULT_TOLERANCE[0]),
                          atol=t.get("atol", DEFAULT_TOLERANCE[1]))

    overrides: dict[str, dict[str, Any]] = {}
    over_raw = v.table(data.get("targets_override", {}), ("targets_override",),
                       "[targets_override]")
    for tgt, over in over_raw.items():
        p = ("targets_override", tgt)
        if tgt not in KNOWN_TARGETS:
            close = difflib.get_close_matches(tgt, KNOWN_TARGETS, n=1)
            raise v.fail(p, f"unknown target '{tgt}' in [targets_override]",
                         f"did you mean '{close[0]}'?" if close else "use llvm or cuda")
        over = v.table(over, p, f"[targets_override.{tgt}]")
        v.keys(over, _OVERRIDE_KEYS, p, f"[targets_override.{tgt}]")
        entry: dict[str, Any] = {}
        if "budget" in over:
            entry["budget"] = v.budget(over["budget"], (*p, "budget"))
        if "tolerance" in over:
            entry["tolerance"] = v.tolerance(over["tolerance"], (*p, "tolerance"))
        overrides[tgt] = entry

    return CaseSpec(
        name=name, path=path, model=model, description=description, targets=tuple(targets),
        inputs=inputs, outputs=outputs, layout=layout, pipeline=pipeline, seed=seed,
        budget=budget, tolerance=tolerance, overrides=overrides, lines=v.lines,
        timeout=timeout, max_memory_mb=max_memory_mb, layout_overrides=layout_overrides,
    )


def _layouts(v: _Validator, raw: Any, table: str) -> dict[str, tuple[str, ...]]:
    """[layout] (Relax op → layouts) or [layout_overrides] (nn.Module path → layouts)."""
    tab = v.table(raw, (table,), f"[{table}]")
    out: dict[str, tuple[str, ...]] = {}
    for key, lay in tab.items():
        if table == "layout" and (not key.startswith("relax.") or not _NAME_RE.match(key)):
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


def _inputs(v: _Validator, raw: Any) -> tuple[InputSpec, ...]:
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
        if not _IDENT_RE.match(name):
            raise v.fail((*p, "name"), f"input name '{name}' is not an identifier")
        if name in seen:
            raise v.fail((*p, "name"), f"duplicate input name '{name}'")
        seen.add(name)
        if "shape" not in item:
            raise v.fail(p, f"input '{name}' has no shape", "shape = [1, 3, 224, 224]")
        shape_raw = item["shape"]
        if not isinstance(shape_raw, list) or not shape_raw:
            raise v.fail((*p, "shape"), f"shape of '{name}' must be a non-empty array of integers",
                         "e.g. shape = [1, 3, 224, 224]")
        shape = tuple(v.integer(d, (*p, "shape"), f"each dimension of '{name}'", 1)
                      for d in shape_raw)
        if math.prod(shape) > MAX_INPUT_ELEMENTS:
            raise v.fail((*p, "shape"), f"input '{name}' has {math.prod(shape):,} elements",
                         f"at most {MAX_INPUT_ELEMENTS:,}; check the shape for a typo")
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
            rng = (lo, hi)
        out.append(InputSpec(name, shape, dtype, layout, rng, v.line(*p)))
    return tuple(out)


def _outputs(v: _Validator, raw: Any) -> tuple[OutputSpec, ...]:
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
        tol = v.tolerance(item["tolerance"], (*p, "tolerance")) if "tolerance" in item else {}
        tgt_tol: dict[str, dict[str, float]] = {}
        over = v.table(item.get("targets_override", {}), (*p, "targets_override"),
                       "targets_override")
        for tgt, entry in over.items():
            if tgt not in KNOWN_TARGETS:
                raise v.fail((*p, "targets_override"), f"unknown target '{tgt}'", "llvm or cuda")
            entry = v.table(entry, (*p, "targets_override"), "targets_override entry")
            v.keys(entry, ("tolerance",), (*p, "targets_override"), "[[outputs]] override")
            if "tolerance" in entry:
                tgt_tol[tgt] = v.tolerance(entry["tolerance"], (*p, "targets_override"))
        out.append(OutputSpec(i, name, layout, tol, tgt_tol, v.line(*p)))
    return tuple(out)
