"""Run options, defined once and shared by the CLI (argparse) and the pytest plugin.

Each `Option` knows its command-line flags, its help, and the `RunOptions` field it fills;
`add_to_argparse` and `add_to_pytest` register the same list, and `run_options` builds the
`RunOptions` from either parser's result, so the two front ends cannot drift apart.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cl_validate.errors import DeviceUnavailableError, UsageError
from cl_validate.spec.config import StalePolicy, load_config
from cl_validate.spec.model import CaseSpec
from cl_validate.spec.placement import (
    RpcSettings,
    parse_rpc_key,
    parse_tracker,
    placement,
    rpc_settings,
)
from cl_validate.spec.targets import BUILTIN_TARGETS


@dataclass(frozen=True)
class RunOptions:
    """How a run runs: defined once, filled by the CLI and by the pytest plugin alike."""

    targets: tuple[str, ...] | None = None  # None: each case's own targets
    require_device: bool = False
    jobs: int = 1  # slots: cases prepared and targets measured at once
    isolate: bool = True  # each case in processes of its own, with timeout and memory cap
    timeout: float | None = None  # seconds per case; None: the case's own (or the default)
    max_memory_mb: int | None = None  # resident memory cap per case; None: the case's own
    stale_budget: StalePolicy = StalePolicy.FAIL  # a budget above the measured count
    static_only: bool = False  # no build, no numerics: counts only (`budget tighten|record`)
    cache_dir: str | None = None  # where measurements are cached (None: no cache)
    rpc: RpcSettings = field(default_factory=RpcSettings)  # the tracker and keys, if any
    profile: bool = False  # time every kernel (cl_validate.session.kernel_timer); never cached
    profile_repeats: int = 5  # timed runs of the program per case × target


DEFAULT_DIR = ".cl_validate_cache"
#: Set to 1 to run cold by default (the test suite does); an explicit --cache-dir still wins.
NO_CACHE_ENV = "CL_VALIDATE_NO_CACHE"


def resolve_dir(cache_dir: str | None, no_cache: bool) -> str | None:
    """The cache directory a run uses, or None for no cache."""
    if no_cache:
        return None
    if cache_dir:
        return cache_dir
    return None if os.environ.get(NO_CACHE_ENV, "") not in ("", "0") else DEFAULT_DIR


_SHARD_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/4"`` -> ``(2, 4)``; the index is 1-based, as CI matrices count."""
    m = _SHARD_RE.match(text)
    if m is None:
        raise UsageError(f"--shard {text}: expected I/N, e.g. --shard 1/4",
                         hint="I is this job's shard (1-based), N the number of shards")
    index, count = int(m.group(1)), int(m.group(2))
    if count < 1:
        raise UsageError(f"--shard {text}: the number of shards must be >= 1")
    if not 1 <= index <= count:
        raise UsageError(f"--shard {text}: shard index must be in 1..{count}")
    return index, count


def require_devices(cases: Sequence[CaseSpec], options: RunOptions,
                    have_device: Callable[[str], bool]) -> None:
    """``--require-device``: a one-line usage error (exit 2) before any case runs when a
    selected target's numerics could run nowhere: no device here (`have_device` says, by
    device type) and no RPC tracker and key for it."""
    missing: dict[str, str] = {}
    for c in cases:
        for t in selected_targets(c, options):
            place = placement(c.target_def(t), options.rpc, have_device)
            if not place.runs:
                missing.setdefault(t, place.missing)
    for t, why in sorted(missing.items()):
        hint = ("run on a machine with an NVIDIA GPU" if t == "cuda" else
                "configure an RPC tracker (--rpc-tracker HOST:PORT --rpc-key KEY, or "
                "TVM_TRACKER_HOST, TVM_TRACKER_PORT and TVM_TRACKER_KEY)")
        raise DeviceUnavailableError(f"--require-device: {why}", hint=hint + ", or drop "
                                     "--require-device to run the static checks only")


def check_target_names(cases: Iterable[CaseSpec], options: RunOptions) -> None:
    """Every ``--target`` names a target some case, the project or cl_validate knows: a typo
    is a one-line usage error, not a run of nothing."""
    if not options.targets:
        return
    known = list(dict.fromkeys([*BUILTIN_TARGETS, *load_config().targets,
                                *(t for c in cases for t in c.targets)]))
    for t in options.targets or ():
        if t not in known:
            close = difflib.get_close_matches(t, known, n=1)
            raise UsageError(f"unknown target '{t}'", hint=f"did you mean '{close[0]}'?"
                             if close else "targets: " + ", ".join(known))


def selected_targets(case: CaseSpec, options: RunOptions) -> list[str]:
    """The targets `case` runs on in this run, in the case's order."""
    if options.targets is None:
        return list(case.targets)
    return [t for t in case.targets if t in options.targets]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {text}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text}")
    return value


@dataclass(frozen=True)
class Option:
    dest: str  # RunOptions field (and argparse dest)
    flags: tuple[str, ...]  # CLI flags
    help: str
    pytest_flag: str | None = None  # None: CLI only (pytest has its own, e.g. -k, -n)
    action: str | None = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None

    def kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"dest": self.dest, "help": self.help, "default": None}
        for key in ("action", "type", "choices", "metavar"):
            if getattr(self, key) is not None:
                kw[key] = getattr(self, key)
        if self.action in ("store_true",):
            kw.pop("default")
            kw["default"] = False
        return kw


RUN_OPTIONS: tuple[Option, ...] = (
    Option("targets", ("--target",), "targets to run (repeatable; default: each case's own): "
           "llvm, cuda, or a target the case or [tool.cl_validate.targets] declares",
           pytest_flag="--cl-target", action="append", metavar="TARGET"),
    Option("require_device", ("--require-device",),
           "fail (exit 2) instead of skipping numerics when a target's device is missing",
           pytest_flag="--cl-require-device", action="store_true"),
    Option("rpc_tracker", ("--rpc-tracker",), "TVM RPC tracker whose devices run the numerics "
           "of remote targets (default: $TVM_TRACKER_HOST:$TVM_TRACKER_PORT)",
           pytest_flag="--cl-rpc-tracker", type=parse_tracker, metavar="HOST:PORT"),
    Option("rpc_keys", ("--rpc-key",), "tracker key of the devices: KEY for every target "
           "without a device here, TARGET=KEY for one (repeatable; default: "
           "$TVM_TRACKER_KEY, else $RPC_DEVICE_KEY)",
           pytest_flag="--cl-rpc-key", action="append", type=parse_rpc_key,
           metavar="[TARGET=]KEY"),
    Option("jobs", ("-j", "--jobs"), "cases prepared and targets measured at once, each in a "
           "process of its own (default: the number of cores)", type=positive_int,
           metavar="N"),
    Option("timeout", ("--timeout",), "seconds per case, overriding each case's timeout",
           pytest_flag="--cl-timeout", type=positive_float, metavar="S"),
    Option("max_memory_mb", ("--max-memory-mb",),
           "resident memory cap of a case's processes, overriding each case's max_memory_mb",
           pytest_flag="--cl-max-memory-mb", type=positive_int, metavar="MB"),
    Option("no_isolation", ("--no-isolation",),
           "run cases in this process (no timeout or memory cap; for debugging)",
           action="store_true"),
    Option("cache_dir", ("--cache-dir",), "where measurements are cached (default: "
           ".cl_validate_cache; an unchanged case re-validates without compiling)",
           pytest_flag="--cl-cache-dir", metavar="DIR"),
    Option("no_cache", ("--no-cache",), "neither read nor write the cache",
           pytest_flag="--cl-no-cache", action="store_true"),
    Option("profile", ("--profile",), "time every kernel on the target's device (median of "
           "--profile-repeats runs) and report each transform's time and share; profiled "
           "runs bypass the cache", pytest_flag="--cl-profile", action="store_true"),
    Option("profile_repeats", ("--profile-repeats",), "timed runs per case x target under "
           "--profile (default: 5)", pytest_flag="--cl-profile-repeats", type=positive_int,
           metavar="N"),
    # CLI only: under pytest, pytest-xdist distributes the items.
    Option("shard", ("--shard",), "run only shard I of N (1-based) of the selected cases; N "
           "jobs with the same cases run each case exactly once", type=parse_shard, metavar="I/N"),
    Option("shard_timings", ("--shard-timings",), "balance --shard by the test times in this "
           "JUnit report of an earlier run (default: balance by case count)", metavar="FILE"),
)


def add_to_argparse(parser: argparse.ArgumentParser, only: Sequence[str] | None = None
                    ) -> None:
    """The run options (those whose dest is in `only`, when given) on an argparse parser."""
    for opt in RUN_OPTIONS:
        if only is None or opt.dest in only:
            parser.add_argument(*opt.flags, **opt.kwargs())


def add_to_pytest(group: Any) -> None:
    """Register the options on a pytest option group (``parser.getgroup("cl_validate")``)."""
    for opt in RUN_OPTIONS:
        if opt.pytest_flag:
            kw = opt.kwargs()
            kw["dest"] = f"cl_{opt.dest}"
            group.addoption(opt.pytest_flag, **kw)


def run_options(get: Callable[[str], Any], *, in_process_default: bool = False,
                **fixed: Any) -> RunOptions:
    """RunOptions from an option getter (``vars(args).get`` or a pytest config lookup) and the
    project's ``[tool.cl_validate]`` settings; `fixed` sets fields a command decides itself
    (``static_only`` for ``budget``, ...)."""
    config = load_config()
    targets = get("targets")
    no_isolation = bool(get("no_isolation")) or in_process_default
    return replace(RunOptions(
        targets=tuple(targets) if targets else None,
        require_device=bool(get("require_device")),
        jobs=get("jobs") or os.cpu_count() or 1,
        isolate=not no_isolation,
        timeout=get("timeout"),
        max_memory_mb=get("max_memory_mb"),
        stale_budget=config.stale_budget,
        cache_dir=resolve_dir(get("cache_dir"), bool(get("no_cache"))),
        rpc=rpc_settings(get("rpc_tracker"), get("rpc_keys")),
        profile=bool(get("profile")),
        profile_repeats=get("profile_repeats") or RunOptions.profile_repeats,
    ), **fixed)
