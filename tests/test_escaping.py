"""Text a model, a case file or another tool's report can influence reaches every Markdown
cl_validate writes inert (issue #36, items 10 and 11): the ``run --markdown`` report and its
job summary, ``diff``'s tables, ``merge``'s summary, ``trend``'s headings.

Inert means: no control or bidi character arrives raw (a NUL, a bell, an OSC-8 hyperlink or a
line erase, U+202E), a ``|`` cannot split a table row, backticks cannot end a code span early,
``<img>`` and other HTML show as text, ``@name`` notifies nobody (it is in a code span) and
``[text](url)``, ``**bold**`` and ``__init__`` stay literal. Each probe goes through the real
writer; the Markdown is read both by the rules GitHub's parser follows (the table row split
on unescaped pipes, CommonMark code spans) and, where installed, by markdown-it-py.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cl_validate.checks.verdict import CaseResult, CheckResult, Status
from cl_validate.errors import ExitCode
from cl_validate.measurements.attribution import Attribution, Reason
from cl_validate.measurements.bisection import Bisection, StageResult
from cl_validate.measurements.kernel_list import Kernel, KernelList, StageCount, Transform
from cl_validate.report.escape import md_code, md_fenced, md_text, printable
from cl_validate.report.markdown import append_step_summary, render_markdown
from cl_validate.report.merge import merge, summary
from cl_validate.spec import load_case
from tests.conftest import run_cli, tiny_case

#: What must never arrive raw: C0 controls but tab and newline, DEL, C1 controls, the line
#: and paragraph separators, bidi embeddings, overrides, isolates and marks, zero-width
#: characters and the byte-order mark.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e"
                 "\u2060-\u2069\ufeff]")

#: Everything at once: NUL, BEL, an OSC-8 hyperlink, a line erase, bidi controls, a C1 CSI,
#: Markdown and HTML a reviewer must see as text, and a carriage return (where a one-line
#: message ends).
EVIL = ("nul\x00 bel\x07 \x1b]8;;https://evil.example/\x07click\x1b]8;;\x07 erase\x1b[2K"
        " \u202eexe.txt \u2066iso\u2069 \u200flrm \u061calm \x9b31mcsi a|b c\\|d "
        "<img src=x onerror=alert(1)> @alice `tick` ```fence``` **bold** __init__ "
        "[click](https://evil.example/) &amp; cr\r trailing\\")
#: What XML 1.0 can carry of it (a JUnit report cannot hold C0 controls at all).
EVIL_XML = "".join(ch for ch in EVIL if ch >= " " or ch in "\t\n")


# --------------------------------------------------------------------------------------------
# Reading Markdown as GitHub does
# --------------------------------------------------------------------------------------------
_FENCE = re.compile(r"^(`{3,})[^\n]*\n.*?^\1`*$", re.M | re.S)


def outside_code(md: str) -> str:
    """`md` less its fenced code blocks and inline code spans (CommonMark: a run of N
    backticks opens a span that the next run of exactly N backticks closes)."""
    md = _FENCE.sub("", md)
    out: list[str] = []
    i = 0
    while i < len(md):
        if md[i] == "\\" and i + 1 < len(md):
            out.append(md[i:i + 2])
            i += 2
            continue
        if md[i] != "`":
            out.append(md[i])
            i += 1
            continue
        n = len(md[i:]) - len(md[i:].lstrip("`"))
        close = re.compile(rf"(?<!`)`{{{n}}}(?!`)").search(md, i + n)
        if close is None:  # no closer: the backticks are literal
            out.append(md[i:i + n])
            i += n
        else:
            i = close.end()
    return "".join(out)


def cells(row: str) -> list[str]:
    """A table row's cells as GFM splits them: on pipes no backslash escapes."""
    inner = row.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return re.split(r"(?<!\\)\|", inner)


def tables(md: str) -> list[list[str]]:
    """Every table: its header, delimiter and body rows (consecutive lines starting '|')."""
    found: list[list[str]] = []
    block: list[str] = []
    for line in [*md.splitlines(), ""]:
        if line.startswith("|"):
            block.append(line)
        elif block:
            found.append(block)
            block = []
    return found


def assert_rows_keep_their_cells(md: str) -> None:
    found = tables(md)
    assert found, md
    for rows in found:
        width = len(cells(rows[0]))
        for row in rows:
            assert len(cells(row)) == width, f"{row!r} is not {width} cells"


def assert_inert(md: str) -> None:
    """What a reviewer's page would show of `md` is text: see the module docstring."""
    raw = RAW.search(md)
    assert raw is None, f"raw {raw.group()!r} at {md[raw.start() - 40:raw.end() + 40]!r}"
    text = outside_code(md)
    assert "<img" not in text.lower(), text
    assert not re.search(r"(?<![\w`])@alice", text), text  # only inside code spans
    assert not re.search(r"(?<!\\)\]\(", text), text  # no link: every "](" escaped
    assert "**bold**" not in text, text
    html = rendered(md)
    if html is not None:
        assert "<img" not in html and "<a " not in html, html
        assert "<strong>bold</strong>" not in html and "<strong>init</strong>" not in html
        assert "<del>" not in html
        outside = re.sub(r"<code[^>]*>.*?</code>", "", html, flags=re.S)
        assert not re.search(r"(?<![\w`])@alice", outside), html


def rendered(md: str) -> str | None:
    """`md` as HTML by markdown-it-py (CommonMark with GFM tables; raw HTML passes), with
    every table's rows checked to have their header's number of cells."""
    try:
        from markdown_it import MarkdownIt
    except ImportError:  # an oracle where it is installed (import-linter brings it)
        return None
    parser = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    width: int | None = None
    count = 0
    for tok in parser.parse(md):
        if tok.type == "tr_open":
            count = 0
        elif tok.type in ("th_open", "td_open"):
            count += 1
        elif tok.type == "tr_close":
            width = count if width is None else width
            assert count == width, md
        elif tok.type == "table_close":
            width = None
    return str(parser.render(md))


# --------------------------------------------------------------------------------------------
# The escaper's rules
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["resnet50", "resnet50_b8", "cl_validate.llvm", "conv_1",
                                  "layer1.0.conv1 (conv2d)", "2 → 3", "1.2 MB", "3.1e-02",
                                  "max abs 3.1e-02", "中文 é ✓ 🦀", "a-b+c=d", "x, y (z)",
                                  "user@example.com", "50% done"])
def test_ordinary_text_is_left_as_it_is(name: str) -> None:
    assert md_text(name) == name
    assert md_code(name) == f"`{name}`"


def test_text_escapes_controls_visibly_and_markup_literally() -> None:
    assert md_text("a\x00b\x07c\x1b[2Kd\u202ee\u200ff\x9bg") == \
        "a\\x00b\\x07c\\x1b[2Kd\\u202ee\\u200ff\\x9bg"
    assert md_text("<img src=x> a&b") == "&lt;img src=x&gt; a&amp;b"
    assert md_text("a|b") == "a\\|b"
    assert md_text("c\\|d") == "c\\\\\\|d"  # a backslash cannot escape the pipe's escape
    assert md_text("ends with \\") == "ends with \\\\"
    assert md_text("C:\\temp\\x") == "C:\\temp\\x"  # a backslash before a letter is literal
    assert md_text("hi @alice and @org/team.") == "hi `@alice` and `@org/team`."
    assert md_text("@a@b x@y") == "`@a@b` x@y"  # after a span, @b would start a text
    assert md_text("**b** __init__ ~s~ `c` [l](u)") == \
        "\\*\\*b\\*\\* \\_\\_init\\_\\_ \\~s\\~ \\`c\\` [l\\](u)"
    assert md_text("resnet50[b8] [1, 3]") == "resnet50[b8] [1, 3]"
    assert md_text("![i](u) [r][x] [d]: u") == "![i\\](u) [r\\][x] [d\\]: u"
    assert md_text("# not a heading") == "\\# not a heading"
    assert md_text("- not a list") == "\\- not a list"
    assert md_text("1. not a list") == "1\\. not a list"
    assert md_text("two\nlines\tand  spaces ") == "two lines and spaces"


def test_code_spans_hold_any_backticks_and_pipes_only_in_tables() -> None:
    assert md_code("a`b") == "``a`b``"
    assert md_code("`a``") == "``` `a`` ```"
    assert md_code("a|b") == "`a\\|b`"
    assert md_code("a|b", table=False) == "`a|b`"
    assert md_code("esc\x1b[31m \u202e") == "`esc\\x1b[31m \\u202e`"
    assert md_fenced("x\n```\n\x07", "text") == "````text\nx\n```\n\\x07\n````"
    assert printable("a\u200db\ufeff") == "a\\u200db\\ufeff"


# --------------------------------------------------------------------------------------------
# run --markdown and the job summary
# --------------------------------------------------------------------------------------------
def _hostile_result(tmp_path: Path) -> CaseResult:
    """A failing case × target whose every model-influenced text is `EVIL`: the failure
    message, kernel and op names, the transform's module, a stage and the bisection's notes."""
    (tmp_path / "evil.toml").write_text(tiny_case(1))
    spec = load_case(tmp_path / "evil.toml")
    attribution = Attribution(Reason.NO_LAYOUT_RULE, relax_op=EVIL, source=EVIL)
    transform = Transform("permute_dims", 0, EVIL, False, (1, 3, 16, 16), (0, 2, 3, 1),
                          attribution, 3072, 3072)
    kernels = KernelList([Kernel(0, EVIL, (EVIL,), (transform,), (1, 16, 16, 3), 3072, 3072),
                          Kernel(1, "fused_conv2d", ("conv2d",), (), (1, 16, 16, 8))])
    checks = [CheckResult("layout_transforms", Status.FAILED, EVIL, "OverBudget", 12),
              CheckResult("numerics", Status.ERROR, EVIL, "RuntimeError")]
    bisection = Bisection("llvm", EVIL, (StageResult("import"), StageResult(EVIL, note=EVIL)),
                          stopped=EVIL)
    return CaseResult(spec, "llvm", checks, 1.0, kernels,
                      [StageCount("import", 0, 0), StageCount(EVIL, 1, 0)],
                      bisection=bisection)


def test_the_markdown_report_shows_model_text_inert(tmp_path: Path) -> None:
    md = render_markdown([_hostile_result(tmp_path)])
    assert "## Why it failed" in md and "blocker ledger" in md
    assert_inert(md)
    assert_rows_keep_their_cells(md)
    # shown, escaped: the reviewer still reads what the model said
    assert "\\x1b]8;;https://evil.example/\\x07click" in md and "\\u202eexe.txt" in md


def test_the_job_summary_shows_model_text_inert(tmp_path: Path) -> None:
    summary_file = tmp_path / "summary.md"
    append_step_summary([_hostile_result(tmp_path)], {"GITHUB_STEP_SUMMARY": str(summary_file)})
    md = summary_file.read_text(encoding="utf-8")
    assert_inert(md)
    assert_rows_keep_their_cells(md)


def _model(tmp_path: Path) -> Path:
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "evil_model.py").write_text(f"def raises():\n    raise RuntimeError({EVIL!r})\n")
    (cases / "evil.toml").write_text(tiny_case(model="evil_model:raises"))
    return cases


@pytest.mark.compile
def test_a_models_exception_reaches_run_markdown_and_the_summary_inert(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real run: the factory raises `EVIL`; the report file and the job summary the
    run writes show it as text."""
    cases = _model(tmp_path)
    summary_file = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_file))
    r = run_cli(["run", str(cases), "-j", "1", "--markdown", str(tmp_path / "r.md")])
    assert r.code == ExitCode.USAGE_ERROR, r.out + r.err  # its only case is unusable
    for md in ((tmp_path / "r.md").read_text(encoding="utf-8"),
               summary_file.read_text(encoding="utf-8")):
        assert "RuntimeError" in md and "\\u202eexe.txt" in md, md
        assert_inert(md)
        assert_rows_keep_their_cells(md)


# --------------------------------------------------------------------------------------------
# diff, merge and trend of another tool's (or a hostile pull request's) JUnit report
# --------------------------------------------------------------------------------------------
HOSTILE_CASE = f"case|`x` {EVIL_XML}"
HOSTILE_SUITE = "cl_validate.x|<img>@alice\u202e](http:evil.example)"  # no '/': not nested
HOSTILE_CHECK = "lay|out<img src=z>@alice\u202e"


def _report(path: Path, *, transforms: int, failed: bool) -> Path:
    """A JUnit report as cl_validate writes them, every name in it hostile."""
    root = ET.Element("testsuites", name="cl_validate")
    suite = ET.SubElement(root, "testsuite", name=HOSTILE_SUITE)
    tc = ET.SubElement(suite, "testcase", name="layout_transforms[llvm]",
                       classname=HOSTILE_CASE, file=f"cases/{EVIL_XML}.toml", line="12")
    props = ET.SubElement(tc, "properties")
    ET.SubElement(props, "property", name="layout_transforms", value=str(transforms))
    for _ in range(transforms):
        ET.SubElement(props, "property", name="transform", value=EVIL_XML)
    other = ET.SubElement(suite, "testcase", name=f"{HOSTILE_CHECK}[llvm]",
                          classname=HOSTILE_CASE, file=f"cases/{EVIL_XML}.toml")
    if failed:
        ET.SubElement(other, "failure", message=EVIL_XML, type=EVIL_XML).text = EVIL_XML
    gone = ET.SubElement(suite, "testcase", name="layout_transforms[llvm]",
                         classname=f"gone|{EVIL_XML}" if not failed else "kept")
    ET.SubElement(gone, "properties")
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
    return path


@pytest.fixture
def reports(tmp_path: Path) -> tuple[Path, Path]:
    return (_report(tmp_path / "base.xml", transforms=0, failed=False),
            _report(tmp_path / "head.xml", transforms=1, failed=True))


def test_diff_tables_of_a_hostile_head_report_keep_their_rows(
        reports: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base, head = reports
    summary_file = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_file))
    r = run_cli(["diff", str(base), str(head), "--markdown", str(tmp_path / "c.md")])
    assert r.code == ExitCode.OK, r.out + r.err
    comment = (tmp_path / "c.md").read_text(encoding="utf-8")
    for md in (comment, summary_file.read_text(encoding="utf-8"), r.out):
        rows = [ln for ln in md.splitlines() if ln.startswith("| ")]
        assert len(rows) == 2 + 3, md  # header, delimiter; changed, new and gone runs
        assert_rows_keep_their_cells(md)
        assert_inert(md)
    assert "lay\\|out&lt;img src=z&gt;`@alice`\\u202e: passed → **failed**" in comment


def test_merge_summary_of_a_hostile_report_keeps_its_rows(
        reports: tuple[Path, Path], tmp_path: Path) -> None:
    _, head = reports
    md = summary(merge([str(head)]), "out.xml")
    assert_rows_keep_their_cells(md)
    assert_inert(md)
    r = run_cli(["merge", str(head), "-o", str(tmp_path / "merged.xml")])
    assert r.code == ExitCode.OK, r.err
    assert_rows_keep_their_cells(r.out)
    assert_inert(r.out.split("\nmerged ")[0])


def test_trend_headings_of_a_hostile_report_link_nothing(
        reports: tuple[Path, Path], tmp_path: Path) -> None:
    base, head = reports
    r = run_cli(["trend", str(base), str(head)])
    assert r.code == ExitCode.OK, r.out + r.err
    assert "```mermaid" in r.out
    assert_inert(r.out)


def test_the_escaper_is_the_one_every_writer_imports() -> None:
    """One place escapes: every Markdown writer takes its escaping from
    `cl_validate.report.escape`, and no other module keeps a character class of controls or
    a pipe escape of its own."""
    report = Path(__file__).resolve().parents[1] / "cl_validate" / "report"
    for name in ("markdown", "delta", "merge", "trend", "reference", "console", "junit",
                 "annotations"):
        assert "from cl_validate.report.escape import" in (report / f"{name}.py").read_text()
    for path in report.glob("*.py"):
        if path.name != "escape.py":
            text = path.read_text(encoding="utf-8")
            assert "\\x00-" not in text and '"|", "\\\\|"' not in text, path.name
