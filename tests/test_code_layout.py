"""docs/explanation/code-layout.md cannot drift from the code (issue #38, item 4).

The page names every module of the package, one table row each, under the heading of its
layer; its layer list is the import contract's (`[tool.importlinter]` in pyproject.toml,
the `data-path` layers), its layer headings come in that order, and the layers it marks
*light* are the `light` contract's. Every dotted `cl_validate.…` name on the page is a module:
a function or a class is not named as one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cl_validate.spec.lines import tomllib

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "explanation" / "code-layout.md"
PACKAGE = ROOT / "cl_validate"
#: written by setuptools-scm when the package is built; a fresh checkout has none
GENERATED = {"cl_validate._version"}
OUTSIDE = "Outside the layers"


def package_modules(root: Path = PACKAGE) -> set[str]:
    """Every module and package under `root`, dotted (``__init__`` names its package)."""
    out = set()
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}


def contract_layers() -> list[tuple[str, ...]]:
    return [tuple(m.strip() for m in layer.split("|"))
            for layer in contracts()["data-path"]["layers"]]


def section(text: str, heading: str) -> str:
    """The text under ``## heading``, up to the next ``## ``."""
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"{PAGE.name} has no '## {heading}' section"
    return m.group(1)


def page_layers(text: str) -> list[tuple[str, ...]]:
    """The layer list: the first ```text block of '## Layers', one layer a line."""
    m = re.search(r"^```text\n(.*?)^```", section(text, "Layers"), re.S | re.M)
    assert m, "'## Layers' has no ```text block"
    return [tuple(m.strip() for m in line.split("|"))
            for line in m.group(1).splitlines() if line.strip()]


class Heading:
    def __init__(self, line: str) -> None:
        self.title = line.removeprefix("### ").strip()
        self.modules = tuple(re.findall(r"`(cl_validate[\w.]*)`", self.title))
        self.light = self.title.endswith("(light)")
        self.rows: list[str] = []


def page_sections(text: str) -> list[Heading]:
    """The '## Modules' section's ``###`` headings, each with the modules of its table."""
    headings: list[Heading] = []
    for line in section(text, "Modules").splitlines():
        if line.startswith("### "):
            headings.append(Heading(line))
        elif m := re.match(r"\| `(cl_validate[\w.]*)` \|", line):
            assert headings, f"{m.group(1)} is listed before any layer heading"
            headings[-1].rows.append(m.group(1))
    return headings


def layer_of(module: str, layers: list[tuple[str, ...]]) -> int | None:
    """The index of the layer holding `module` (by its top-level name), None outside them."""
    for i, layer in enumerate(layers):
        if any(module == m or module.startswith(m + ".") for m in layer):
            return i
    return None


def problems(text: str) -> list[str]:
    """Every way `text` (the page) disagrees with the code and the contracts."""
    out: list[str] = []
    layers = contract_layers()
    sections = page_sections(text)
    rows = [m for h in sections for m in h.rows]
    modules = package_modules() | GENERATED
    if duplicates := sorted({m for m in rows if rows.count(m) > 1}):
        out.append(f"named twice: {duplicates}")
    if missing := sorted(modules - set(rows)):
        out.append(f"modules missing from the page: {missing}")
    if unknown := sorted(set(rows) - modules):
        out.append(f"the page names modules that do not exist: {unknown}")
    if page_layers(text) != layers:
        out.append("the layer list is not the data-path contract's in pyproject.toml")
    titles = [h.title for h in sections]
    if not titles or titles[-1] != OUTSIDE or \
            [set(h.modules) for h in sections[:-1]] != [set(layer) for layer in layers]:
        out.append(f"the layer headings are not the contract's layers top to bottom, then "
                   f"'{OUTSIDE}'")
    for i, h in enumerate(sections):
        for module in h.rows:
            want = layer_of(module, layers)
            if want != (None if h.title == OUTSIDE else i):
                out.append(f"{module} is under '{h.title}', but the contract puts it in "
                           f"{'no layer' if want is None else ' | '.join(layers[want])}")
    light = {m for h in sections if h.light for m in h.modules}
    if light != set(contracts()["light"]["source_modules"]):
        out.append("the layers marked (light) are not the light contract's source modules")
    named = set(re.findall(r"`(cl_validate(?:\.\w+)*)`", text))
    if not_modules := sorted(named - modules):
        out.append(f"named as modules but not modules: {not_modules}")
    return out


TEXT = PAGE.read_text(encoding="utf-8")


def test_the_page_matches_the_code_and_the_contracts():
    assert problems(TEXT) == [], f"{PAGE.relative_to(ROOT)} is out of date"


def test_every_top_level_module_is_in_a_layer():
    """A new top-level module or package must be placed in the data-path contract: else no
    layer rule holds it (and the page could not say where it is)."""
    layers = contract_layers()
    top = {m for m in package_modules() if m.count(".") == 1} - GENERATED
    assert [m for m in sorted(top) if layer_of(m, layers) is None] == []


# --------------------------------------------------------------------------------------------
# each rule fails on a page that breaks it
# --------------------------------------------------------------------------------------------
SHARD = "| `cl_validate.suite.shard` | the selected cases split into N shards for parallel CI " \
    "jobs (`--shard I/N`) |\n"
SINK = "| `cl_validate.compile.passes.layout_agnostic` | **SinkPermutes**: carry the " \
    "converted layout through layout-agnostic ops |\n"
SPEC_HEAD = "| `cl_validate.spec` | case files in, validated `CaseSpec`s out |\n"


def _once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


BROKEN = {
    "a module left out": (lambda t: _once(t, SHARD, ""),
                          "modules missing from the page: ['cl_validate.suite.shard']"),
    "a module that does not exist": (
        lambda t: _once(t, SHARD, SHARD + "| `cl_validate.suite.gone` | x |\n"),
        "the page names modules that do not exist: ['cl_validate.suite.gone']"),
    "a module named twice": (lambda t: _once(t, SHARD, SHARD + SHARD),
                             "named twice: ['cl_validate.suite.shard']"),
    "a function named as a module": (
        lambda t: _once(t, "| `run_suite`: every", "| `cl_validate.suite.driver.run_suite`: every"),
        "named as modules but not modules: ['cl_validate.suite.driver.run_suite']"),
    "two layers swapped": (
        lambda t: _once(t, "cl_validate.ir\ncl_validate.measurements\n",
                        "cl_validate.measurements\ncl_validate.ir\n"),
        "the layer list is not the data-path contract's"),
    "a module under another layer": (
        lambda t: _once(_once(t, SINK, ""), SPEC_HEAD, SPEC_HEAD + SINK),
        "cl_validate.compile.passes.layout_agnostic is under '`cl_validate.spec` (light)', "
        "but the contract puts it in cl_validate.compile"),
    "a layer heading out of order": (
        lambda t: _once(t, "### `cl_validate.ir`\n", "### `cl_validate.measurements`\n"),
        "the layer headings are not the contract's layers"),
    "a light layer not marked": (
        lambda t: _once(t, "### `cl_validate.errors` (light)", "### `cl_validate.errors`"),
        "the layers marked (light) are not the light contract's"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_page_that_breaks_a_rule_is_caught(case: str):
    breaks, expected = BROKEN[case]
    found = problems(breaks(TEXT))
    assert any(expected in p for p in found), found
