"""The Markdown report: real results from tiny cases, and every chart rendered by real Mermaid.

A Mermaid syntax slip (an unescaped quote in a kernel name, a keyword as a node id) would
show up on GitHub as "Unable to render rich display" — exactly when a reviewer needs the
chart. So the charts are rendered with mermaid-cli and headless Chromium, installed by
``bash tools/setup-mermaid.sh`` into .mermaid/; without it the render tests skip and say so.
The escaping and collapsing tests run everywhere.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from cl_validate.checks.verdict import CaseResult
from cl_validate.measurements.kernel_list import Kernel, KernelList, Transform
from cl_validate.paths import MARKDOWN_MARKER
from cl_validate.report.markdown import (
    Gap,
    append_step_summary,
    collapse,
    failure_section,
    mermaid_chart,
    mermaid_text,
    render_markdown,
    write_markdown,
)
from cl_validate.session.in_process import judge_in_process
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions
from tests.conftest import tiny_case

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
SETUP = "tools/setup-mermaid.sh"


HOSTILE = ['say "hi"', "c[d]e", "f|g", "<b>bold</b>", "中文 é ✓ 🦀", "end", "x --> y",
           "%% comment", "a;b:c", "k{1}(2)", "back`tick", "#quot; #35; &amp;", "new\nline\ttab",
           "graph TD", "class k0 transform", "\\n", "click k0 call alert()", "\u202ertl",
           "<script>alert(1)</script>", "'single'"]


# --------------------------------------------------------------------------------------------
# Real results: the tiny conv-ReLU-conv model, one case over budget and one within it
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[CaseResult]:
    cases = tmp_path_factory.mktemp("md_cases")
    shutil.copy(DATA / "tiny_models.py", cases / "tiny_models.py")
    for name, transforms in (("over_budget", 1), ("on_budget", 2)):
        (cases / f"{name}.toml").write_text(tiny_case(transforms, kernels=4),
                                            encoding="utf-8")
    specs = [load_case(cases / f"{n}.toml") for n in ("over_budget", "on_budget")]
    return judge_in_process(specs, RunOptions(isolate=False))


def _failing(results: list[CaseResult]) -> CaseResult:
    (r,) = [r for r in results if not r]
    return r


def mermaid_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```mermaid\n(.*?)\n```$", markdown, flags=re.M | re.S)


@pytest.mark.compile
def test_the_tiny_run_fails_only_its_transform_budget(results):
    bad = _failing(results)
    assert bad.case.name == "over_budget"
    assert [c.check for c in bad.checks if c.status.bad] == ["layout_transforms"]
    assert bad.kernels is not None and len(bad.kernels.runtime_transforms) == 2


@pytest.mark.compile
def test_heading_and_table_per_target(results):
    md = render_markdown(results)
    head = md.splitlines()[0]
    assert head == "## cl_validate: ❌ 1 of 2 case × target runs failed"
    assert "### llvm" in md
    rows = {ln.split("|")[1].strip(): ln for ln in md.splitlines() if ln.startswith("| `")}
    assert set(rows) == {"`over_budget`", "`on_budget`"}
    assert "❌ 2 / 1" in rows["`over_budget`"] and "✅ 4 / 4" in rows["`over_budget`"]
    assert "✅ 2 / 2" in rows["`on_budget`"]
    assert re.search(r"✅ \d\.\de-\d\d", rows["`on_budget`"])  # numerics max abs error
    table = md.split("## What the runtime transforms are there for", 1)[0]  # not the ledger
    widths = {ln.count(" | ") for ln in table.splitlines() if ln.startswith("| ")}
    assert len(widths) == 1  # header, and every row, have the same number of cells


@pytest.mark.compile
def test_failure_section_says_why(results):
    md = render_markdown(results)
    why = md.split("## Why it failed", 1)[1]
    assert "on_budget" not in why  # passing cases get no section
    assert "`layout_transforms 2 > budget 1 (llvm)" in why
    case_file = Path(_failing(results).case.path).read_text().splitlines()
    line = int(re.search(r"over_budget\.toml:(\d+)`", why).group(1))
    assert case_file[line - 1].strip() == "layout_transforms = 1"
    stages = re.search(r"after each stage.*: `(.*)`", why).group(1)
    assert stages.startswith("import 0 → normalize_axes 0 → raise_attention 0 → unfold_filters 0 → "
                             "convert_layout")
    assert stages.endswith("2")
    (chart,) = mermaid_blocks(why)
    assert chart.startswith("flowchart TD")
    assert re.search(r"^  class k0,k3 transform$", chart, re.M)  # the two boundary transposes
    assert "<details>" in why and ">>   0  transpose" in why


@pytest.mark.compile
def test_hostile_messages_cannot_break_the_markdown(results):
    bad = _failing(results)
    evil = "a `code` | pipe <img src=x> ```fence``` \n# heading"
    checks = [replace(c, message=evil) if c.status.bad else c for c in bad.checks]
    section = failure_section(replace(bad, checks=checks))
    (item,) = [ln for ln in section.splitlines() if ln.startswith("- ")]
    # A code span fenced by more backticks than the message's longest run (3) holds it whole
    span = re.search(r"\*\*: (`+)(.*)\1 at `", item)
    assert span and span.group(1) == "````"
    assert span.group(2) == " ".join(evil.split())
    assert "\n# heading" not in section


# --------------------------------------------------------------------------------------------
# Escaping and collapsing (no renderer needed)
# --------------------------------------------------------------------------------------------
def _decode(label: str) -> str:
    """What Mermaid shows for `label`, less the zero-width space kept after a backslash."""
    return re.sub(r"#(\d+);", lambda m: chr(int(m.group(1))), label).replace("\u200b", "")


@pytest.mark.parametrize("name", HOSTILE)
def test_mermaid_text_escapes_everything_that_is_syntax(name):
    out = mermaid_text(name)
    for ch in '"`<>\\%\n\t\r\u202e':
        assert ch not in out
    assert _decode(out) == "".join(" " if ch in "\n\t\u202e" else ch for ch in name)


def _kernels(n: int, transforms_at: set[int], names: list[str] | None = None) -> KernelList:
    ks = []
    for i in range(n):
        name = names[i] if names else f"fused_conv2d_add{i}"
        ts = (Transform("permute_dims", i, name, i % 2 == 1, (1, 3, 8, 8), (0, 2, 3, 1)),) \
            if i in transforms_at else ()
        ks.append(Kernel(i, name, (name,), ts, (1, 8, 8, 3)))
    return KernelList(ks)


_NODE = re.compile(r'^  (k\d+\["[^"]*"\]|[gm]\w*\(\["[^"]*"\]\))$')
_EDGE = re.compile(r"^  \w+ --> \w+$")
_STYLE = re.compile(r"^  (classDef \w+ [\w:#,. -]+|class [\w,]+ \w+)$")


def assert_chart_grammar(chart: str) -> None:
    """The subset of Mermaid flowchart syntax the charts use, line by line."""
    lines = chart.splitlines()
    assert lines[0] == "flowchart TD"
    for line in lines[1:]:
        assert _NODE.match(line) or _EDGE.match(line) or _STYLE.match(line), line


def test_chart_of_hostile_names_keeps_to_the_grammar():
    chart = mermaid_chart(_kernels(len(HOSTILE), {0, 3, 6}, HOSTILE), min_run=100)
    assert_chart_grammar(chart)
    assert chart.count("-->") == len(HOSTILE) - 1
    assert "class k0,k6 transform" in chart and "class k3 weight" in chart


def test_collapse_keeps_transforms_neighbours_and_ends():
    ks = _kernels(60, {0, 30, 59})
    assert collapse(list(ks)) == [0, 1, Gap(2, 28), 29, 30, 31, Gap(32, 57), 58, 59]


def test_collapse_draws_short_runs_as_they_are():
    ks = list(_kernels(12, {4}))  # keeps 0, 3-5, 11: runs 1-2 (2 long) and 6-10 (5 long)
    assert collapse(ks, min_run=3) == [0, 1, 2, 3, 4, 5, Gap(6, 10), 11]
    assert collapse(ks, min_run=5) == list(range(12))


def test_a_resnet50_sized_chain_stays_small():
    chart = mermaid_chart(_kernels(170, {0, 169}))
    assert_chart_grammar(chart)
    nodes = [ln for ln in chart.splitlines() if _NODE.match(ln)]
    assert len(nodes) == 5
    assert "… 166 kernels (#35;2–#35;167) …" in chart


def test_a_kernel_with_many_transforms_keeps_a_short_label():
    t = Transform("permute_dims", 0, "transpose", False, (1, 3, 8, 8), (0, 2, 3, 1))
    chart = mermaid_chart([Kernel(0, "fused_transposes", ("transpose",) * 5, (t,) * 5)])
    assert_chart_grammar(chart)
    assert chart.count("permute_dims") == 3 and "+ 2 more transforms" in chart


def test_many_transforms_are_cut_to_max_nodes():
    chart = mermaid_chart(_kernels(300, set(range(0, 300, 3))), max_nodes=40)
    assert_chart_grammar(chart)
    nodes = [ln for ln in chart.splitlines() if _NODE.match(ln)]
    assert len(nodes) == 40
    assert re.search(r'more\(\["… 261 more kernels, 87 with transforms', chart)
    assert len(chart) < 50_000  # Mermaid's default maxTextSize


# --------------------------------------------------------------------------------------------
# Files and the GitHub job summary
# --------------------------------------------------------------------------------------------
@pytest.mark.compile
def test_write_markdown_replaces_atomically(results, tmp_path):
    target = tmp_path / "reports" / "r.md"
    write_markdown(results[:1], target)
    first = target.read_text(encoding="utf-8")
    write_markdown(results, target)
    # the marker line first: how the next run knows the file is a report it may replace
    assert target.read_text(encoding="utf-8") == (f"{MARKDOWN_MARKER}\n"
                                                  f"{render_markdown(results)}") != first
    assert [p.name for p in target.parent.iterdir()] == ["r.md"]  # no temp file left behind


@pytest.mark.compile
def test_step_summary_appends_only_under_actions(results, tmp_path):
    summary = tmp_path / "summary.md"
    assert append_step_summary(results, env={}) is None
    summary.write_text("## an earlier step\n", encoding="utf-8")
    assert append_step_summary(results, env={"GITHUB_STEP_SUMMARY": str(summary)}) == summary
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("## an earlier step\n\n## cl_validate: ❌")
    assert text.count("```mermaid") == 1


@pytest.mark.compile
def test_size_limit_drops_sections_not_tables(results):
    md = render_markdown(results, max_bytes=1500)
    assert "| `over_budget` |" in md and "```mermaid" not in md
    assert "1 more failing case × target runs left out" in md
    assert len(md.encode()) <= 1500


# --------------------------------------------------------------------------------------------
# Rendering with the real Mermaid
# --------------------------------------------------------------------------------------------
def _mmdc(tmp: Path) -> list[str] | None:
    wrapper = ROOT / ".mermaid" / "mmdc"
    if wrapper.is_file() and os.access(wrapper, os.X_OK):
        return [str(wrapper)]
    mmdc = shutil.which("mmdc")
    if mmdc is None:
        return None
    config: dict[str, object] = {"args": ["--no-sandbox", "--disable-gpu"]}
    for browser in (os.environ.get("PUPPETEER_EXECUTABLE_PATH"), "chromium", "chromium-browser"):
        if browser and shutil.which(browser):
            config["executablePath"] = shutil.which(browser)
            break
    (tmp / "puppeteer.json").write_text(json.dumps(config), encoding="utf-8")
    return [mmdc, "-p", str(tmp / "puppeteer.json")]


def _svg_text(svg: str) -> str:
    text = html.unescape(re.sub(r"<[^>]+>", " ", svg)).replace("\u200b", "")
    return " ".join(text.split())


@pytest.fixture(scope="module")
def rendered(results, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every chart rendered in one mermaid-cli run: the report's own (found in the Markdown
    by mmdc, as GitHub finds them), a chart of hostile names and a collapsed long chain."""
    tmp = tmp_path_factory.mktemp("mermaid")
    cmd = _mmdc(tmp)
    if cmd is None:
        pytest.skip(f"Mermaid renderer not installed: run `bash {SETUP}` (mermaid-cli and "
                    "headless Chromium into .mermaid/) to render the charts")
    report = render_markdown(results)
    extra = {"hostile": mermaid_chart(_kernels(len(HOSTILE), {0, 3, 6}, HOSTILE), min_run=100),
             "long": mermaid_chart(_kernels(170, {0, 80, 169}))}
    doc = report + "".join(f"\n```mermaid\n{c}\n```\n" for c in extra.values())
    (tmp / "in.md").write_text(doc, encoding="utf-8")
    (tmp / "out").mkdir()
    proc = subprocess.run([*cmd, "-q", "-i", str(tmp / "in.md"), "-o", str(tmp / "out/r.md")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"mermaid-cli failed:\n{proc.stdout}\n{proc.stderr}"[-4000:]
    names = ["report", *extra]
    assert len(mermaid_blocks(doc)) == len(names)
    svgs = {}
    for i, name in enumerate(names, 1):
        svgs[name] = (tmp / "out" / f"r-{i}.svg").read_text(encoding="utf-8")
    assert not (tmp / "out" / f"r-{len(names) + 1}.svg").exists()
    return svgs


@pytest.mark.compile
def test_report_chart_renders_with_transforms_highlighted(rendered):
    svg = rendered["report"]
    text = _svg_text(svg)
    assert "#0 transpose" in text and "#3 transpose1" in text
    assert "fused_conv2d_add_relu" in text
    assert "permute_dims[0, 2, 3, 1] of [1, 3, 16, 16] (runtime transform" in text
    assert len(re.findall(r'class="node (?:default )?transform"', svg)) == 2
    assert "#ffd7d5" in svg  # the transform fill made it into the SVG's styles


@pytest.mark.compile
@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_render_verbatim(rendered, name):
    shown = " ".join("".join(" " if ch in "\n\t\u202e" else ch for ch in name).split())
    assert shown in _svg_text(rendered["hostile"])


@pytest.mark.compile
def test_hostile_names_inject_no_markup(rendered):
    svg = rendered["hostile"]
    assert "<script" not in svg and "<b>bold" not in svg
    assert len(re.findall(r'class="node (?:default )?(?:transform|weight)', svg)) == 3


@pytest.mark.compile
def test_long_chain_renders_collapsed(rendered):
    text = _svg_text(rendered["long"])
    assert "… 78 kernels (#1–#78) …" not in text  # neighbours of #0 and #80 stay drawn
    assert "… 77 kernels (#2–#78) …" in text and "… 86 kernels (#82–#167) …" in text


def test_setup_script_is_where_the_skip_message_says():
    script = ROOT / SETUP
    assert script.is_file()
    text = script.read_text(encoding="utf-8")
    assert "PUPPETEER_SKIP_DOWNLOAD=1" in text and "--no-sandbox" in text
    assert text.startswith("#!/usr/bin/env bash")
