"""Process trees as the run reads them (`cl_validate.procs`): the cheap per-process reads the
parent makes ten times a second must see what the full pass over ``/proc`` sees: a detached
grandchild a subreaper adopted, no zombie unless asked, the memory the kernel reports."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from cl_validate import procs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="process trees are read from Linux's /proc")

# A subreaper with: a child that sleeps, a detached grandchild (double fork: its parent
# exits, so it is re-parented to the subreaper), and a child that ended and is never
# collected (a zombie). Prints its pid when all of that is in place.
_SUBREAPER = """
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
if os.fork() == 0:
    time.sleep(60); os._exit(0)
mid = os.fork()
if mid == 0:
    if os.fork() == 0:
        os.setsid(); time.sleep(60); os._exit(0)
    os._exit(0)
os.waitpid(mid, 0)
if os.fork() == 0:
    os._exit(0)
time.sleep(0.3)
print(os.getpid(), flush=True)
time.sleep(60)
"""


@pytest.fixture
def subreaper():
    proc = subprocess.Popen([sys.executable, "-c", _SUBREAPER], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        assert int(proc.stdout.readline()) == proc.pid
        yield proc.pid
    finally:
        procs.kill([*procs.descendants(proc.pid), proc.pid])
        proc.wait()


def _full_scan_children(pid: int, zombies: bool) -> set[int]:
    return {c for c, parent in procs._parents(zombies=zombies).items() if parent == pid}


@pytest.mark.parametrize("children_files", [True, False], ids=["children-files", "full-scan"])
def test_the_cheap_reads_see_what_a_full_pass_over_proc_sees(subreaper, monkeypatch,
                                                              children_files):
    if children_files and not os.path.exists(
            f"/proc/self/task/{threading.get_native_id()}/children"):
        pytest.skip("this kernel has no /proc/PID/task/TID/children")
    monkeypatch.setattr(procs, "_CHILDREN_FILES", None if children_files else False)
    live = _full_scan_children(subreaper, zombies=False)
    every = _full_scan_children(subreaper, zombies=True)
    assert len(live) == 2 and len(every) == 3  # the sleeper, the adopted one; the zombie
    assert set(procs.children(subreaper)) == live
    assert set(procs.children(subreaper, zombies=True)) == every
    assert set(procs.tree(subreaper)) == live == set(procs.descendants(subreaper))


def test_a_tree_is_children_before_grandchildren_and_ends_with_its_processes():
    proc = subprocess.Popen(["bash", "-c", "bash -c 'sleep 60; true' & wait"])
    try:
        deadline = time.monotonic() + 10
        while len(procs.tree(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        tree = procs.tree(proc.pid)
        assert len(tree) == 2
        assert procs.children(proc.pid) == tree[:1]
        assert procs.children(tree[0]) == tree[1:]
    finally:
        procs.kill([*procs.descendants(proc.pid), proc.pid])
        proc.wait()
    assert procs.tree(proc.pid) == [] and procs.children(proc.pid) == []


def test_rss_is_the_kernels_vmrss():
    with open(f"/proc/{os.getpid()}/status", encoding="ascii") as f:
        vmrss = next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))
    rss = procs.rss_mb([os.getpid()])
    assert rss is not None and abs(rss - vmrss) < max(2.0, 0.05 * vmrss)
    assert procs.rss_mb([2 ** 22 + 1]) is None  # no such process
