"""``python -m cl_validate.cli.reference --write docs``: regenerate the reference
pages' generated blocks (`cl_validate.report.reference`), the CLI's included.

It lives with the CLI because the CLI's block is rendered from ``cl-validate``'s own argparse
parsers, which the report layer may not import. ``--check`` writes nothing and exits 1 naming
every stale page.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from cl_validate.cli.main import _parser
from cl_validate.report import reference


def cli_block() -> str:
    return reference.cli_reference(_parser())


BLOCKS: dict[str, Callable[[], str]] = {**reference.BLOCKS, "cli": cli_block}


def main(argv: list[str]) -> int:
    return reference.main(argv, BLOCKS)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
