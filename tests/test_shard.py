"""``--shard I/N``: a pure, deterministic split that runs every case exactly once over N jobs,
balanced by recorded times. No compile here: cases are real case files, loaded by spec."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from cl_validate.checks.registry import names
from cl_validate.checks.verdict import CaseResult, CheckResult, Status
from cl_validate.cli import main
from cl_validate.errors import ExitCode, UsageError
from cl_validate.report.junit import write_junit
from cl_validate.spec import CaseSpec, load_case
from cl_validate.spec.options import parse_shard
from cl_validate.suite import shard
from tests.conftest import DATA, MINIMAL

CHECKS = names()

NAMES = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"]


@pytest.fixture
def cases(tmp_path: Path) -> list[CaseSpec]:
    out = []
    for name in NAMES:
        path = tmp_path / f"{name}.toml"
        path.write_text(MINIMAL, encoding="utf-8")
        out.append(load_case(path))
    return out


def _names(shards: list[list[CaseSpec]]) -> list[list[str]]:
    return [[c.name for c in s] for s in shards]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 9])
@pytest.mark.parametrize("timed", [False, True])
def test_every_case_runs_exactly_once(cases, n, timed):
    timings = {c.name: float(i * 7 % 5 + 1) for i, c in enumerate(cases)} if timed else None
    shards = shard.split(cases, n, timings)
    assert len(shards) == n
    flat = [name for s in _names(shards) for name in s]
    assert sorted(flat) == sorted(NAMES)  # each once: no loss, no duplicate
    # Within a shard the cases keep the input order (the order the run reports them in).
    for s in _names(shards):
        assert s == [name for name in NAMES if name in s]


def test_select_over_all_indices_is_a_partition(cases):
    timings = {"alpha": 30.0, "echo": 12.0}
    picked = [shard.select(cases, (i, 3), timings) for i in (1, 2, 3)]
    assert sorted(c.name for p in picked for c in p) == sorted(NAMES)


def test_split_is_deterministic_whatever_the_input_order(cases):
    timings = {c.name: 5.0 for c in cases}  # all ties: broken by name, not by input order
    reference = [sorted(s) for s in _names(shard.split(cases, 3, timings))]
    rng = random.Random(0)
    for _ in range(20):
        shuffled = cases[:]
        rng.shuffle(shuffled)
        assert [sorted(s) for s in _names(shard.split(shuffled, 3, timings))] == reference
    # Without timings: balanced by count, sizes differ by at most one.
    sizes = sorted(len(s) for s in shard.split(cases, 3))
    assert sizes == [2, 2, 3]


def test_balance_follows_recorded_times(cases):
    timings = {"alpha": 100.0, **{n: 1.0 for n in NAMES[1:]}}
    by_time = _names(shard.split(cases, 2, timings))
    assert ["alpha"] in by_time  # the slow case runs alone; the six fast ones share a job
    by_count = _names(shard.split(cases, 2))
    assert ["alpha"] not in by_count


def test_greedy_stays_within_the_lpt_bound(cases):
    rng = random.Random(1)
    for _ in range(20):
        timings = {c.name: rng.uniform(1, 60) for c in cases}
        for n in (2, 3):
            loads = [sum(timings[c.name] for c in s) for s in shard.split(cases, n, timings)]
            # Optimum by brute force over all assignments (7 cases: cheap).
            best = min(max(sum(timings[c.name] for c, k in zip(cases, a, strict=True) if k == j)
                           for j in range(n))
                       for a in itertools.product(range(n), repeat=len(cases)))
            assert max(loads) <= best * (4 / 3 - 1 / (3 * n)) + 1e-9


def test_a_case_without_a_recorded_time_weighs_the_median(cases):
    timings = {"alpha": 10.0, "bravo": 20.0, "charlie": 30.0}
    weights = dict(zip(NAMES, shard._weights(cases, timings), strict=True))
    assert weights["alpha"] == 10.0 and weights["golf"] == 20.0


@pytest.mark.parametrize(("text", "message"), [
    ("3/2", "--shard 3/2: shard index must be in 1..2"),
    ("0/4", "--shard 0/4: shard index must be in 1..4"),
    ("1/0", "--shard 1/0: the number of shards must be >= 1"),
    ("two", "--shard two: expected I/N, e.g. --shard 1/4"),
    ("1/2/3", "--shard 1/2/3: expected I/N, e.g. --shard 1/4"),
    ("-1/2", "--shard -1/2: expected I/N, e.g. --shard 1/4"),
])
def test_bad_shard_values_are_one_line_usage_errors(text, message):
    with pytest.raises(UsageError) as exc:
        parse_shard(text)
    assert exc.value.message == message
    assert parse_shard("2/4") == (2, 4)


def test_cli_bad_shard_exits_2_in_one_line(tmp_path, capsys):
    (tmp_path / "a.toml").write_text(MINIMAL, encoding="utf-8")
    code = main(["run", str(tmp_path), "--shard", "3/2"])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE_ERROR
    assert err == "cl-validate: error: --shard 3/2: shard index must be in 1..2\n"


def test_cli_empty_shard_writes_an_empty_report_and_passes(tmp_path, capsys):
    import xmlschema

    for name in ("a", "b"):
        (tmp_path / f"{name}.toml").write_text(MINIMAL, encoding="utf-8")
    junit = tmp_path / "reports" / "shard-3.xml"
    code = main(["run", str(tmp_path), "--shard", "3/3", "--junit", str(junit)])
    out = capsys.readouterr().out
    assert code == ExitCode.OK
    assert "shard 3/3: no cases to run" in out
    xmlschema.XMLSchema(str(DATA / "junit-cl_validate.xsd")).validate(str(junit))


def _result(case: CaseSpec, target: str, seconds: float) -> CaseResult:
    checks = [CheckResult(ch, Status.PASSED, "ok", seconds=seconds if i == 0 else 0.5)
              for i, ch in enumerate(CHECKS)]
    return CaseResult(case, target, checks, seconds)


def test_timings_come_from_a_previous_junit_report(cases, tmp_path):
    a, b = cases[0], cases[1]
    report = write_junit([_result(a, "llvm", 40.0), _result(a, "cuda", 4.0),
                          _result(b, "llvm", 2.0)], tmp_path / "prev.xml")
    rest = 0.5 * (len(CHECKS) - 1)
    both = shard.load_timings(report)
    assert both == {"alpha": pytest.approx(44.0 + 2 * rest), "bravo": pytest.approx(2.0 + rest)}
    assert shard.load_timings(report, ["cuda"]) == {"alpha": pytest.approx(4.0 + rest)}


@pytest.mark.parametrize(("content", "fragment"), [
    (None, "cannot read --shard-timings file: No such file or directory"),
    ("{}", "not well-formed XML"),
    ("<html><body/></html>", "not a JUnit report (root element <html>)"),
    ("<testsuites><testsuite", "not well-formed XML"),
])
def test_unusable_timings_file_is_a_usage_error(tmp_path, content, fragment):
    path = tmp_path / "t.xml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(UsageError) as exc:
        shard.load_timings(path)
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_cli_shard_timings_error_comes_before_any_compile(tmp_path, capsys):
    (tmp_path / "a.toml").write_text(MINIMAL, encoding="utf-8")
    code = main(["run", str(tmp_path), "--shard", "1/2", "--shard-timings",
                 str(tmp_path / "missing.xml")])
    captured = capsys.readouterr()
    assert code == ExitCode.USAGE_ERROR and captured.out == ""
    assert "missing.xml: cannot read --shard-timings file" in captured.err


def test_shard_is_not_a_pytest_option():
    from cl_validate.spec.options import RUN_OPTIONS

    by_dest = {o.dest: o for o in RUN_OPTIONS}
    assert by_dest["shard"].pytest_flag is None and by_dest["shard_timings"].pytest_flag is None

