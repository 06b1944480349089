"""Rewriting case files in place: comments and formatting kept, writes atomic, checked.

Shared by ``budget tighten`` (budgets, planned in `cl_validate.spec.budgets`) and
``calibrate --write`` (tolerances): both set a few keys of one section (``[budget]`` /
``[tolerance]``) either at case level or in ``[targets_override.<target>]``, wherever that
section already lives. Files are replaced with `cl_validate.atomic.write_atomic`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.items import InlineTable

from cl_validate.spec.model import CaseSpec
from cl_validate.spec.validate import load_case


def _inline(section: str, values: dict[str, str]) -> Any:
    """A ``{ key = value, ... }`` inline table in the house style (spaces inside braces)."""
    body = ", ".join(f"{k} = {v}" for k, v in values.items())
    return tomlkit.parse(f"{section} = {{ {body} }}\n")[section]


def _value(literal: str) -> Any:
    return tomlkit.parse(f"x = {literal}\n")["x"]


def _new_table(key: str, value: Any) -> Any:
    """A ``[targets_override.<t>]`` table holding one key, followed by a blank line."""
    table = tomlkit.table()
    table[key] = value
    table.add(tomlkit.nl())
    return table


def set_section(doc: Any, section: str, target: str | None, values: dict[str, str], *,
                variant: int | None = None) -> None:
    """Set `values` (TOML literals) in `section` at case level (`target` None) or in
    ``[targets_override.<target>]`` — of the case, or of its `variant`-th ``[[variants]]``
    entry — updating an inline table or a sub-table in place."""
    container: Any = doc if variant is None else doc["variants"][variant]
    if target is None:
        cur = container.get(section)
        if cur is None and variant is None:
            container[section] = cur = tomlkit.table()
        if cur is None or isinstance(cur, InlineTable):  # a variant's: one line of its own
            _merge_inline(container, section, cur, values)
        else:
            for k, v in values.items():
                cur[k] = _value(v)
        return
    if "targets_override" not in container:
        container["targets_override"] = tomlkit.table(is_super_table=True)
    over: Any = container["targets_override"]
    if target not in over:
        over[target] = _new_table(section, _inline(section, values))
        return
    cur = over[target].get(section)
    if cur is None or isinstance(cur, InlineTable):
        _merge_inline(over[target], section, cur, values)
    else:  # a [targets_override.<t>.<section>] table
        for k, v in values.items():
            cur[k] = _value(v)


def _merge_inline(container: Any, section: str, cur: Any, values: dict[str, str]) -> None:
    """`section` as an inline table holding its old keys and `values` (the line's trailing
    comment kept)."""
    merged = {k: tomlkit.item(v).as_string() for k, v in cur.unwrap().items()} if cur else {}
    container[section] = _inline(section, {**merged, **values})


def tidy(old: str, new: str) -> str:
    """No blank line left at the end of the file by a table added last."""
    if new.endswith("\n\n") and not old.endswith("\n\n"):
        new = new.rstrip("\n") + "\n"
    return new


def load_text_as_case(path: Path, text: str) -> CaseSpec:
    """`text` loaded as the case file `path` would be (from a temporary copy with the same
    name): a rewrite is checked to mean what was planned before the real file is replaced."""
    with tempfile.TemporaryDirectory(prefix="cl_validate-check-") as tmp:
        copy = Path(tmp) / path.name
        copy.write_text(text, encoding="utf-8")
        return load_case(copy)


def toml_number(v: float) -> str:
    """``5e-05`` → ``5e-5``, ``0.0001`` → ``1e-4``: as people write tolerances in case files,
    and exactly the same float when read back."""
    mant, _, exp = f"{v:.15e}".partition("e")
    mant = mant.rstrip("0").rstrip(".")
    text = f"{mant}e{int(exp)}"
    if int(exp) >= -2 or float(text) != v:
        return repr(float(v))
    return text
