"""Merge JUnit reports into one (``cl-validate merge A.xml B.xml ... -o OUT.xml``).

CI runs the cases in shards (run --shard I/N), one JUnit file each; publishers and reviewers
want one report with one suite per target. Suites with the same name are merged into one with
recomputed counts. A testcase that appears twice (same suite, classname and name) means two
shards ran the same case, so it is an error rather than a silent duplicate or drop. Any JUnit
file merges (a <testsuites> root or a bare <testsuite>), pytest's too.

What other tools write is made to fit the schema cl_validate's reports follow
(tests/data/junit-cl_validate.xsd) rather than passed through or dropped:

- a ``<testsuite>`` nested in a ``<testsuite>`` (some tools group that way; the schema has no
  nesting) becomes a suite of its own, named by its path, ``outer/inner``, holding its own
  testcases; none is lost;
- a ``time`` that is not a finite, non-negative number (``nan``, ``inf``, ``-1``, ``1,5``) is
  unknown: a testcase's is left out, a suite's is the sum of its testcases' known times (as
  is a suite's that held nested suites). A time written as ``1e3`` is written ``1000.000``, a
  decimal as the schema wants.
"""

from __future__ import annotations

import copy
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cl_validate.atomic import write_atomic
from cl_validate.errors import UsageError
from cl_validate.paths import read_regular
from cl_validate.report.escape import md_code, md_text

# Only the standard library: merging must not import torch or TVM (the CI job that merges
# installs neither).

_RESULTS = ("failure", "error", "skipped")


@dataclass
class _Suite:
    """A merged suite: the first file's attributes and properties, every file's testcases."""

    elem: ET.Element  # attributes and <properties> of the first occurrence
    cases: list[ET.Element] = field(default_factory=list)
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    seconds: float = 0.0


#: Deeper than any JUnit file nests (suites in suites, a testcase's result and its
#: properties); the writer recurses over the tree, so a pathological file is refused.
MAX_DEPTH = 64
#: Where a nested suite's name is joined to its parent's.
NESTED = "/"
_DECIMAL = re.compile(r"\s*(\d+(\.\d*)?|\.\d+)\s*")


def read(path: str) -> ET.Element:
    """The root of one report, or a one-line UsageError saying why it is not one."""
    try:
        data = read_regular(path)  # a FIFO or a device is refused, never opened
    except OSError as exc:
        raise UsageError(f"cannot read report: {exc.strerror or exc}", file=path) from None
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        line = exc.position[0] if exc.position else None
        raise UsageError(f"not a JUnit report: malformed XML ({str(exc).split(':')[0]})",
                         file=path, line=line) from None
    if root.tag not in ("testsuites", "testsuite"):
        raise UsageError(f"not a JUnit report: root element is <{root.tag}>, expected "
                         "<testsuites> or <testsuite>", file=path)
    if _depth(root) > MAX_DEPTH:
        raise UsageError(f"not a JUnit report: elements nested more than {MAX_DEPTH} deep",
                         file=path)
    for name, suite in _suites(root):
        if not suite.get("name"):
            raise UsageError("not a JUnit report: a <testsuite> has no name", file=path)
        for tc in suite.findall("testcase"):
            if tc.get("name") is None:
                raise UsageError(f"not a JUnit report: a <testcase> in suite "
                                 f"'{name}' has no name", file=path)
    return root


def _depth(root: ET.Element) -> int:
    deepest, stack = 0, [(root, 1)]
    while stack:
        elem, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth <= MAX_DEPTH:  # no need to look further down
            stack.extend((child, depth + 1) for child in elem)
    return deepest


def _suites(root: ET.Element) -> Iterator[tuple[str, ET.Element]]:
    """Every suite with the name it is merged under: a nested suite's is its path
    (``outer/inner``), so its testcases stay apart from its parent's."""
    top = [root] if root.tag == "testsuite" else root.findall("testsuite")
    stack = [(s.get("name", ""), s) for s in reversed(top)]
    while stack:
        name, suite = stack.pop()
        yield name, suite
        stack.extend((f"{name}{NESTED}{inner.get('name', '')}", inner)
                     for inner in reversed(suite.findall("testsuite")))


def _seconds(elem: ET.Element) -> float | None:
    """`elem`'s ``time`` as seconds, or None when it has none or it is not a finite,
    non-negative number (unknown, not zero)."""
    try:
        t = float(elem.get("time") or "")
    except ValueError:
        return None
    return t if math.isfinite(t) and t >= 0 else None


def _schema_time(tc: ET.Element) -> ET.Element:
    """`tc` with a ``time`` the schema accepts: a decimal kept as written, another finite
    non-negative number rewritten as one, anything else left out."""
    raw = tc.get("time")
    if raw is None or _DECIMAL.fullmatch(raw):
        return tc
    t = _seconds(tc)
    if t is None:
        del tc.attrib["time"]
    else:
        tc.set("time", f"{t:.3f}")
    return tc


def _suite_seconds(suite: ET.Element) -> float:
    """A suite's own time when it says one and holds no suite (a parent's time may or may
    not count its nested suites': they are suites of their own here), else the sum of its
    testcases' known times."""
    own = _seconds(suite)
    if own is not None and suite.find("testsuite") is None:
        return own
    return sum(t for tc in suite.findall("testcase") if (t := _seconds(tc)) is not None)


def merge(paths: Sequence[str]) -> ET.Element:
    """One ``<testsuites>`` from `paths`; raises UsageError on an unreadable file or a
    duplicate testcase (naming both files)."""
    suites: dict[str, _Suite] = {}
    seen: dict[tuple[str, str, str], str] = {}
    root_name = None
    for path in paths:
        root = read(path)
        if root.tag == "testsuites" and root_name is None:
            root_name = root.get("name")
        for name, suite in _suites(root):
            merged = suites.get(name)
            if merged is None:
                head = ET.Element("testsuite", {**suite.attrib, "name": name})
                head.extend(copy.deepcopy(p) for p in suite.findall("properties"))
                merged = suites[name] = _Suite(head)
            for tc in suite.findall("testcase"):
                tc = _schema_time(_with_target(copy.deepcopy(tc), name))
                key = (name, tc.get("classname", ""), tc.get("name", ""))
                if key in seen:
                    where = "twice in " + path if seen[key] == path else \
                        f"in {seen[key]} and in {path}"
                    raise UsageError(f"duplicate testcase {key[1]}::{key[2]} in suite "
                                     f"'{name}' {where}", hint="each shard must run different "
                                     "cases: give every job the same --shard N and case list")
                seen[key] = path
                merged.cases.append(tc)
            merged.seconds += _suite_seconds(suite)
            merged.out.extend(e.text for e in suite.findall("system-out") if e.text)
            merged.err.extend(e.text for e in suite.findall("system-err") if e.text)
    return _assemble(root_name or "cl_validate", suites.values())


def _with_target(tc: ET.Element, suite: str) -> ET.Element:
    """A testcase of a cl_validate report written before names carried the target
    (``layout_transforms`` in suite ``cl_validate.llvm``) named as now
    (``layout_transforms[llvm]``), so old and new reports merge into one set of tests."""
    target = suite.removeprefix("cl_validate.")
    name = tc.get("name", "")
    if (suite.startswith("cl_validate.") and target and NESTED not in target
            and not name.endswith("]")):
        tc.set("name", f"{name}[{target}]")
    return tc


def _assemble(name: str, suites: Iterable[_Suite]) -> ET.Element:
    out = ET.Element("testsuites", {"name": name})
    totals = dict.fromkeys(("tests", "failures", "errors"), 0)
    seconds = 0.0
    for s in suites:
        elem = s.elem
        elem.extend(s.cases)
        for tag, texts in (("system-out", s.out), ("system-err", s.err)):
            if texts:
                ET.SubElement(elem, tag).text = "\n".join(texts)
        counts = {"tests": len(s.cases)}
        for tag, attr in zip(_RESULTS, ("failures", "errors", "skipped"), strict=True):
            counts[attr] = sum(1 for tc in s.cases if tc.find(tag) is not None)
        for attr, value in counts.items():
            elem.set(attr, str(value))
        elem.set("time", f"{s.seconds:.3f}")
        for attr in totals:
            totals[attr] += counts[attr]
        seconds += s.seconds
        out.append(elem)
    for attr, value in totals.items():
        out.set(attr, str(value))
    out.set("time", f"{seconds:.3f}")  # no `skipped` on the root: the JUnit schema has none
    return out


def write(root: ET.Element, path: str | Path) -> Path:
    """Atomically: a reader (or a failed merge) never sees half a file."""
    ET.indent(root)
    return write_atomic(path, ET.tostring(root, encoding="utf-8", xml_declaration=True))


def summary(root: ET.Element, output: str) -> str:
    """A Markdown table per suite and the failures, readable on a console and in
    ``$GITHUB_STEP_SUMMARY``; every name and message (any tool's, any text) escaped."""
    lines = ["| suite | tests | passed | failed | errors | skipped | time |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    bad: list[str] = []
    for suite in root.findall("testsuite"):
        n = {a: int(suite.get(a, "0")) for a in ("tests", "failures", "errors", "skipped")}
        passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
        lines.append(f"| {md_text(suite.get('name', ''))} | {n['tests']} | {passed} | "
                     f"{n['failures']} | {n['errors']} | {n['skipped']} | "
                     f"{float(suite.get('time', 0)):.1f}s |")
        for tc in suite.findall("testcase"):
            for tag in ("failure", "error"):
                r = tc.find(tag)
                if r is not None:
                    where = tc.get("file", "") + (f":{tc.get('line')}" if tc.get("line") else "")
                    msg = (r.get("message") or "").splitlines()[:1]
                    bad.append(f"- **{tag.upper()}** "
                               f"{md_code(tc.get('classname', ''), table=False)} "
                               f"{md_text(tc.get('name', ''))} "
                               f"({md_text(suite.get('name', ''))}): "
                               f"{md_text(msg[0] if msg else '')}"
                               + (f" — {md_code(where, table=False)}" if where else ""))
    lines.append("")
    lines.extend(bad[:50])
    if len(bad) > 50:
        lines.append(f"- … and {len(bad) - 50} more in {md_text(output)}")
    return "\n".join(lines).rstrip() + "\n"
