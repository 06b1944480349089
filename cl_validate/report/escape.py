"""Every escaper of text cl_validate did not write, for every place it is written.

A model's exception text, a kernel, op, module or output name, a case-file key or path, a name
in another tool's JUnit report: any of them can hold any character. Each output has its rules,
all of them here, so that a writer never makes up its own:

- a terminal or a CI log (`printable`, `one_line`): control characters, and the invisible
  characters that reorder or hide text, written visibly as ``\\x1b`` or ``\\u202e``;
- Markdown (`md_text`, `md_code`, `md_fenced`, and `md_trusted` for Markdown we wrote
  ourselves): the same characters visible, then everything that is Markdown or HTML syntax
  made literal — a ``|`` cannot split a table row, backticks cannot close a code span early,
  ``<img>`` shows as text, ``@name`` notifies nobody (it is put in a code span, where GitHub
  does not look for mentions), ``[text](url)``, ``**bold**`` and ``__init__`` stay as typed;
- Mermaid labels (`mermaid_text`): one line, syntax as Mermaid's entity codes;
- XML (`xml_safe`): what XML 1.0 cannot hold at all, visible;
- GitHub workflow commands (`escape_data`, `escape_property`): as GitHub's toolkit escapes.

What a reviewer reads stays readable: ordinary names, numbers and ``file:line`` are unchanged.
"""

from __future__ import annotations

import re
import unicodedata

# --------------------------------------------------------------------------------------------
# Terminals and logs
# --------------------------------------------------------------------------------------------
#: Characters never written raw: C0 controls but tab and newline, DEL, C1 controls, the line
#: and paragraph separators, the bidi controls (embeddings, overrides, isolates, and the
#: left-to-right, right-to-left and Arabic letter marks), zero-width characters, the
#: byte-order mark, lone surrogates (which no UTF-8 file can hold) and Unicode tags.
INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e"
                       "\u2060-\u206f\ufeff\ud800-\udfff\U000e0000-\U000e007f]")


def visible(ch: str) -> str:
    """One character as the escape a reader sees: ``\\x1b``, ``\\u202e``, ``\\U000e0041``."""
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def _visible(m: re.Match[str]) -> str:
    return visible(m.group())


def printable(text: str) -> str:
    """`text` with every `INVISIBLE` character written `visible`, newlines and tabs kept:
    what reaches a terminal or a CI log is what was written, visibly."""
    return INVISIBLE.sub(_visible, text)


_COMMAND_LINE = re.compile(r"^([ \t]*)::", re.MULTILINE)


def log_text(text: str) -> str:
    """`text` for a CI log line by line: `printable`, and a line that would start with ``::``
    (a GitHub workflow command: ``::error file=...``) has its first colon written ``\x3a``.
    For text that keeps its lines (a failure's body under pytest); one-line fields use
    `one_line`, whose escaped newlines start no line."""
    return _COMMAND_LINE.sub(lambda m: m.group(1) + "\\x3a:", printable(text))


def one_line(text: str) -> str:
    """`text` as one line: `printable`, with newlines and tabs escaped too (a line of a
    table or a one-line message must not become two)."""
    return printable(text).replace("\n", "\\n").replace("\t", "\\t")


# --------------------------------------------------------------------------------------------
# Markdown (GitHub's: CommonMark with GFM tables)
# --------------------------------------------------------------------------------------------
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
#: Always backslash-escaped: code spans, emphasis, strikethrough, table cells.
_BACKSLASHED = frozenset("`*~|")
#: What may follow the ``]`` that ends a link's or an image's text (inline, by reference, or
#: a reference's definition): such a ``]`` is escaped (whichever ``[`` it would close), any
#: other left alone, so ``resnet50[b8]`` stays as it is.
_LINK_FOLLOWS = frozenset("([:")
_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
#: ``@name`` or ``@org/team``, a mention where GitHub finds one: at the start of a text or
#: after a character that is not an ASCII word character (``user@example.com`` is none).
_MENTION = re.compile(r"@[A-Za-z0-9](?:[A-Za-z0-9_./-]*[A-Za-z0-9_-])?")
_WORD = re.compile(r"[A-Za-z0-9_]")
#: What a line may start with to become a heading, a list item, a thematic break or a setext
#: underline; the first character (of an ordered list marker: its ``.`` or ``)``) is escaped.
_BLOCK_START = re.compile(r"#|[-+=](?=[-+= ]|$)|\d{1,9}(?=[.)](?: |$))")
_SPACE = re.compile(r"[ \t\n]+")


def _one_line_visible(text: str) -> str:
    """`text` on one line, whitespace runs as one space, `INVISIBLE` characters visible."""
    return _SPACE.sub(" ", printable(text.replace("\r\n", "\n"))).strip()


def _intraword(text: str, i: int) -> bool:
    """Whether the ``_`` at `i` is between two letters or digits (it can neither open nor
    close emphasis there, so ``conv_1`` stays as it is)."""
    return 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()


def md_text(text: str) -> str:
    """`text` as literal Markdown text on one line, safe anywhere: in a paragraph, a list
    item, a heading, a table cell, at the start of a line.

    Control and invisible characters are written `visible`; ``&``, ``<``, ``>`` as entities;
    ``` ` * ~ | ```, a ``_`` that is not inside a word and a ``]`` that could end a link's
    text (one before ``(``, ``[`` or ``:``) with a backslash; a backslash itself doubled
    where it would otherwise escape what follows; ``@name`` in a code span; and what would
    start a block at the start of a line (``#``, ``- ``, ``1.``) escaped. (Text of ours
    right after it must not start with ``(``, ``[`` or ``:`` when it may end with ``]``.)
    """
    text = text.replace("\r\n", "\n")
    text = _SPACE.sub(" ", text).strip()
    pieces: list[str] = []
    literal_backslash: list[bool] = []
    spans: set[int] = set()  # the pieces that are mentions put in code spans
    i = 0
    while i < len(text):
        ch = text[i]
        mention = _MENTION.match(text, i) if ch == "@" else None
        after_span = len(pieces) - 1 in spans
        if mention is not None and i and _WORD.match(text[i - 1]) and not after_span:
            mention = None  # in a word: an address (after a span it would start a text)
        if mention is not None and after_span:  # one span: two would read as one "``"
            pieces[-1] = f"`{pieces[-1][1:-1]}{mention.group()}`"
            i = mention.end()
            continue
        if mention is not None:
            spans.add(len(pieces))
            piece, i = f"`{mention.group()}`", mention.end()
        else:
            i += 1
            if INVISIBLE.match(ch):
                piece = visible(ch)
            elif ch in _ENTITIES:
                piece = _ENTITIES[ch]
            elif (ch in _BACKSLASHED or (ch == "_" and not _intraword(text, i - 1))
                  or (ch == "]" and text[i:i + 1] in _LINK_FOLLOWS)):
                piece = "\\" + ch
            else:
                piece = ch
        pieces.append(piece)
        literal_backslash.append(piece == "\\")
    start = _BLOCK_START.match(text)
    if start is not None and pieces:
        at = start.end() if text[0].isdigit() else 0
        pieces[at] = "\\" + pieces[at]
    out: list[str] = []
    for k, piece in enumerate(pieces):
        if literal_backslash[k]:
            # before punctuation (an escape of ours, an entity, a code span) or at the end
            # (where our own text follows) a backslash would escape: make it literal
            after = pieces[k + 1][0] if k + 1 < len(pieces) else "\\"
            piece = "\\\\" if after in _PUNCTUATION else "\\"
        out.append(piece)
    return "".join(out)


def _longest_run(text: str, ch: str = "`") -> int:
    longest = run = 0
    for c in text:
        run = run + 1 if c == ch else 0
        longest = max(longest, run)
    return longest


def md_code(text: str, *, table: bool = True) -> str:
    """`text` as one inline code span that nothing in it can end early: on one line, control
    and invisible characters `visible`, fenced by one backtick more than its longest run of
    backticks (CommonMark), and padded when it starts or ends with one. In a table (`table`,
    the default) its pipes are escaped, as GFM splits rows before it reads code spans; out
    of one, pass ``table=False`` (the backslash would show). Empty text is no span."""
    text = _one_line_visible(text)
    if not text:
        return ""
    if table:
        text = text.replace("|", "\\|")
    fence = "`" * (_longest_run(text) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_fenced(text: str, lang: str = "") -> str:
    """`text` as a fenced code block, its lines kept: control and invisible characters
    `visible`, fenced by more backticks than any run in it (at least three)."""
    text = printable(text.replace("\r\n", "\n"))
    fence = "`" * max(3, _longest_run(text) + 1)
    return f"{fence}{lang}\n{text}\n{fence}"


def md_trusted(text: str) -> str:
    """Markdown cl_validate wrote itself (a docstring, a help text) as one table cell: one
    line, its pipes escaped, its markup kept. Never for text a model or a report chose."""
    return " ".join(printable(text).split()).replace("|", "\\|")


# --------------------------------------------------------------------------------------------
# Mermaid
# --------------------------------------------------------------------------------------------
#: Characters that end a quoted label or start Mermaid/HTML markup, as Mermaid entity codes
#: (``#34;`` renders as ``"``). ``#`` itself too, so that text like ``#1;`` stays literal.
#: A backslash gets a zero-width space after it: in a label with ``<br/>`` Mermaid turns a
#: literal ``\n`` into a line break even when the backslash came from an entity (measured).
_MERMAID_ENTITIES = {'"': "#34;", "#": "#35;", "%": "#37;", "&": "#38;", "<": "#60;",
                     ">": "#62;", "\\": "#92;#8203;", "`": "#96;"}
MERMAID_LABEL = 90


def mermaid_text(text: str, limit: int = MERMAID_LABEL) -> str:
    """`text` made safe inside a double-quoted Mermaid label: one line, no markup."""
    out: list[str] = []
    for ch in text[:limit] + ("…" if len(text) > limit else ""):
        if ch in _MERMAID_ENTITIES:
            out.append(_MERMAID_ENTITIES[ch])
        elif unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"):
            out.append(" ")  # newlines, tabs, bidi controls, lone surrogates: not in a label
        else:
            out.append(ch)
    return "".join(out)


# --------------------------------------------------------------------------------------------
# XML and GitHub workflow commands
# --------------------------------------------------------------------------------------------
#: Characters XML 1.0 cannot hold at all (most C0 controls, lone surrogates, U+FFFE/F): a
#: model's output in an error's tail may contain any byte.
_NOT_XML = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(text: str) -> str:
    """`text` with every character XML 1.0 forbids written `visible` (and the report stays
    well-formed whatever a model printed)."""
    return _NOT_XML.sub(_visible, text)


def escape_data(text: str) -> str:
    """A workflow command's message (after ``::``), as GitHub's toolkit escapes it:
    ``%``, CR and LF."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``file=``, ``title=`` …): `escape_data`, and
    ``:`` and ``,``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")
