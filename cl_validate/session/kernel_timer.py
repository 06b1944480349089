"""``--profile``: time every kernel of a compiled program on the target's device.

TVM 0.27 has no VM profiler any more (``VirtualMachine(..., profile=True)`` and
``vm.profile`` went with ``tvm.runtime.profiling`` in apache/tvm#19455); what the Relax VM
keeps is its instrument hook, ``vm.set_instrument``, which it calls right before and right
after every ``Call`` instruction with the callee's name. That is the hook the old profiler sat
on, so it is what this uses: the device is synchronized and the clock read at both ends of
every call, the program is run once to warm up (the first run pays one-time set-up) and then
`repeats` times, and each call is matched to its kernel in the fused kernel list by name, in
execution order (the VM's own builtins between kernels are left out).

What a figure means: the wall time of one kernel call, device synchronized, inside a whole
run of the program — caches as the real run leaves them. The hook's own cost (a Python call
on each side, about a microsecond between the clock reads) is inside every figure: kernels of
a few microseconds read high, whole networks do not. Runs in a target's process (it imports TVM).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cl_validate.checks.transform_time_share import TimeShareKind
from cl_validate.compile.program import Compiled
from cl_validate.compile.tvm_targets import device_available, device_for
from cl_validate.ir import weight_params
from cl_validate.measurements.kernel_list import KernelList
from cl_validate.measurements.kinds import SkipKind
from cl_validate.measurements.measurement import Skip
from cl_validate.measurements.profile import Profile
from cl_validate.session.device_host import host_for, hosted, time_calls
from cl_validate.session.inputs import make_inputs, program_args, program_arrays
from cl_validate.spec import CaseSpec
from cl_validate.spec.options import RunOptions
from cl_validate.spec.placement import placement


def wants_profile(case: CaseSpec, target: str, options: RunOptions) -> bool:
    """``--profile``, ``profile = true`` in the case, or a ``transform_time_share`` budget."""
    return options.profile or case.profiled(target)


def profile_case(case: CaseSpec, compiled: Compiled, params: Mapping[str, Any], target: str,
                 kernels: KernelList, options: RunOptions) -> tuple[Profile | None, Skip | None]:
    """The case's profile on `target` when the run asks for one, or why there is none; (None,
    None) when nobody asked. Inputs are the case's, each dynamic dimension at its maximum (as
    the bytes)."""
    if not wants_profile(case, target, options):
        return None, None
    if options.static_only:
        return None, Skip("static checks only: not profiled", SkipKind.STATIC_ONLY)
    tdef = case.target_def(target)
    place = placement(tdef, options.rpc, device_available)
    if place.where != "local":  # the timing hook is a Python callback: it cannot cross RPC
        why = place.missing if not place.runs else f"{target} runs under {place.remote()}"
        return None, Skip(f"not profiled: {why}; kernels are timed on this machine only",
                          SkipKind.DEVICE_UNAVAILABLE)
    if compiled.executable is None:
        return None, Skip(f"not profiled: not built here ({compiled.build_skipped})",
                          SkipKind.DEVICE_UNAVAILABLE)
    sizes = case.max_sizes()
    try:
        unbound = [params[p.name] for p in weight_params(compiled.final["main"])]
        names, repeats = [k.name for k in kernels], options.profile_repeats
        if hosted(tdef.device):  # a GPU opens in a process of its own (`device_host`)
            arrays = program_arrays(case, make_inputs(case, sizes), unbound)
            timed = host_for(tdef.device).profile_main(compiled.executable, arrays, names,
                                                       repeats)
            where, per_kernel = timed.device, timed.per_kernel
        else:
            device = device_for(tdef.device)
            args = program_args(case, make_inputs(case, sizes), device, unbound)
            where = str(device)
            per_kernel = time_calls(compiled.executable, device, args, names, repeats)
        return Profile(where, repeats, tuple(tuple(ts) for ts in per_kernel), dict(sizes)), None
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return None, Skip(f"profiling failed ({target}): {type(exc).__name__}: {first}",
                          TimeShareKind.PROFILE_ERROR)
