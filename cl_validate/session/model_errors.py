"""The errors a model's own code causes, said as the model's: where in its code, the case
file's ``model`` line and a hint (`model_error`), and the calls the sandbox refused it
(`refused_call_error`)."""

from __future__ import annotations

import traceback
from pathlib import Path

from cl_validate.checks.compile import CaseKind
from cl_validate.errors import ErrorRecord, first_line
from cl_validate.paths import display_path
from cl_validate.session import sandbox
from cl_validate.spec import CaseSpec


def _model_frame(exc: BaseException) -> str | None:
    """``zoo/net.py:12``: the innermost frame of the traceback in the user's code (not in an
    installed package, not in cl_validate), relative to the working directory."""
    ours = str(Path(__file__).resolve().parents[1])
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if "site-packages" in frame.filename or frame.filename.startswith((ours, "<")):
            continue
        found = f"{display_path(Path(frame.filename))}:{frame.lineno}"
    return found


def model_error(case: CaseSpec, what: str, exc: BaseException, hint: str) -> ErrorRecord:
    """The model's code raised: its error (``ModelError``), not the tool's — the exception's
    first meaningful line, where in the model's code, the case file's ``model`` line and a
    hint; the traceback as the detail."""
    where = _model_frame(exc)
    at = f" at {where}" if where else ""
    text = f"{type(exc).__name__}: {first_line(exc)}".rstrip(": ")
    line = case.line_of("model")
    return ErrorRecord(f"{display_path(case.path)}:{line}: {what}: {text}{at} "
                       f"(hint: {hint})", CaseKind.MODEL_ERROR,
                       "".join(traceback.format_exception(exc)), line)


def refused_call_error(case: CaseSpec, exc: BaseException | None) -> ErrorRecord | None:
    """The model's code tried to signal or change a process outside its case and the kernel
    refused (`sandbox`): that case's ``SignalledRun`` or ``ReachedOut``, naming the call;
    None for any other error (it replaces whatever the error was taken for)."""
    line = case.line_of("model")
    call = sandbox.refused_signal(exc)
    if call is not None and exc is not None:
        return ErrorRecord(
            f"{display_path(case.path)}:{line}: the model's code tried to signal a process "
            f"outside its case ({call}); refused (hint: a case's processes may signal only "
            "each other, never the run, its zygote or another case)", CaseKind.SIGNALLED_RUN,
            "".join(traceback.format_exception(exc)), line)
    call = sandbox.refused_reach(exc)
    if call is not None and exc is not None:
        return ErrorRecord(
            f"{display_path(case.path)}:{line}: the model's code tried to change a process "
            f"outside its case, or one of its own threads by its thread id ({call}); refused "
            "(hint: a case may set its own limits, priority and affinity, never the run's, "
            "its zygote's or another case's; the kernel's filter cannot tell a thread id of "
            "the case's own from another process's, so a thread sets its own with 0 (the "
            "calling thread), the process with its pid; files under /proc are read-only to "
            "it)", CaseKind.REACHED_OUT,
            "".join(traceback.format_exception(exc)), line)
    return None
