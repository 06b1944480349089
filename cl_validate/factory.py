"""Resolve a case's ``model = "module:callable"`` into a seeded ``torch.nn.Module``.

Imported only when a case is built (it imports torch). Every way a factory can be wrong is a
`CaseFileError` pointing at the case file's ``model`` line.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cl_validate.errors import CaseFileError
from cl_validate.spec import CaseSpec, display_path

if TYPE_CHECKING:
    import torch


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _error(case: CaseSpec, message: str, hint: str | None = None) -> CaseFileError:
    return CaseFileError(message, file=display_path(case.path), line=case.line_of("model"),
                         hint=hint)


def _ensure_on_path(case: CaseSpec) -> None:
    """Case folder first, then the working directory (the v1 contract's import path)."""
    for p in (str(Path.cwd()), str(case.path.resolve().parent)):
        if p not in sys.path:
            sys.path.insert(0, p)


def resolve_factory(case: CaseSpec) -> Callable[..., Any]:
    """Import the callable named by ``case.model`` without calling it."""
    _ensure_on_path(case)
    module_name, _, attr_path = case.model.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        raise _error(case, f"cannot import '{module_name}' for model '{case.model}': "
                     f"no module named '{missing}'",
                     "the module is looked up next to the case file and in the working "
                     "directory") from None
    except Exception as exc:  # the user's module raised while importing
        raise _error(case, f"importing '{module_name}' failed: {_one_line(exc)}") from None
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise _error(case, f"'{module_name}' has no attribute '{attr_path}'",
                         "check the name after ':' in model") from None
        obj = getattr(obj, part)
    if not callable(obj):
        raise _error(case, f"model '{case.model}' is not callable")
    return obj  # type: ignore[no-any-return]


def build_model(case: CaseSpec) -> torch.nn.Module:
    """Call the factory under the case seed, so weights are the same on every run."""
    import torch

    factory = resolve_factory(case)
    torch.manual_seed(case.seed)
    try:
        model = factory()
    except Exception as exc:
        raise _error(case, f"model factory '{case.model}' raised {_one_line(exc)}") from None
    if not isinstance(model, torch.nn.Module):
        raise _error(case, f"model factory '{case.model}' returned {type(model).__name__}, "
                     "not a torch.nn.Module", "return the module instance, e.g. `return Net()`")
    return model.eval()
