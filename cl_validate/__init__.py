"""cl_validate: a CI gate for channels-last (NHWC) TVM compiles of PyTorch models.

The data path is in the folder names: ``spec`` (case files → `CaseSpec`, run options) →
``session`` (one case in processes of its own: model → ``compile`` (torch.export → Relax →
layout stages → build; ``compile/passes``) → ``analysis`` (kernel list, transforms, op
layouts)) → ``measurements`` (what was measured, as plain data) → ``checks`` (one object per
check, in one registry → `CaseResult`) → ``report`` (JUnit, console, Markdown, annotations,
merge). ``suite`` drives a run (case processes, judging, shards); ``cli`` and
``pytest_plugin`` sit on top; ``ir`` is the one set of IR queries; ``errors``, ``paths``,
``atomic`` and ``procs`` are leaves.

Importing this package does not import torch or TVM. It loads the checks, which declare the
``[budget]`` keys case files may use.
"""

import signal as _signal
from importlib.metadata import PackageNotFoundError as _NotInstalled
from importlib.metadata import version as _dist_version

from cl_validate.procs import GUARDED_SIGNALS as _GUARDED

# Threads that start while the package loads (NumPy's OpenBLAS pool) start with the signals a
# run's parent receives on a thread of its own blocked (`cl_validate.suite.signals`): else the
# kernel could hand them one of those, and the sender would be lost. The importing thread's
# own mask is restored right after; nothing else changes for whoever imports the package.
_mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, _GUARDED)
try:
    from cl_validate.checks.verdict import CaseResult, CheckResult, Status
    from cl_validate.errors import CaseFileError, ClValidateError, ExitCode, UsageError
    from cl_validate.spec import CaseSpec, load_case, load_cases
finally:
    _signal.pthread_sigmask(_signal.SIG_SETMASK, _mask)


# The version setuptools-scm wrote at build time (from the git tag), else the installed
# distribution's, else ``0+unknown`` (a source tree that was never built).
try:
    from cl_validate._version import version as __version__  # type: ignore[import-not-found]
except ImportError:
    try:
        __version__ = _dist_version("cl_validate")
    except _NotInstalled:
        __version__ = "0+unknown"

__all__ = [
    "CaseFileError",
    "CaseResult",
    "CaseSpec",
    "CheckResult",
    "ClValidateError",
    "ExitCode",
    "Status",
    "UsageError",
    "__version__",
    "load_case",
    "load_cases",
]
