"""Merge JUnit reports into one (``cl-validate merge A.xml B.xml ... -o OUT.xml``).

CI runs the cases in shards (run --shard I/N), one JUnit file each; publishers and reviewers
want one report with one suite per target. Suites with the same name are merged into one with
recomputed counts. A testcase that appears twice (same suite, classname and name) means two
shards ran the same case, so it is an error rather than a silent duplicate or drop. Any JUnit
file merges (a <testsuites> root or a bare <testsuite>), pytest's too.
"""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cl_validate.atomic import write_atomic
from cl_validate.errors import UsageError

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


def read(path: str) -> ET.Element:
    """The root of one report, or a one-line UsageError saying why it is not one."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
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
    for suite in _suites(root):
        if not suite.get("name"):
            raise UsageError("not a JUnit report: a <testsuite> has no name", file=path)
        for tc in suite.findall("testcase"):
            if tc.get("name") is None:
                raise UsageError(f"not a JUnit report: a <testcase> in suite "
                                 f"'{suite.get('name')}' has no name", file=path)
    return root


def _suites(root: ET.Element) -> list[ET.Element]:
    return [root] if root.tag == "testsuite" else root.findall("testsuite")


def _seconds(elem: ET.Element) -> float:
    try:
        return max(float(elem.get("time") or 0.0), 0.0)
    except ValueError:
        return 0.0


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
        for suite in _suites(root):
            name = suite.get("name", "")
            merged = suites.get(name)
            if merged is None:
                head = ET.Element("testsuite", dict(suite.attrib))
                head.extend(copy.deepcopy(p) for p in suite.findall("properties"))
                merged = suites[name] = _Suite(head)
            for tc in suite.findall("testcase"):
                tc = _with_target(copy.deepcopy(tc), name)
                key = (name, tc.get("classname", ""), tc.get("name", ""))
                if key in seen:
                    where = "twice in " + path if seen[key] == path else \
                        f"in {seen[key]} and in {path}"
                    raise UsageError(f"duplicate testcase {key[1]}::{key[2]} in suite "
                                     f"'{name}' {where}", hint="each shard must run different "
                                     "cases: give every job the same --shard N and case list")
                seen[key] = path
                merged.cases.append(tc)
            merged.seconds += _seconds(suite) if suite.get("time") else \
                sum(_seconds(tc) for tc in suite.findall("testcase"))
            merged.out.extend(e.text for e in suite.findall("system-out") if e.text)
            merged.err.extend(e.text for e in suite.findall("system-err") if e.text)
    return _assemble(root_name or "cl_validate", suites.values())


def _with_target(tc: ET.Element, suite: str) -> ET.Element:
    """A testcase of a cl_validate report written before names carried the target
    (``layout_transforms`` in suite ``cl_validate.llvm``) named as now
    (``layout_transforms[llvm]``), so old and new reports merge into one set of tests."""
    target = suite.removeprefix("cl_validate.")
    name = tc.get("name", "")
    if suite.startswith("cl_validate.") and target and not name.endswith("]"):
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
    ``$GITHUB_STEP_SUMMARY``."""
    lines = ["| suite | tests | passed | failed | errors | skipped | time |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    bad: list[str] = []
    for suite in root.findall("testsuite"):
        n = {a: int(suite.get(a, "0")) for a in ("tests", "failures", "errors", "skipped")}
        passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
        lines.append(f"| {suite.get('name')} | {n['tests']} | {passed} | {n['failures']} | "
                     f"{n['errors']} | {n['skipped']} | {float(suite.get('time', 0)):.1f}s |")
        for tc in suite.findall("testcase"):
            for tag in ("failure", "error"):
                r = tc.find(tag)
                if r is not None:
                    where = tc.get("file", "") + (f":{tc.get('line')}" if tc.get("line") else "")
                    msg = (r.get("message") or "").splitlines()[:1]
                    bad.append(f"- **{tag.upper()}** `{tc.get('classname')}` "
                               f"{tc.get('name')} ({suite.get('name')}): "
                               f"{msg[0] if msg else ''}" + (f" — `{where}`" if where else ""))
    lines.append("")
    lines.extend(bad[:50])
    if len(bad) > 50:
        lines.append(f"- … and {len(bad) - 50} more in {output}")
    return "\n".join(lines).rstrip() + "\n"
