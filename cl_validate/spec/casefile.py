"""Rewriting case files in place: comments and formatting kept, writes atomic, checked.

Shared by ``budget tighten`` (budgets, planned in `cl_validate.spec.budgets`) and
``calibrate --write`` (tolerances): both set a few keys of one section (``[budget]`` /
``[tolerance]``) either at case level or in ``[targets_override.<target>]``, wherever that
section already lives.

A rewrite keeps the file as its author wrote it, not only its comments (`CaseText`): the
lines it does not change keep their bytes, line ends included (CRLF stays CRLF, a file with
both keeps both), new lines take the file's usual line end, and a UTF-8 byte-order mark
stays. A symbolic link is written through to its target (`cl_validate.atomic`), and
`written_to` says where the bytes went.
"""

from __future__ import annotations

import difflib
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.items import InlineTable

from cl_validate.atomic import through_links, write_atomic
from cl_validate.paths import display_path, read_regular
from cl_validate.spec.lines import UTF8_BOM, toml_text
from cl_validate.spec.model import CaseSpec
from cl_validate.spec.validate import load_case

_LINE = re.compile(r"[^\n]*\n|[^\n]+$")


def _lines(text: str) -> list[str]:
    """`text` cut after each ``\\n`` only (``str.splitlines`` also cuts at ``\\r``, form
    feeds and Unicode separators, which are not line ends in TOML)."""
    return _LINE.findall(text)


@dataclass(frozen=True)
class CaseText:
    """A case file's text as read, and how to write a new text back the way it was written.

    `text` is what tomlkit and the validator read: no byte-order mark, ``\\n`` line ends.
    `raw_lines` are the file's own lines, each with its own line end, one per line of
    `text`."""

    path: Path
    text: str
    raw_lines: tuple[str, ...]
    bom: bool
    newline: str  # for lines the rewrite adds: the file's usual line end

    @classmethod
    def read(cls, path: Path) -> CaseText:
        raw = read_regular(path)
        decoded = toml_text(raw, display_path(path))  # UTF-8, BOM dropped (else CaseFileError)
        raw_lines = tuple(_lines(decoded))
        crlf = sum(1 for ln in raw_lines if ln.endswith("\r\n"))
        lf = sum(1 for ln in raw_lines if ln.endswith("\n")) - crlf
        return cls(path, "".join(_lf(ln) for ln in raw_lines), raw_lines,
                   raw.startswith(UTF8_BOM), "\r\n" if crlf > lf else "\n")

    def encode(self, new: str) -> bytes:
        """`new` (a rewrite of `text`) as the file's bytes: unchanged lines byte for byte,
        changed and added ones with the file's usual line end, the byte-order mark kept."""
        old_lines = [_lf(ln) for ln in self.raw_lines]
        new_lines = _lines(new)
        out: list[str] = []
        matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                out.extend(self.raw_lines[i1:i2])
            else:
                out.extend(ln[:-1] + self.newline if ln.endswith("\n") else ln
                           for ln in new_lines[j1:j2])
        return (UTF8_BOM if self.bom else b"") + "".join(out).encode("utf-8")

    def kept(self) -> str:
        """What a diff of `text` does not show and the rewrite keeps, for the reader of
        that diff (\"\" when nothing)."""
        parts = []
        if any(ln.endswith("\r\n") for ln in self.raw_lines):
            mixed = any(ln.endswith("\n") and not ln.endswith("\r\n") for ln in self.raw_lines)
            parts.append("CRLF and LF line ends" if mixed else "CRLF line ends")
        if self.bom:
            parts.append("the UTF-8 byte-order mark")
        return " and ".join(parts) + " kept" if parts else ""

    def check(self, new: str) -> CaseSpec:
        """`new` loaded as the file would be after the write (`load_text_as_case`)."""
        return load_text_as_case(self.path, self.encode(new))

    def write(self, new: str) -> Path:
        """Write `new` atomically (through a symbolic link); the file written."""
        return write_atomic(self.path, self.encode(new))


def _lf(line: str) -> str:
    return line[:-2] + "\n" if line.endswith("\r\n") else line


def written_to(path: Path) -> str:
    """`path` as shown to the user, with the file a write really lands in when `path` is a
    symbolic link: ``model_cases/a.toml -> shared/a.toml``."""
    shown = display_path(path)
    try:
        real = through_links(path)
    except OSError:
        return shown
    return shown if real == path else f"{shown} -> {display_path(real)}"


def diff_lines(shown: str, old: str, new: str) -> list[str]:
    """A unified diff of a rewrite, for the console."""
    return list(difflib.unified_diff(old.splitlines(), new.splitlines(), f"a/{shown}",
                                     f"b/{shown}", n=0, lineterm=""))


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


def load_text_as_case(path: Path, data: str | bytes) -> CaseSpec:
    """`data` loaded as the case file `path` would be (from a temporary copy with the same
    name): a rewrite is checked to mean what was planned before the real file is replaced."""
    with tempfile.TemporaryDirectory(prefix="cl_validate-check-") as tmp:
        copy = Path(tmp) / path.name
        copy.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
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
