"""cl_validate: a CI gate for channels-last (NHWC) TVM compiles of PyTorch models.

The data path is in the folder names: ``spec`` (case files → `CaseSpec`, run options) →
``session`` (one case in a worker: model → ``compile`` (torch.export → Relax → layout stages →
build; ``compile/passes``) → ``analysis`` (kernel list, transforms, op layouts)) →
``measurements`` (what was measured, as plain data) → ``checks`` (one object per check, in
one registry → `CaseResult`) → ``report`` (JUnit, console, Markdown, annotations, merge).
``suite`` drives a run (workers, judging, shards); ``cli`` and ``pytest_plugin`` sit on top;
``ir`` is the one set of IR queries; ``errors``, ``paths``, ``atomic`` and ``procs`` are
leaves.

Importing this package does not import torch or TVM. It loads the checks, which declare the
``[budget]`` keys case files may use.
"""

from cl_validate.checks.verdict import CaseResult, CheckResult, Status
from cl_validate.errors import CaseFileError, ClValidateError, ExitCode, UsageError
from cl_validate.spec import CaseSpec, load_case, load_cases

__version__ = "0.1.0"

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
