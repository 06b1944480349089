"""Resolve a case's ``model = "module:callable"`` into a seeded ``torch.nn.Module``.

This runs the user's code (importing the factory's module, calling it), so it runs in a
case process, never in the parent of a run. Every way a factory can be wrong is a
`CaseFileError` pointing at the case file's ``model`` line (or the ``[layout_overrides]`` or
``[[inputs]]`` line it contradicts).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import inspect
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from cl_validate.errors import CaseFileError, first_line
from cl_validate.paths import display_path
from cl_validate.spec import CaseSpec


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {first_line(exc)}".rstrip(": ")


def _error(case: CaseSpec, message: str, hint: str | None = None) -> CaseFileError:
    return CaseFileError(message, file=display_path(case.path), line=case.line_of("model"),
                         hint=hint)


def ensure_on_path(case: CaseSpec) -> None:
    """Case folder first, then the working directory (the v1 contract's import path)."""
    for p in (str(Path.cwd()), str(case.path.resolve().parent)):
        if p not in sys.path:
            sys.path.insert(0, p)


def resolve_factory(case: CaseSpec) -> Callable[..., Any]:
    """Import the callable named by ``case.model`` without calling it."""
    ensure_on_path(case)
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
        raise _error(case, f"model '{case.model}' is not callable ({type(obj).__name__})",
                     "name a function or class that returns a torch.nn.Module")
    return obj  # type: ignore[no-any-return]


def build_model(case: CaseSpec) -> torch.nn.Module:
    """Call the factory under the case seed, so weights are the same on every run."""
    factory = resolve_factory(case)
    torch.manual_seed(case.seed)
    try:
        model = factory()
    except Exception as exc:
        raise _error(case, f"model factory '{case.model}' raised {_one_line(exc)}") from None
    if isinstance(model, torch.export.ExportedProgram):
        model = model.module()  # an exported program is accepted as what it runs
    if not isinstance(model, torch.nn.Module):
        raise _error(case, f"model factory '{case.model}' returned {type(model).__name__}, "
                     "not a torch.nn.Module", "return the module instance, e.g. `return Net()`")
    _check_inputs(case, model)
    _to_inference(case, model)
    return model


def _to_inference(case: CaseSpec, model: torch.nn.Module) -> None:
    """Put `model` in inference mode where its mode is still a flag.

    A module that torch.export made (``ExportedProgram.module()``, PT2E's ``convert_pt2e``)
    carries its mode in its ops and refuses ``eval()``: it is taken as it is. Nothing uses
    ``eval()``'s return value (torchao's ``allow_exported_model_train_eval`` makes it return
    None)."""
    try:
        model.eval()
    except NotImplementedError:
        if not isinstance(model, torch.fx.GraphModule):
            raise  # the model's own eval() is broken: the model's error (CaseSession.start)
        # exported: its batch norms and dropouts already are what eval() would make them


def _check_inputs(case: CaseSpec, model: torch.nn.Module) -> None:
    """One [[inputs]] per forward() argument: checked from the signature, before any compile
    (a mismatch would otherwise surface as a TypeError deep inside torch.export)."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):  # forward without a Python signature: nothing to check
        return
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = sum(1 for p in positional if p.default is p.empty)
    most = None if any(p.kind is p.VAR_POSITIONAL for p in params) else len(positional)
    n = len(case.inputs)
    if required <= n and (most is None or n <= most):
        return
    takes = f"{required}" if most == required else f"{required} to {most}"
    names = ", ".join(p.name for p in positional)
    # Point at the first surplus [[inputs]], or at the last one when some are missing.
    line = case.line_of("inputs", str(most if most is not None and n > most else n - 1))
    raise CaseFileError(
        f"forward({names}) of '{case.model}' takes {takes} input{'s' * (takes != '1')}, "
        f"the case declares {n} [[inputs]]", file=display_path(case.path), line=line,
        hint="declare one [[inputs]] per forward() argument, in order")


def check_layout_overrides(case: CaseSpec, model: torch.nn.Module) -> None:
    """Every ``[layout_overrides]`` key names a module of the model."""
    modules = dict(model.named_modules())
    for path in case.layout_overrides:
        if path not in modules:
            close = difflib.get_close_matches(path, list(modules), n=1)
            raise CaseFileError(
                f"[layout_overrides] names '{path}', which is not a module of the model",
                file=display_path(case.path), line=case.line_of("layout_overrides", path),
                hint=f"did you mean '{close[0]}'?" if close else "use a path from "
                "model.named_modules(), e.g. 'layer1.0.conv1'")


def weights_digest(model: torch.nn.Module) -> str:
    """Hash of everything a model carries into the compiled program: every parameter and
    buffer (non-persistent buffers too: they are exported as constants) by name, dtype, shape
    and bytes, and the extra state of modules that define ``get_extra_state``."""
    h = hashlib.sha256()
    tensors: dict[str, torch.Tensor] = dict(model.named_parameters())
    tensors.update(model.named_buffers())
    for name, t in sorted(tensors.items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    base = torch.nn.Module.get_extra_state
    for name, module in sorted(model.named_modules()):
        if getattr(type(module), "get_extra_state", base) is base:
            continue
        try:
            state = pickle.dumps(module.get_extra_state(), protocol=4)
        except Exception:  # not picklable: its repr is the best stable account there is
            state = repr(module.get_extra_state()).encode()
        h.update(f"extra:{name}:".encode() + state)
    return h.hexdigest()
