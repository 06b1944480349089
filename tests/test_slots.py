"""How a run shares its slots between preparing cases and measuring their targets
(`cl_validate.suite.pool.share_slots`): no slot idles while there is work, and cases are
prepared ahead so that the end of a run has targets to spread over the slots."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cl_validate.suite.pool import share_slots
from tests.conftest import benchmark_module


def test_a_run_starts_by_preparing_a_case_in_every_slot():
    assert share_slots(2, 2, reserve=0, waiting=0, upcoming=[2, 2]) == (2, 0)


def test_a_case_is_prepared_ahead_while_fewer_targets_than_slots_are_in_reserve():
    # one target waits; the freed slot prepares the next case, so that when the waiting one
    # and the case's own come, the slots have enough to do
    assert share_slots(1, 2, reserve=1, waiting=1, upcoming=[2]) == (1, 0)
    # two targets in reserve: the slot measures the first of them
    assert share_slots(1, 2, reserve=2, waiting=2, upcoming=[2]) == (0, 1)
    # the reserve counts the targets of a case being prepared: nothing waits yet, and
    # the slot goes to the next case all the same (it has nothing else to do)
    assert share_slots(1, 2, reserve=2, waiting=0, upcoming=[2]) == (1, 0)


def test_without_cases_left_or_a_zygote_ready_the_slots_go_to_targets():
    assert share_slots(2, 2, reserve=3, waiting=3, upcoming=[]) == (0, 2)
    assert share_slots(2, 4, reserve=1, waiting=1, upcoming=[]) == (0, 1)
    assert share_slots(0, 2, reserve=0, waiting=4, upcoming=[2]) == (0, 0)


@given(free=st.integers(-1, 8), jobs=st.integers(1, 8), reserve=st.integers(0, 12),
       waiting=st.integers(0, 12), upcoming=st.lists(st.integers(1, 4), max_size=8))
def test_no_slot_idles_while_there_is_work_and_none_is_given_twice(free, jobs, reserve,
                                                                    waiting, upcoming):
    prepare, grant = share_slots(free, jobs, reserve, waiting, upcoming)
    assert 0 <= prepare <= len(upcoming) and 0 <= grant <= waiting
    assert prepare + grant == max(0, min(free, waiting + len(upcoming)))
    if reserve >= jobs:  # enough in reserve: targets first
        assert grant == max(0, min(free, waiting))


def test_the_replay_in_benchmarks_runs_the_pools_policy_and_never_beats_the_bound():
    replay = benchmark_module("slots")
    one = [(3.0, 10.0, 4.0)]  # one case: its export, then both targets side by side
    assert replay.replay(one, 2, ahead=True) == replay.replay(one, 2, ahead=False) == 13.0
    two = [(3.0, 10.0, 4.0), (2.0, 6.0, 5.0)]
    for ahead in (True, False):
        for jobs in (1, 2, 3):
            wall = replay.replay(two, jobs, ahead)
            assert wall >= sum(map(sum, two)) / jobs - 1e-9
    assert replay.replay(two, 1, ahead=True) == sum(map(sum, two))  # one slot: all in a row
