"""TVM's own converter for an op, for a converter of ours that wraps it (complex pairs, half
precision) where the project has none of its own: the importer's map, built once per
importer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def default_converter(importer: Any, name: str) -> Callable[[Any], Any]:
    """The importer's converter for `name` (it takes the FX node alone)."""
    defaults = getattr(importer, "_cl_validate_defaults", None)
    if defaults is None:
        defaults = importer.create_convert_map()
        importer._cl_validate_defaults = defaults
    if name not in defaults:
        raise ValueError(f"no converter for {name}")
    return defaults[name]  # type: ignore[no-any-return]


__all__ = ["default_converter"]
