"""Case files in, validated `CaseSpec`s out: the first layer of the data path.

``model`` (the case dataclasses) · ``lines`` (where each key is) · ``validate`` (one file) ·
``discovery`` (every file under PATHs) · ``config`` (``[tool.cl_validate]``) · ``casefile``
and ``budgets`` (rewriting case files in place). Never imports torch or TVM, and never runs a
model's code: listing and validating cases stays instant, and a factory that crashes cannot
take the run down before it starts.
"""

from cl_validate.spec.discovery import discover, load_cases
from cl_validate.spec.lines import locate_lines, tomllib
from cl_validate.spec.model import (
    BUILTIN_PIPELINES,
    DEFAULT_MAX_MEMORY_MB,
    DEFAULT_PIPELINE,
    DEFAULT_TIMEOUT_S,
    DTYPES,
    IO_LAYOUTS,
    Budget,
    CaseSpec,
    InputSpec,
    OutputSpec,
    Tolerance,
)
from cl_validate.spec.validate import load_case

__all__ = [
    "BUILTIN_PIPELINES",
    "DEFAULT_MAX_MEMORY_MB",
    "DEFAULT_PIPELINE",
    "DEFAULT_TIMEOUT_S",
    "DTYPES",
    "IO_LAYOUTS",
    "Budget",
    "CaseSpec",
    "InputSpec",
    "OutputSpec",
    "Tolerance",
    "discover",
    "load_case",
    "load_cases",
    "locate_lines",
    "tomllib",
]
