"""Named kinds with a sentence each: why a check failed (the JUnit ``type``, declared by each
check) or was skipped. A member is ``NAME = "Value", "what it means"``; the value is what
reports carry, the sentence what the reference docs print."""

from __future__ import annotations

import enum


class Kind(str, enum.Enum):
    """Base of the kinds: a string value with a ``doc`` sentence."""

    doc: str

    def __new__(cls, value: str, doc: str = "") -> Kind:
        obj = str.__new__(cls, value)
        obj._value_ = value
        obj.doc = doc
        return obj

    def __str__(self) -> str:
        return str(self.value)


class SkipKind(Kind):
    """Why a check was skipped (a skip is never a failure)."""

    NOT_RUN = "NotRun", "the case errored (see its compile check) or the run was interrupted"
    STATIC_ONLY = "StaticOnly", "a static-only run (budget tighten, record, ledger)"
    DEVICE_UNAVAILABLE = ("DeviceUnavailable", "no device for the target here and no RPC "
                          "tracker for it: static checks only")
    NOT_DECLARED = "NotDeclared", "the case declares no budget (or baseline) for the check"
    NOT_PROFILED = "NotProfiled", "kernels were not timed (--profile, or profile = true)"
    NOT_SCHEDULED = "NotScheduled", "dlight schedules no kernel on this target (CPU targets)"
    NOT_QUANTIZED = "NotQuantized", "the program holds no quantize op (a float model)"
