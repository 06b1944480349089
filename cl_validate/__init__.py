"""cl_validate: a CI gate for channels-last (NHWC) TVM compiles of PyTorch models.

The data path is in the folder names: ``spec`` (case files → `CaseSpec`) → ``compile``
(torch.export → Relax → layout stages → build; ``compile/passes``) → ``analysis`` (kernel list,
transforms, op layouts) → ``checks`` (layout, budgets, kernel list, numerics → `CaseResult`)
→ ``report`` (JUnit, console, Markdown, annotations, merge). ``run`` drives them (options,
workers, cache, shards); ``cli`` and ``pytest_plugin`` sit on top; ``ir`` is the one set of
IR queries; ``errors``, ``paths`` and ``atomic`` are leaves.

Importing this package does not import torch or TVM.
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
