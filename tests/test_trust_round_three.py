"""Trust, round three (#43): a model breaks only its own case, and its verdict is true.

Each test reproduces one probe of the round and failed before its fix."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from cl_validate.errors import ExitCode
from cl_validate.session import sandbox
from tests.conftest import DATA, run_cli, tiny_case


def test_an_empty_selection_matches_trivially():
    """A top-k that selected nothing (k = 0, or a batch of none) was an internal error."""
    import numpy as np

    from cl_validate.measurements.selection import match_items

    for shape in ((1, 0, 4), (0, 5, 4)):
        empty = np.zeros(shape, np.float32)
        got = match_items(empty, empty, axis=1, atol=1e-5, rtol=1e-5, differing=0)
        assert got.actual.shape == shape and (got.reordered, got.differing) == (0, 0)


@pytest.mark.parametrize("extra, says", [
    ("description" + ".a" * 30000 + ' = "x"', "a key of 30001 dotted parts"),
    ("[" + "a" * 120000 + "]\nx = 1", "a table header of 1 dotted parts and 120001 characters"),
])
def test_a_case_file_key_that_would_make_the_parse_blow_up_is_one_line(extra, says, tmp_path):
    """(#43.3) 60 kB of dotted key parts made the TOML parse quadratic (MemoryError under
    3 GB, 22 GB unbounded) and a 120 kB table header took 20 s, in the run's parent: now one
    line at the key, before any parser runs."""
    import time

    case = tmp_path / "c.toml"
    case.write_text(tiny_case() + extra + "\n")
    t0 = time.perf_counter()
    code, out = run_cli(["run", str(case)]).both()
    assert time.perf_counter() - t0 < 10
    assert code == ExitCode.USAGE_ERROR and f"c.toml:17: {says}" in out, out
    assert out.count("\n") <= 2


SELECTION = """
[[outputs]]
name = "{name}"
selection = {{ axis = 1, differing = {differing} }}
"""


def test_the_parent_never_matches_a_selection(tmp_path, monkeypatch):
    """Selection matching grows with the square of the items: a 96 kB output with four
    seeds blocked the run loop for a minute, a 245 kB one asked for 29 GiB. It runs where
    the outputs are made (the case process, under the case's limits); the parent judges the
    matched arrays and, handed a sample no case process matched, compares element by
    element rather than match it."""
    import numpy as np

    from cl_validate.checks.numerics import match_selections
    from cl_validate.checks.verdict import Status
    from cl_validate.measurements import selection
    from cl_validate.measurements.measurement import Sample
    from cl_validate.spec import load_case
    from tests.conftest import judge_check

    path = tmp_path / "sel.toml"
    path.write_text(tiny_case(model="tiny_models:topk_head", tolerance=(1e-4, 1e-4))
                    + SELECTION.format(name="detections", differing=0))
    case = load_case(path)
    rng = np.random.default_rng(0)
    expected = rng.standard_normal((1, 24, 6)).astype(np.float32)
    permuted = expected[:, rng.permutation(24)]
    matched = match_selections(case, "llvm", Sample("", [permuted], [expected]))
    assert matched.selections is not None and matched.selections[0][0] > 20

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the parent matched a selection")

    monkeypatch.setattr(selection, "_pair", refuse)
    ok = judge_check("numerics", case, "llvm", samples=[matched])
    assert ok.status is Status.PASSED, ok.message
    unmatched = judge_check("numerics", case, "llvm", samples=[Sample("", [permuted],
                                                                      [expected])])
    assert unmatched.status is Status.FAILED, unmatched.message


#: Outputs PyTorch makes that the run read wrongly, and what each case's line says now
UNHELD_OUTPUTS = {
    "float8_output": "import failed: NotImplementedError: input_type torch.float8_e4m3fn",
    "deeply_nested_output": "the model's forward returned a list nested deeper than Python "
                            "can walk",
}


@pytest.mark.compile
def test_outputs_selections_and_threads_are_judged_truly(tmp_path):
    """One run of one case a probe (a run each was seven):

    - ``buf``: the model writes each result into a buffer and returns the buffer: PyTorch's
      outputs were kept as views, so the next draw's forward overwrote the first's expected
      values and numerics failed ("first break after import") though eager and export agree;
    - `UNHELD_OUTPUTS`: a float8 output and a 3000-deep nested one were "PyTorch forward
      failed", though the forward ran: the float8 one is now read through float32 (exact)
      and its case fails where it does (TVM's import), the nested one names its nesting;
    - ``wide``: a selection of 6144 items: the case's numerics error, by name, with the fix;
      its neighbour ``fine`` passes;
    - ``loose``: ``selection = {differing = 1000}`` on a 24-item top-k: every item may be
      another, so any program passes. The "cannot fail" check judges PyTorch's outputs on
      another input the same way, as a selection, and fails the case (it passed before: that
      check compared element by element);
    - ``pins`` (where cases are confined): a thread pinning itself by its thread id is
      refused (the filter compares the pid: it cannot tell the case's own threads from other
      processes); the verdict said the model reached outside its case. It says what happened
      and how a thread sets its own."""
    for f in ("tiny_models.py", "hostile_models.py", "hostile_state.py"):
        shutil.copy(DATA / f, tmp_path / f)
    cases = {"buf": tiny_case(model="hostile_models:returns_its_buffer", extra="seeds = 3"),
             "wide": tiny_case(model="hostile_models:wide_selection")
             + SELECTION.format(name="out", differing=0),
             "fine": tiny_case(),
             "loose": tiny_case(model="tiny_models:topk_head", tolerance=(1e-4, 1e-4))
             + SELECTION.format(name="detections", differing=1000)}
    cases |= {f: tiny_case(model=f"hostile_models:{f}") for f in UNHELD_OUTPUTS}
    if sandbox.available():
        cases["pins"] = tiny_case(model="hostile_state:pins_its_own_thread")
    for name, text in cases.items():
        (tmp_path / f"{name}.toml").write_text(text)
    code, out = run_cli(["run", str(tmp_path), "-j", "2", "--no-cache"]).both()
    assert code == ExitCode.CHECK_FAILED, out

    def line(name: str) -> str:
        (found,) = [ln for ln in out.splitlines() if re.match(rf"\[\d+/\d+\] \w+\s+{name}\s", ln)]
        return found

    assert line("buf").split()[1] == "PASS" and "numerics=ok" in line("buf"), out
    assert line("fine").split()[1] == "PASS", out
    for name, says in UNHELD_OUTPUTS.items():
        assert line(name).split()[1] == "ERROR" and says in out, out
    assert "PyTorch forward failed" not in out, out
    assert "numerics cannot compare a selection of 6144 items along axis 1 (at most 4096" \
        in out, out
    assert line("loose").split()[1] == "FAIL" and "numerics cannot fail" in out, out
    if "pins" in cases:
        assert line("pins").split()[1] != "PASS", out
        assert "or one of its own threads by its thread id (os.sched_setaffinity(" in out, out
        assert "a thread sets its own with 0" in out, out


def _runs(folder, tmp_path, env):  # type: ignore[no-untyped-def]
    from tests.conftest import run_parent

    args = ["run", str(folder), "--cache-dir", str(tmp_path / "cache")]
    return lambda: run_parent(args, {"CL_VALIDATE_TEST_DIR": str(folder), **env})


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm here")
def test_a_data_file_under_dev_shm_is_stamped(tmp_path):
    """Everything under /dev/ was left out, /dev/shm's regular files (a model's shared data)
    with the devices; now only what is not a regular file is."""
    import subprocess
    import sys
    import uuid

    data = f"/dev/shm/cl-test-{uuid.uuid4().hex}"
    Path(data).write_text("1.0")
    try:
        code = ("from cl_validate.session.file_record import FileRecorder\n"
                "r = FileRecorder()\nr.start()\n"
                f"open({data!r}).read()\nopen('/dev/null').read()\n"
                "print(sorted(s.path for s in r.stamps('/')))\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60, check=True).stdout
    finally:
        os.unlink(data)
    assert data in out and "/dev/null" not in out, out


#: Models that read ``data/scale.txt`` each a way a path resolution or a reader can hide
#: from the stamps; the C library's readers only where the open watcher runs.
RELATIVE_READERS = ["reads_its_scale_after_chdir", "reads_its_scale_by_dir_fd"] + (
    ["reads_its_scale_natively", "reads_its_scale_natively_in_a_worker"]
    if sandbox.available() and os.uname().machine in sandbox.WATCHED else [])
#: ``cat`` reads the scale: what another program reads is not seen, so a stamp set without it
#: would keep a PASS after the file changed; only where the open watcher runs.
CAT = "reads_its_scale_with_cat"
WATCHED = sandbox.available() and os.uname().machine in sandbox.WATCHED


@pytest.mark.compile
def test_every_way_a_case_reads_its_data_is_stamped(tmp_path):
    """One folder, one case a reader, four runs (a run of their own each was 14 runs):

    - ``edits_its_scale_after_reading``: the scale file is saved anew after the case read it.
      Stamped when the case ended, the stamp was of the new file and the warm run reused the
      measurement made from the old one; stamped as read, the warm run measures again.
    - `RELATIVE_READERS`: ``data/scale.txt`` read by a relative path inside
      ``contextlib.chdir``, or with ``os.open(name, dir_fd=fd)`` (the audit event carries the
      name, not the descriptor): resolved against the run's directory, the stamp was of no
      file, and an edit was missed. Read by the C library's ``fopen`` (in the case process,
      or in a worker it forked): Python never saw it; the open watcher stamps it.
    - ``reads_its_scale_with_cat`` (`CAT`): its model runs each run, and the run says why.
    - ``execs_its_helper_module``: ``exec_module`` of a helper whose ``__pycache__`` copy is
      current opens only that copy: the source was never stamped, and an edit to it (which
      Python recompiles on the next import) was a stale cache hit.
    - ``imports_its_helper_from_lib``: a module imported from a folder late on the import
      path; a file of the same name put later in an earlier folder (the case's own) is what
      Python imports next time. Only the files read were stamped, so the warm run reused the
      measurement made with the other module; the places searched first are stamped absent.
    """
    import importlib.util
    import py_compile
    import time

    models = ["edits_its_scale_after_reading", *RELATIVE_READERS, "execs_its_helper_module",
              "imports_its_helper_from_lib"] + ([CAT] if WATCHED else [])
    folder = tmp_path / "cases"
    folder.mkdir()
    for f in ("tiny_models.py", "hostile_state.py"):
        shutil.copy(DATA / f, folder / f)
    for model in models:
        (folder / f"{model}.toml").write_text(tiny_case(model=f"hostile_state:{model}"))
    (folder / "scale.txt").write_text("1.0")
    (folder / "data").mkdir()
    (folder / "data" / "scale.txt").write_text("1.0")
    helper = folder / "helper.py"
    helper.write_text("SCALE = 1.0\n")
    py_compile.compile(str(helper), cfile=importlib.util.cache_from_source(str(helper)))
    (folder / "lib").mkdir()
    (folder / "lib" / "cl_test_shadowed.py").write_text("SCALE = 1.0\n")
    run = _runs(folder, tmp_path, {"CL_VALIDATE_TEST_NEW_SCALE": "2.0"})

    def builds() -> dict[str, int]:
        notes = (folder / "builds.txt").read_text().split()
        return {m: notes.count(m) for m in models}

    def expect(runs: dict[str, int], out: str) -> None:
        got = builds()
        assert {m: got[m] for m in runs} == runs, (out, got)

    cold = run()
    assert cold.returncode == ExitCode.OK, cold.stdout
    expect(dict.fromkeys(models, 1), cold.stdout)
    warm = run()
    assert warm.returncode == ExitCode.OK, warm.stdout
    once = ["edits_its_scale_after_reading"] + ([CAT] if WATCHED else [])
    expect({**dict.fromkeys(models, 1), **dict.fromkeys(once, 2)}, warm.stdout)
    if WATCHED:
        for out in (cold.stdout, warm.stdout):
            assert f"cache: {CAT} not kept for the next run: the case ran cat" in out, out

    (folder / "data" / "scale.txt").write_text("1.5")
    time.sleep(0.01)
    helper.write_text("SCALE = 1.25\n")
    (folder / "cl_test_shadowed.py").write_text("SCALE = 1.5\n")
    edited = run()
    assert edited.returncode == ExitCode.OK, edited.stdout
    edits = [*RELATIVE_READERS, "execs_its_helper_module", "imports_its_helper_from_lib"]
    expect(dict.fromkeys(edits, 2), edited.stdout)
    again = run()  # the shadowing module stamped again: a hit
    assert again.returncode == ExitCode.OK, again.stdout
    expect({"imports_its_helper_from_lib": 2}, again.stdout)


def test_the_places_searched_before_a_module_are_stamped_absent(tmp_path):
    """In a process of its own (the recorder's hook stays): a package's module found in its
    second folder has every name the path finder takes in the first stamped absent."""
    import json
    import subprocess
    import sys

    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    (second / "pkg_shadow_probe").mkdir(parents=True)
    (second / "pkg_shadow_probe" / "__init__.py").write_text("")
    code = ("import json, sys\nfrom cl_validate.session.file_record import FileRecorder\n"
            f"sys.path[:0] = [{str(first)!r}, {str(second)!r}]\n"
            "r = FileRecorder()\nr.start()\nimport pkg_shadow_probe\n"
            "print(json.dumps([(s.path, s.absent) for s in r.stamps('/')]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    stamps = dict(json.loads(out))
    assert stamps[str(second / "pkg_shadow_probe" / "__init__.py")] is False
    absent = {p for p, a in stamps.items() if a}
    assert str(first / "pkg_shadow_probe") in absent and \
        str(first / "pkg_shadow_probe.py") in absent, absent
    assert not any(p.startswith(str(second)) for p in absent), absent

