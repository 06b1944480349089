"""Where each key of a TOML file is: tomllib parses values but gives no positions.

A small scanner that knows the subset of TOML case files use (tables, arrays of tables, dotted
and quoted keys, inline tables, multi-line arrays) maps key paths to 1-based lines, so every
complaint and every report can point at the line to fix. Also turns tomllib's terse syntax
errors into one line with the line number and a hint, and turns a file's bytes into the text
tomllib reads (`toml_text`): UTF-8, with the byte-order mark Windows editors write accepted,
and UTF-16/UTF-32 or nesting deeper than any case file needs refused in one line.
"""

from __future__ import annotations

import re
import sys

from cl_validate.errors import CaseFileError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["UTF8_BOM", "locate_lines", "syntax_error", "toml_text", "tomllib",
           "too_many_digits"]

UTF8_BOM = b"\xef\xbb\xbf"
#: Byte-order marks of the encodings TOML does not allow, longest first (UTF-32 LE starts
#: with UTF-16 LE's mark).
_OTHER_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
               (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))
#: Deeper than any case file (a variant's targets_override is 4 levels) and far from
#: Python's recursion limit, which tomllib's recursive parser would hit past ~300.
MAX_NESTING = 32

_KEY = r"""(?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+)"""
_HEADER_RE = re.compile(rf"^\s*(\[\[?)\s*({_KEY}(?:\s*\.\s*{_KEY})*)\s*\]\]?")
_KEYLINE_RE = re.compile(rf"^\s*({_KEY}(?:\s*\.\s*{_KEY})*)\s*=\s*(.*)$")
_INLINE_KEY_RE = re.compile(rf"(?:^|[{{,])\s*({_KEY})\s*=")


def toml_text(raw: bytes, display: str) -> str:
    """`raw` as the TOML text it holds; `CaseFileError` (one line, with a hint) for anything
    tomllib would choke on or take for something else.

    A UTF-8 byte-order mark is dropped: TOML is UTF-8, and editors on Windows start UTF-8 files
    with one (line numbers are unchanged: it is not a line). UTF-16 and UTF-32 (by their mark,
    or by the zero bytes ASCII text has in them) are named as such rather than reported as a
    stray byte.
    """
    for bom, name in _OTHER_BOMS:
        if raw.startswith(bom):
            raise _wide(name, display)
    head = raw[:64]
    if len(head) >= 4 and b"\x00" in head:
        zeros = [head[i::4].count(0) for i in range(4)]
        if sum(zeros) >= len(head) * 3 // 4 - 4:  # 3 of every 4 bytes are zero
            raise _wide("UTF-32", display)
        if head[0::2].count(0) > len(head) // 4 or head[1::2].count(0) > len(head) // 4:
            raise _wide("UTF-16", display)
    raw = raw.removeprefix(UTF8_BOM)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise CaseFileError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x})", file=display,
                            line=line, hint="case files are UTF-8 TOML: save it as UTF-8"
                            ) from None
    _check_nesting(text, display)
    return text


def _wide(encoding: str, display: str) -> CaseFileError:
    return CaseFileError(f"is {encoding} text, not UTF-8", file=display,
                         hint="TOML files are UTF-8: save it as UTF-8 (in most editors: "
                         "\"Save with encoding\" → UTF-8)")


#: The longest key or table header read: a case file's are a few dozen characters, and TOML
#: parsers take time that grows faster than the length (a 120 kB header took 20 s).
MAX_KEY_CHARS = 1024


def _check_nesting(text: str, display: str) -> None:
    """Arrays and inline tables nested deeper than `MAX_NESTING` (tomllib parses them
    recursively: 600 levels end in a RecursionError), dotted keys or table headers of more
    than `MAX_NESTING` parts (a 60 kB ``description.a.a…`` made the parse quadratic: 22 GB)
    and keys longer than `MAX_KEY_CHARS`, reported at the line, before any parser runs."""
    depth = 0
    for no, raw in enumerate(text.splitlines(), start=1):
        bare = re.sub(r'"[^"]*"|\'[^\']*\'', "", raw).split("#", 1)[0]
        if depth == 0:
            _check_key(raw, bare, no, display)
        for ch in bare:
            if ch in "[{":
                depth += 1
                if depth > MAX_NESTING:
                    raise CaseFileError(f"arrays or inline tables nested more than "
                                        f"{MAX_NESTING} deep", file=display, line=no,
                                        hint="a case file needs a few levels at most: "
                                        "flatten it")
            elif ch in "]}":
                depth -= 1


def _check_key(raw: str, bare: str, no: int, display: str) -> None:
    """The key or header of one line: at most `MAX_NESTING` parts, `MAX_KEY_CHARS` long."""
    stripped = bare.lstrip()
    if stripped.startswith("["):
        key, raw_key = stripped.split("]", 1)[0], raw.lstrip().split("]", 1)[0]
    elif "=" in bare:
        key, raw_key = bare.split("=", 1)[0], raw.split("=", 1)[0]
    else:
        return
    if key.count(".") >= MAX_NESTING or len(raw_key) > MAX_KEY_CHARS:
        what = "table header" if stripped.startswith("[") else "key"
        raise CaseFileError(f"a {what} of {key.count('.') + 1} dotted parts and "
                            f"{len(raw_key.strip())} characters", file=display, line=no,
                            hint=f"a case file's keys have a few parts: at most {MAX_NESTING} "
                            f"parts and {MAX_KEY_CHARS} characters are read")


def _split_key(dotted: str) -> list[str]:
    parts = re.findall(_KEY, dotted)
    return [p[1:-1] if p[:1] in "\"'" else p for p in parts]


def locate_lines(text: str) -> dict[tuple[str, ...], int]:
    """Map key paths (``("targets_override", "cuda", "tolerance")``) to 1-based lines.

    Elements of arrays of tables get their index as a path element (``("inputs", "0")``).
    Keys inside an inline table get the line of that inline table.
    """
    lines: dict[tuple[str, ...], int] = {}
    counters: dict[tuple[str, ...], int] = {}
    current: tuple[str, ...] = ()
    depth = 0  # bracket depth of a multi-line value; key lines inside it are not keys
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0] if '"' not in raw and "'" not in raw else raw
        if depth == 0:
            m = _HEADER_RE.match(line)
            if m:
                path = _in_elements(tuple(_split_key(m.group(2))), counters)
                if m.group(1) == "[[":
                    idx = counters.get(path, 0)
                    counters[path] = idx + 1
                    current = (*path, str(idx))
                else:
                    current = path
                lines.setdefault(current, no)
                continue
            m = _KEYLINE_RE.match(line)
            if m:
                key = (*current, *_split_key(m.group(1)))
                lines.setdefault(key, no)
                value = m.group(2)
                if value.lstrip().startswith("{"):
                    for sub in _INLINE_KEY_RE.findall(value):
                        lines.setdefault((*key, *_split_key(sub)), no)
                depth += _bracket_delta(value)
                continue
        else:
            depth += _bracket_delta(line)
    return lines


def _in_elements(path: tuple[str, ...], counters: dict[tuple[str, ...], int]
                 ) -> tuple[str, ...]:
    """A table header inside the last element of an array of tables, with that element's
    index: ``[variants.budget]`` after a second ``[[variants]]`` is ``variants.1.budget``."""
    out: list[str] = []
    for key in path:
        out.append(key)
        prefix = tuple(out)
        if prefix in counters and prefix != path:
            out.append(str(counters[prefix] - 1))
    return tuple(out)


def _bracket_delta(s: str) -> int:
    s = re.sub(r'"[^"]*"|\'[^\']*\'', "", s).split("#", 1)[0]
    return s.count("[") + s.count("{") - s.count("]") - s.count("}")


#: tomllib's terse messages, and what to do about each (first match wins).
_TOML_HINTS: tuple[tuple[str, str, str], ...] = (
    ("Illegal character '\\n'", "unterminated string", "close the string on the same line"),
    ("Unterminated string", "unterminated string", "close the string"),
    ("Cannot overwrite a value", "a key is set twice", "keep one of them"),
    ("twice", "", "merge the two tables into one"),
    ("Invalid value", "", "strings need quotes, e.g. dtype = \"float32\""),
    ("Unclosed", "", "close it: ] ends an array, } an inline table"),
)


def syntax_error(msg: str, text: str, display: str) -> CaseFileError:
    """A one-line TOML syntax error at the line to fix (tomllib puts it in the message)."""
    line: int | None = None
    m = re.search(r"\(at line (\d+), column \d+\)", msg)
    if m:
        line = int(m.group(1))
    elif "(at end of document)" in msg:  # point at what was left open, else the last line
        line = _unclosed_line(text) or len(text.rstrip().splitlines()) or None
    msg = re.sub(r"\s*\(at (?:line \d+, column \d+|end of document)\)", "", msg)
    twice = re.match(r"Cannot declare \((.*)\) twice", msg)  # "('budget',)" -> "[budget]"
    if twice:
        keys = re.findall(r"'([^']*)'", twice.group(1))
        msg = f"table [{'.'.join(keys)}] declared twice"
    hint = "see https://toml.io for the syntax"
    for pattern, better, how in _TOML_HINTS:
        if pattern in msg:
            msg, hint = better or msg, how
            break
    return CaseFileError(f"TOML syntax error: {msg or 'invalid TOML'}", file=display,
                         line=line, hint=hint)


def too_many_digits(exc: ValueError, text: str, display: str) -> CaseFileError | None:
    """The one line for tomllib's `exc` when it is Python refusing to convert an integer of
    more digits than ``sys.get_int_max_str_digits()`` (4300): at the line of the first
    such run of digits. None for any other `exc`."""
    if "integer string conversion" not in str(exc):
        return None
    limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()  # 3.10.7 and later
    line = next((no for no, raw in enumerate(text.splitlines(), start=1)
                 if any(len(run.replace("_", "")) > limit
                        for run in re.findall(r"[0-9][0-9_]*", raw))), None)
    return CaseFileError(f"an integer of more than {limit} digits", file=display, line=line,
                         hint="no key of a case file takes a number that large: check it "
                         "for a typo")


def _unclosed_line(text: str) -> int | None:
    """Line where the bracket that is still open at the end of `text` was opened."""
    depth, opened = 0, None
    for no, raw in enumerate(text.splitlines(), start=1):
        before = depth
        depth += _bracket_delta(raw)
        if before <= 0 < depth:
            opened = no
    return opened if depth > 0 else None
