"""The command line, ``cl-validate``: a module per subcommand (``run``, ``show``, ``list``,
``budget``, ``calibrate``, ``merge``, ``ledger``, ``diff``, ``trend``, ``init``, ``pins``),
what they share (``common``) and the dispatcher in ``main``."""

from cl_validate.cli.main import main

__all__ = ["main"]
