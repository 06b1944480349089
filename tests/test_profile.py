"""``--profile``: every kernel timed on the target's device with the Relax VM's instrument
hook, each transform's time and share of kernel time reported with its spread, and the
optional ``transform_time_share`` budget. Times are never asserted as figures (a shared runner
is noise); what is asserted is that they were measured, where they go, and how the budget
judges them."""

from __future__ import annotations

import pytest

from cl_validate.checks.verdict import Status
from cl_validate.errors import CaseFileError, ExitCode
from cl_validate.measurements.kernel_list import Kernel, KernelList, Transform
from cl_validate.measurements.profile import Profile
from cl_validate.session.in_process import judge_in_process
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions
from tests.conftest import judge_check, run_cli, tiny_case

BUDGETED = tiny_case(2).replace("layout_transforms = 2",
                                "layout_transforms = 2\ntransform_time_share = {share}")


@pytest.mark.compile
def test_profile_times_every_kernel_in_every_run(write_case):
    case = load_case(write_case(tiny_case(2)))
    (r,) = judge_in_process([case], RunOptions(isolate=False, profile=True, profile_repeats=3))
    assert r.profile is not None and r.kernels is not None
    assert r.profile.repeats == 3 and len(r.profile.kernel_ns) == len(r.kernels)
    assert all(len(ts) == 3 and all(t > 0 for t in ts) for ts in r.profile.kernel_ns)
    share = r.profile.transform_share(r.kernels)
    assert share is not None and 0 < share.low <= share.median <= share.high < 1
    c = r.check("transform_time_share")  # reported, not judged: the case sets no budget
    assert c.status is Status.SKIPPED and c.message.startswith(
        "no transform_time_share budget declared (runtime transforms take ")
    assert c.body.startswith("kernel times: median of 3 runs on cpu")
    assert c.body.count("kernel 0 transpose: ") == 1 and "of kernel time" in c.body


@pytest.mark.compile
def test_without_profile_nothing_is_timed(write_case):
    case = load_case(write_case(tiny_case(2)))
    (r,) = judge_in_process([case], RunOptions(isolate=False))
    assert r.profile is None
    c = r.check("transform_time_share")
    assert c.status is Status.SKIPPED and c.message.startswith("not profiled (--profile")


@pytest.mark.compile
def test_profile_on_llvm_prints_each_transforms_measured_time(write_case, tmp_path):
    path = write_case(tiny_case(2))
    cache = str(tmp_path / "cache")
    args = ["run", str(path), "--profile", "--profile-repeats", "2", "--no-isolation",
            "--cache-dir", cache]
    got = run_cli(args)
    assert got.code == ExitCode.OK, got.out
    report = got.out.split("[llvm] kernel times: ", 1)[1]
    assert report.startswith("median of 2 runs on cpu")
    assert "  kernel 0 transpose: " in report and " of kernel time  permute_dims" in report
    again = run_cli(args)  # timings are never answered from the cache
    assert "reused" not in again.out and "[llvm] kernel times: " in again.out


@pytest.mark.compile
def test_a_time_share_budget_profiles_the_case_and_fails_above_its_ceiling(write_case):
    tight = load_case(write_case(BUDGETED.format(share="1e-9"), "tight.toml"))
    (r,) = judge_in_process([tight], RunOptions(isolate=False, profile_repeats=2))
    c = r.check("transform_time_share")
    assert r.profile is not None  # the budget asks for the times; no --profile needed
    assert c.status is Status.FAILED and c.kind == "BudgetExceeded" and c.line == 13
    assert " > budget 1e-07% (llvm, median of 2 runs, " in c.message
    loose = load_case(write_case(BUDGETED.format(share="1.0"), "loose.toml"))
    (r,) = judge_in_process([loose], RunOptions(isolate=False, profile_repeats=2))
    assert r.check("transform_time_share").status is Status.PASSED


def _kernels() -> KernelList:
    t = Transform("permute_dims", 0, "transpose", False, (1, 3, 8, 8), (0, 2, 3, 1))
    return KernelList([Kernel(0, "transpose", ("transpose",), (t,)),
                       Kernel(1, "fused_conv2d_add", ("conv2d", "add"))])


def test_the_share_is_the_median_of_each_runs_ratio(write_case):
    """A run that is slow as a whole (a busy machine) moves the ratio little; the verdict is
    on the median of the runs, and the spread is shown beside it."""
    profile = Profile("cpu:0", 3, ((10, 20, 12), (90, 180, 60)))
    share = profile.transform_share(_kernels())
    assert share is not None
    assert (share.low, share.median, share.high) == (0.1, 0.1, 12 / 72)
    case = load_case(write_case(BUDGETED.format(share="0.12")))
    c = judge_check("transform_time_share", case, "llvm", kernels=_kernels(), profile=profile)
    assert c.status is Status.PASSED and c.message == ("transform_time_share 10.0% <= budget "
                                                        "12.0% (median of 3 runs)")


@pytest.mark.parametrize(("value", "says"), [
    ("5", "transform_time_share must be a fraction in (0, 1], got 5 (hint: 0.05 is 5%)"),
    ("0", "transform_time_share must be a fraction in (0, 1], got 0"),
    ('"5%"', "transform_time_share must be a number, got a string"),
])
def test_a_bad_time_share_budget_is_a_one_line_error(write_case, value, says):
    with pytest.raises(CaseFileError) as err:
        load_case(write_case(BUDGETED.format(share=value)))
    assert says in str(err.value) and err.value.line == 13


def test_profile_in_a_case_file_must_be_a_boolean(write_case):
    with pytest.raises(CaseFileError, match="profile must be true or false, got 'yes'"):
        load_case(write_case(tiny_case(2, extra='profile = "yes"')))
    assert load_case(write_case(tiny_case(2, extra="profile = true"))).profiled("llvm")
