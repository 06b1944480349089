"""Named targets: a name a case file or ``[tool.cl_validate.targets]`` gives to a TVM target.

``llvm`` (this machine's CPU) and ``cuda`` are built in. Any other name is declared with a
TVM target config, as TVM 0.27 takes it (a dict; the old string form is refused)::

    [targets.arm64]                     # in a case file; [tool.cl_validate.targets.arm64]
    target = { kind = "llvm", mtriple = "aarch64-linux-gnu", mattr = ["+neon"] }
    rpc_key = "rk3588"                  # numerics on a device the RPC tracker hands out
    cc = "aarch64-linux-gnu-gcc"        # links the module uploaded to that device

Only what can be checked without TVM is checked here (key names, value types, the kind, the
name): this runs in the parent of a run, which never imports TVM. A target TVM itself refuses
(an attribute its kind does not have) is reported by the case's process, as one line at the
declaration (`cl_validate.compile.tvm_targets`).
"""

from __future__ import annotations

import difflib
import platform
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

#: TVM target kinds cl_validate compiles for, and the device each one runs on
#: (``tvm.device(<device>, 0)``; an RPC session's ``sess.device(<device>, 0)``).
DEVICES: dict[str, str] = {
    "llvm": "cpu", "cuda": "cuda", "rocm": "rocm", "opencl": "opencl", "vulkan": "vulkan",
}
KINDS: tuple[str, ...] = tuple(DEVICES)
#: Keys of one target declaration.
DECL_KEYS: tuple[str, ...] = ("target", "host", "rpc_key", "cc")

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_ATTR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
#: The integers a TVM target attribute holds (``int64_t``).
_INT64 = (-(2**63), 2**63 - 1)
#: What TVM's tracker can match: it builds ``server:<key>`` and splits on ':' and spaces.
_RPC_KEY_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
#: Architectures under their other names (``uname -m`` against an LLVM triple).
_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64", "x64": "x86_64"}

class Fail(Protocol):
    """(key path, message, hint) → the exception to raise, at the file and line of that
    path (a case file's `CaseFileError`, pyproject.toml's `UsageError`)."""

    def __call__(self, path: tuple[str, ...], message: str, hint: str | None = None
                 ) -> Exception: ...


@dataclass(frozen=True)
class TargetDef:
    """A target by name: its TVM target config, where its numerics may run, where declared.

    Plain data (the parent validates it, a case process builds the TVM target from it)."""

    name: str
    config: Mapping[str, Any]  # TVM target config: {"kind": ..., attribute: value, ...}
    host: Mapping[str, Any] | None = None  # TVM config of the host code (GPU kinds)
    rpc_key: str | None = None  # numerics through the RPC tracker, on a server of this key
    cc: str | None = None  # the compiler that links the module uploaded to the device
    file: str | None = None  # where it is declared (None: built in)
    line: int | None = None  # the line of its `target = {...}`
    #: the key path of the declaration in that file, for the lines of its parts
    path: tuple[str, ...] = field(default=(), compare=False)

    @property
    def kind(self) -> str:
        return str(self.config["kind"])

    @property
    def device(self) -> str:
        """The device type its program runs on: ``cpu`` for llvm, else the kind's own."""
        return DEVICES[self.kind]

    @property
    def builtin(self) -> bool:
        return self.file is None

    @property
    def triple(self) -> str | None:
        """The LLVM triple of the CPU code (the target's for llvm, the host's for GPU kinds)."""
        cpu = self.config if self.kind == "llvm" else (self.host or {})
        triple = cpu.get("mtriple")
        return str(triple) if triple else None

    def foreign(self, machine: str | None = None) -> bool:
        """Its CPU code is for another architecture than this machine's (`machine`, default
        ``uname -m``): the module is cross-compiled, and cannot run here."""
        if self.triple is None:
            return False
        return _arch(self.triple.split("-")[0]) != _arch(machine or platform.machine())

    def where(self) -> str:
        """``file:line`` of the declaration, for messages."""
        if self.file is None:
            return "built in"
        return f"{self.file}:{self.line}" if self.line else self.file


BUILTIN: dict[str, TargetDef] = {
    "llvm": TargetDef("llvm", {"kind": "llvm"}),
    "cuda": TargetDef("cuda", {"kind": "cuda"}, host={"kind": "llvm"}),
}
BUILTIN_TARGETS: tuple[str, ...] = tuple(BUILTIN)


def _arch(name: str) -> str:
    name = name.lower()
    return _ARCH_ALIASES.get(name, name)


def check_name(name: str, path: tuple[str, ...], fail: Fail) -> None:
    """Target names become JUnit test names (``numerics[arm64]``), suite names and baseline
    file names: letters, digits, '_', '.', '-' only."""
    if not NAME_RE.match(name) or name.startswith("."):
        raise fail(path, f"target name '{name}' may only use letters, digits, '_', '.', '-' "
                   "and must not start with '.'", "names become test and file names")


def parse_decl(name: str, raw: Any, path: tuple[str, ...], fail: Fail, *, file: str,
               line: int | None, where: str) -> TargetDef:
    """One declaration table (`raw`, at key path `path` of `file`) as a `TargetDef`."""
    check_name(name, path, fail)
    if name in BUILTIN:
        raise fail(path, f"target '{name}' is built in and cannot be redeclared",
                   f"give yours another name, e.g. [{where}.{name}-custom]; "
                   f"--rpc-key {name}=KEY runs {name}'s numerics through RPC")
    if not isinstance(raw, dict):
        raise fail(path, f"[{where}.{name}] must be a table", "e.g. target = { kind = \"llvm\" }")
    _keys(raw, DECL_KEYS, path, f"[{where}.{name}]", fail)
    if "target" not in raw:
        raise fail(path, f"target '{name}' has no TVM target config",
                   "target = { kind = \"llvm\", mtriple = \"aarch64-linux-gnu\" }")
    config = _config(raw["target"], (*path, "target"), fail, "target")
    kind = config["kind"]
    host = None
    if "host" in raw:
        if kind == "llvm":
            raise fail((*path, "host"), "host only applies to GPU kinds",
                       "an llvm target is its own host: set mtriple in target")
        host = _config(raw["host"], (*path, "host"), fail, "host")
        if host["kind"] != "llvm":
            raise fail((*path, "host", "kind"), f"host kind must be 'llvm', got '{host['kind']}'")
    elif kind != "llvm":
        host = {"kind": "llvm"}
    rpc_key = _string(raw, "rpc_key", path, fail)
    if rpc_key is not None and not _RPC_KEY_RE.match(rpc_key):
        raise fail((*path, "rpc_key"), f"rpc_key '{rpc_key}' may only use letters, digits, "
                   "'_', '.', '-'", "the key a device server registers with the tracker")
    cc = _string(raw, "cc", path, fail)
    return TargetDef(name, config, host, rpc_key, cc, file, line, path)


def _keys(table: Mapping[str, Any], allowed: tuple[str, ...], path: tuple[str, ...],
          where: str, fail: Fail) -> None:
    for key in table:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            raise fail((*path, key), f"unknown key '{key}' in {where}",
                       f"did you mean '{close[0]}'?" if close else "allowed: " + ", ".join(allowed))


def _string(raw: Mapping[str, Any], key: str, path: tuple[str, ...], fail: Fail) -> str | None:
    if key not in raw:
        return None
    value = raw[key]
    if not isinstance(value, str) or not value.strip():
        raise fail((*path, key), f"{key} must be a non-empty string, got {value!r}")
    return value


def _config(raw: Any, path: tuple[str, ...], fail: Fail, what: str) -> dict[str, Any]:
    """A TVM target config: ``kind`` and attributes with scalar or array values (what TVM's
    dict form takes). Attribute names are TVM's to judge; their shape is ours."""
    if not isinstance(raw, dict):
        raise fail(path, f"{what} must be a table (a TVM target config), got {raw!r}",
                   f"{what} = {{ kind = \"llvm\" }}")
    if "kind" not in raw:
        raise fail(path, f"{what} has no kind", "kind is one of " + ", ".join(KINDS))
    kind = raw["kind"]
    if kind not in KINDS:
        close = difflib.get_close_matches(str(kind), KINDS, n=1)
        raise fail((*path, "kind"), f"unsupported target kind {kind!r}",
                   f"did you mean '{close[0]}'?" if close else "use one of " + ", ".join(KINDS))
    for key, value in raw.items():
        if key == "host":
            raise fail((*path, key), f"host inside {what}", "write host = { kind = \"llvm\", "
                       "... } beside target, not inside it")
        if not _ATTR_RE.match(key):
            raise fail((*path, key), f"'{key}' is not a TVM target attribute name")
        if not _scalar(value) and not (isinstance(value, list) and all(map(_scalar, value))):
            raise fail((*path, key), f"{what}.{key} must be a string, number, boolean or an "
                       f"array of them, got {value!r}", "e.g. mattr = [\"+neon\"]")
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, int) and not _INT64[0] <= item <= _INT64[1]:
                raise fail((*path, key), f"{what}.{key} is out of range: TVM's target "
                           "attributes are 64-bit integers",
                           f"a value between {_INT64[0]:,} and {_INT64[1]:,}; check it for a "
                           "typo")
    return dict(raw)


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool))


def case_targets(raw: Any, project: Mapping[str, TargetDef], fail: Fail, *, file: str,
                 line: Callable[[tuple[str, ...]], int | None]) -> dict[str, TargetDef]:
    """The targets a case runs on, in its order: ``targets = ["llvm", "arm64"]`` (names that
    are built in or declared in ``[tool.cl_validate.targets]``), or ``[targets.<name>]``
    tables, each declaring a target of this case's own or, left empty, naming one."""
    if raw is None:
        return dict(BUILTIN)
    shape_hint = ("e.g. targets = [\"llvm\"], or [targets.<name>] tables; omit targets for "
                  "both llvm and cuda")
    if isinstance(raw, list) and raw:
        out: dict[str, TargetDef] = {}
        for name in raw:
            if not isinstance(name, str):
                raise fail(("targets",), f"a target must be a string, got {name!r}")
            if name in out:
                raise fail(("targets",), f"target '{name}' listed twice")
            out[name] = _named(name, project, ("targets",), fail)
        return out
    if not isinstance(raw, dict) or not raw or not all(isinstance(v, dict) for v in raw.values()):
        raise fail(("targets",), "targets must be a non-empty array of strings or "
                   "[targets.<name>] tables", shape_hint)
    out = {}
    for name, decl in raw.items():
        path = ("targets", name)
        if not decl:  # [targets.llvm], [targets.arm64]: a target declared elsewhere
            out[name] = _named(name, project, path, fail)
        elif name in project:
            raise fail(path, f"target '{name}' is already declared in {project[name].where()}",
                       f"leave [targets.{name}] empty to use that one, or name this one "
                       "otherwise")
        else:
            out[name] = parse_decl(name, decl, path, fail, file=file,
                                   line=line((*path, "target")), where="targets")
    return out


def _named(name: str, project: Mapping[str, TargetDef], path: tuple[str, ...],
           fail: Fail) -> TargetDef:
    """A target a case names without declaring it: built in, or the project's."""
    check_name(name, path, fail)
    found = BUILTIN.get(name) or project.get(name)
    if found is None:
        known = [*BUILTIN, *project]
        close = difflib.get_close_matches(name, known, n=1)
        raise fail(path, f"unknown target '{name}'", f"did you mean '{close[0]}'?" if close
                   else "targets: " + ", ".join(known) + "; declare others as "
                   "[targets.<name>] or [tool.cl_validate.targets.<name>]")
    return found


def override_names(targets: Mapping[str, TargetDef], project: Mapping[str, TargetDef]
                   ) -> tuple[str, ...]:
    """Targets a ``[targets_override.<t>]`` may name: every target the case or the project
    knows (an override for a target left out of this case is harmless, as for cuda)."""
    return tuple(dict.fromkeys([*BUILTIN, *project, *targets]))
