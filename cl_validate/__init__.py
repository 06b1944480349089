"""cl_validate: a CI gate for channels-last (NHWC) TVM compiles of PyTorch models.

Data path: ``spec`` (case files) → ``pipeline`` (torch.export → Relax → layout stages →
build) → ``analysis`` (kernel list, transforms, op layouts) → ``checks`` (layout, budget,
numerics) → ``verdict`` (CaseResult) → ``report`` (JUnit, console).

Importing this package does not import torch or TVM.
"""

from cl_validate.errors import CaseFileError, ClValidateError, ExitCode, UsageError
from cl_validate.spec import CaseSpec, load_case, load_cases
from cl_validate.verdict import CaseResult, CheckResult, Status

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
