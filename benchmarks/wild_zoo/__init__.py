"""Architectures nobody here designed, each module a family, each with a ``MODELS`` dict of
factories by name (run by ``zoo_floor.py`` and ``quant_zoo.py``)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any


def merged(*modules: ModuleType) -> dict[str, Callable[[], Any]]:
    """Every module's ``MODELS`` in one dict; a name two modules use is an error (one would
    silently replace the other, and its model would never run)."""
    out: dict[str, Callable[[], Any]] = {}
    for module in modules:
        for name, factory in module.MODELS.items():
            if name in out:
                raise ValueError(f"wild_zoo model {name!r} is in two modules "
                                 f"(again in {module.__name__})")
            out[name] = factory
    return out
