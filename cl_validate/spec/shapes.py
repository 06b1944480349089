"""Shapes a case runs at: fixed sizes, dynamic dimensions (``[dynamic]``) and shape variants
(``[[variants]]``), validated with file and line like every other key.

::

    [[inputs]]
    name = "x"
    shape = ["batch", 3, 224, 224]      # a name: a dimension declared in [dynamic]

    [dynamic]
    batch = { min = 1, max = 16 }       # compiled once for any size in [min, max]; numerics
                                        # at min, max and one between (or `values = [...]`)

    [[variants]]                        # one more compile and set of verdicts
    name = "hires"
    shapes = { x = ["batch", 3, 448, 448] }
    budget = { layout_transforms = 2 }  # optional: overrides [budget] for this variant
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from typing import Any

from cl_validate.spec.checker import IDENT_RE, Checker
from cl_validate.spec.model import MAX_INPUT_ELEMENTS, Dim, DynamicDim, InputSpec, Variant

_DYNAMIC_KEYS = ("min", "max", "values")
_VARIANT_KEYS = ("name", "shapes", "budget", "tolerance", "targets_override")


def dynamic_dims(v: Checker, raw: Any) -> dict[str, DynamicDim]:
    """``[dynamic]``: name → its range and the sizes numerics run at."""
    out: dict[str, DynamicDim] = {}
    for name, spec in v.table(raw, ("dynamic",), "[dynamic]").items():
        p = ("dynamic", name)
        if not IDENT_RE.match(name):
            raise v.fail(p, f"dynamic dimension name '{name}' is not an identifier",
                         "e.g. batch = { min = 1, max = 16 }")
        spec = v.table(spec, p, f"[dynamic] {name}")
        v.keys(spec, _DYNAMIC_KEYS, p, f"[dynamic.{name}]")
        for key in ("min", "max"):
            if key not in spec:
                raise v.fail(p, f"dynamic dimension '{name}' has no {key}",
                             f"{name} = {{ min = 1, max = 16 }}")
        lo = v.integer(spec["min"], (*p, "min"), f"min of '{name}'", 1)
        hi = v.integer(spec["max"], (*p, "max"), f"max of '{name}'", 1)
        if lo > hi:
            raise v.fail((*p, "max"), f"the range of '{name}' is empty: min {lo} > max {hi}",
                         "max must be at least min")
        if "values" in spec:
            values = _values(v, spec["values"], (*p, "values"), name, lo, hi)
        else:
            values = tuple(sorted({lo, (lo + hi) // 2, hi}))
        out[name] = DynamicDim(name, lo, hi, values, v.line(*p))
    return out


def _values(v: Checker, raw: Any, path: tuple[str, ...], name: str, lo: int, hi: int
            ) -> tuple[int, ...]:
    if not isinstance(raw, list) or not raw:
        raise v.fail(path, f"values of '{name}' must be a non-empty array of sizes")
    values: list[int] = []
    for x in raw:
        x = v.integer(x, path, f"a value of '{name}'", 1)
        if not lo <= x <= hi:
            raise v.fail(path, f"value {x} of '{name}' is outside its range [{lo}, {hi}]")
        if x in values:
            raise v.fail(path, f"value {x} of '{name}' is listed twice")
        values.append(x)
    return tuple(values)


def parse_shape(v: Checker, raw: Any, path: tuple[str, ...], input_name: str,
                dynamic: Mapping[str, DynamicDim]) -> tuple[Dim, ...]:
    """A shape: sizes >= 1, or names of ``[dynamic]`` dimensions (``[]``: a 0-d tensor, as
    a diffusion timestep is passed); at most `MAX_INPUT_ELEMENTS` elements at the
    dimensions' largest sizes."""
    if not isinstance(raw, list):
        raise v.fail(path, f"shape of '{input_name}' must be an array of integers",
                     "e.g. shape = [1, 3, 224, 224]; shape = [] for a 0-d tensor")
    shape: list[Dim] = []
    for d in raw:
        if isinstance(d, str):
            if d not in dynamic:
                close = difflib.get_close_matches(d, list(dynamic), n=1)
                raise v.fail(path, f"dimension '{d}' of '{input_name}' is not declared in "
                             "[dynamic]", f"did you mean '{close[0]}'?" if close else
                             f"declare it: [dynamic] {d} = {{ min = 1, max = 16 }}")
            shape.append(d)
        else:
            shape.append(v.integer(d, path, f"each dimension of '{input_name}'", 1))
    largest = math.prod(d if isinstance(d, int) else dynamic[d].max for d in shape)
    if largest > MAX_INPUT_ELEMENTS:
        raise v.fail(path, f"input '{input_name}' has {largest:,} elements",
                     f"at most {MAX_INPUT_ELEMENTS:,}; check the shape for a typo")
    return tuple(shape)


def check_dynamic_used(v: Checker, dynamic: Mapping[str, DynamicDim],
                       shapes: Sequence[tuple[Dim, ...]]) -> None:
    """A ``[dynamic]`` dimension no shape uses is a typo or a leftover."""
    used = {d for shape in shapes for d in shape if isinstance(d, str)}
    for name in dynamic:
        if name not in used:
            raise v.fail(("dynamic", name), f"dynamic dimension '{name}' is used by no shape",
                         f"use it in an input's shape, e.g. shape = [\"{name}\", 3, 224, 224]")


def variants(v: Checker, raw: Any, inputs: Sequence[InputSpec],
             dynamic: Mapping[str, DynamicDim]) -> tuple[Variant, ...]:
    """``[[variants]]``: each names the inputs it reshapes; no two runs of a case (the case
    itself and each variant) may have the same shapes."""
    if not isinstance(raw, list):
        raise v.fail(("variants",), "variants must be an array of tables ([[variants]])")
    by_name = {i.name: i for i in inputs}
    seen: dict[tuple[tuple[Dim, ...], ...], str] = {
        tuple(i.shape for i in inputs): "the case's own [[inputs]]"}
    out: list[Variant] = []
    for index, item in enumerate(raw):
        p = ("variants", str(index))
        item = v.table(item, p, "[[variants]] entry")
        v.keys(item, _VARIANT_KEYS, p, "[[variants]]")
        if "name" not in item:
            raise v.fail(p, "a [[variants]] entry has no name", 'name = "b8"')
        name = v.file_name(item["name"], (*p, "name"), "variant")
        if any(x.name == name for x in out):
            raise v.fail((*p, "name"), f"variant '{name}' is declared twice")
        shapes: dict[str, tuple[Dim, ...]] = {}
        for input_name, shape in v.table(item.get("shapes", {}), (*p, "shapes"),
                                         "shapes").items():
            if input_name not in by_name:
                close = difflib.get_close_matches(input_name, list(by_name), n=1)
                raise v.fail((*p, "shapes"), f"variant '{name}' reshapes '{input_name}', "
                             "which is not an input", f"did you mean '{close[0]}'?" if close
                             else "inputs: " + ", ".join(by_name))
            parsed = parse_shape(v, shape, (*p, "shapes", input_name), input_name, dynamic)
            if len(parsed) != len(by_name[input_name].shape):
                raise v.fail((*p, "shapes"), f"variant '{name}' gives '{input_name}' "
                             f"{len(parsed)} dimensions, the input has "
                             f"{len(by_name[input_name].shape)}",
                             "a variant changes sizes, not the rank")
            shapes[input_name] = parsed
        effective = tuple(shapes.get(i.name, i.shape) for i in inputs)
        if effective in seen:
            raise v.fail(p, f"variant '{name}' runs the same shapes as {seen[effective]}",
                         "give it other shapes, or remove it")
        seen[effective] = f"variant '{name}'"
        out.append(Variant(
            name, index, shapes,
            budget=v.budget(item["budget"], (*p, "budget")) if "budget" in item else {},
            tolerance=(v.tolerance(item["tolerance"], (*p, "tolerance"))
                       if "tolerance" in item else {}),
            overrides=v.target_overrides(item.get("targets_override", {}),
                                         (*p, "targets_override")),
            line=v.line(*p)))
    return tuple(out)
