"""Reference text generated from the code, so the docs cannot drift from it: the table of
checks (from the check registry) that the README shows between its ``checks`` markers.

``python -m cl_validate.report.reference README.md`` rewrites that part of a file; the test
suite fails when the file differs from what this module generates.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cl_validate.checks.registry import checks

BEGIN = ("<!-- checks: generated from cl_validate.checks; "
         "`python -m cl_validate.report.reference README.md` -->")
END = "<!-- /checks -->"


def checks_table() -> str:
    """Every check in report order: its name, when it passes, the case-file key that
    declares it, and its failure kinds (the JUnit ``type``)."""
    rows = ["| check | passes when | declared by | fails as (JUnit `type`) |",
            "| --- | --- | --- | --- |"]
    for c in checks():
        table, *keys = c.declared_by
        where = f"`[{table}] {'.'.join(keys)}`" if keys else f"`{table}`"
        kinds = ", ".join(dict.fromkeys(f"`{k.value}`" for group in c.kinds for k in group))
        rows.append(f"| `{c.name}` | {c.summary} | {where} | {kinds or '–'} |")
    return "\n".join(rows)


def failure_kinds() -> str:
    """Every failure kind of every check with what it means."""
    rows = ["| check | type | means |", "| --- | --- | --- |"]
    for c in checks():
        for group in c.kinds:
            for k in group:
                rows.append(f"| `{c.name}` | `{k.value}` | {k.doc} |")
    return "\n".join(rows)


def section() -> str:
    return f"{BEGIN}\n{checks_table()}\n{END}"


def replace_section(text: str) -> str:
    """`text` with its generated checks section replaced by the current one."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no generated section ({BEGIN} ... {END})")
    return text[:start] + section() + text[end + len(END):]


def main(argv: list[str]) -> int:
    for name in argv:
        path = Path(name)
        old = path.read_text(encoding="utf-8")
        new = replace_section(old)
        if new != old:
            path.write_text(new, encoding="utf-8")
            print(f"updated {name}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
