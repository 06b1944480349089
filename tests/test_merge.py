"""``cl-validate merge``: shard reports from real tiny runs merge into one valid report, and
every kind of bad input is a one-line error that writes nothing."""

from __future__ import annotations

import re
import shutil
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cl_validate.cli import main
from cl_validate.errors import ExitCode
from tests.conftest import run_cli, tiny_case

DATA = Path(__file__).parent / "data"


CASES = {  # one passes on llvm and cuda, one is over budget, one passes on llvm only
    "ok.toml": tiny_case(targets=None),
    "over.toml": tiny_case(1),
    "head.toml": tiny_case(1, model="tiny_models:classifier"),
}


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Two real shard runs (in-process compiles of tiny models) and their merge."""
    root = tmp_path_factory.mktemp("merge")
    cases = root / "cases"
    cases.mkdir()
    shutil.copy(DATA / "tiny_models.py", cases / "tiny_models.py")
    for name, text in CASES.items():
        (cases / name).write_text(text, encoding="utf-8")
    reports = root / "reports"
    codes = []
    for i in (1, 2):
        code, out, err = run_cli(["run", str(cases), "--target", "llvm", "--target", "cuda",
                               "--no-isolation", "--shard", f"{i}/2",
                               "--junit", str(reports / f"shard-{i}.xml")])
        codes.append((code, out, err))
    merged = reports / "cpu.xml"
    merge = run_cli(["merge", str(reports / "shard-1.xml"), str(reports / "shard-2.xml"),
                  "-o", str(merged)])
    return {"root": root, "reports": reports, "codes": codes, "merge": merge,
            "merged": merged}


def _testcases(path: Path) -> list[tuple[str, str, str]]:
    root = ET.parse(path).getroot()
    return [(s.get("name", ""), tc.get("classname", ""), tc.get("name", ""))
            for s in root.iter("testsuite") for tc in s.findall("testcase")]



@pytest.mark.compile
def test_shards_split_the_cases_between_them(shards):
    reports = shards["reports"]
    one = {c for _, c, _ in _testcases(reports / "shard-1.xml")}
    two = {c for _, c, _ in _testcases(reports / "shard-2.xml")}
    assert one and two and not one & two
    assert one | two == {"ok", "over", "head"}
    # The over-budget case fails its shard (exit 1); the other shard's exit says its own.
    codes = {frozenset(c for _, c, _ in _testcases(reports / f"shard-{i}.xml")): code
             for i, (code, _, _) in zip((1, 2), shards["codes"], strict=True)}
    for names, code in codes.items():
        assert code == (ExitCode.CHECK_FAILED if "over" in names else ExitCode.OK)


@pytest.mark.compile
def test_merge_keeps_every_testcase_once_with_suites_per_target(shards):
    code, out, err = shards["merge"]
    assert code == ExitCode.OK, err
    reports = shards["reports"]
    parts = _testcases(reports / "shard-1.xml") + _testcases(reports / "shard-2.xml")
    merged = _testcases(shards["merged"])
    assert sorted(merged) == sorted(parts) and len(set(merged)) == len(merged)
    root = ET.parse(shards["merged"]).getroot()
    assert [s.get("name") for s in root.findall("testsuite")] == \
        sorted({s for s, _, _ in parts}, key=["cl_validate.llvm", "cl_validate.cuda"].index)
    assert "merged 2 report(s) into" in out
    assert "| cl_validate.llvm |" in out and "`over` layout_transforms" in out


@pytest.mark.compile
def test_merged_statistics_are_recomputed(shards):
    root = ET.parse(shards["merged"]).getroot()
    total = dict.fromkeys(("tests", "failures", "errors"), 0)
    for suite in root.findall("testsuite"):
        tcs = suite.findall("testcase")
        expect = {"tests": len(tcs), "failures": sum(tc.find("failure") is not None for tc in tcs),
                  "errors": sum(tc.find("error") is not None for tc in tcs),
                  "skipped": sum(tc.find("skipped") is not None for tc in tcs)}
        assert {k: int(suite.get(k, "-1")) for k in expect} == expect
        for k in total:
            total[k] += expect[k]
    assert {k: int(root.get(k, "-1")) for k in total} == total
    llvm = next(s for s in root.findall("testsuite") if s.get("name") == "cl_validate.llvm")
    assert int(llvm.get("failures", "0")) >= 1  # over's layout_transforms


@pytest.mark.compile
def test_merged_report_validates_against_the_schema(shards):
    import xmlschema

    xmlschema.XMLSchema(str(DATA / "junit-cl_validate.xsd")).validate(str(shards["merged"]))


@pytest.mark.compile
def test_failure_details_survive_the_merge(shards):
    root = ET.parse(shards["merged"]).getroot()
    (failure,) = [tc.find("failure") for tc in root.iter("testcase")
                  if tc.get("classname") == "over" and tc.get("name") == "layout_transforms[llvm]"]
    assert failure is not None
    assert (failure.get("message") or "").startswith("layout_transforms 2 > budget 1 (llvm)")
    assert ">>" in (failure.text or "")


@pytest.mark.compile
def test_a_report_from_before_names_carried_the_target_still_merges(shards, tmp_path):
    """Reports written before #14 named a check without its target; merged, they read as
    now, and collide with a new report of the same cases."""
    old = tmp_path / "old-shard-1.xml"
    old.write_text(re.sub(r'name="(\w+)\[(llvm|cuda)\]"', r'name="\1"',
                          (shards["reports"] / "shard-1.xml").read_text()))
    assert "[llvm]" not in old.read_text()
    out = tmp_path / "merged.xml"
    code, _, err = run_cli(["merge", str(old), str(shards["reports"] / "shard-2.xml"), "-o",
                            str(out)])
    assert code == ExitCode.OK, err
    assert sorted(_testcases(out)) == sorted(_testcases(shards["merged"]))
    code, _, err = run_cli(["merge", str(old), str(shards["reports"] / "shard-1.xml"), "-o",
                            str(tmp_path / "twice.xml")])
    assert code == ExitCode.USAGE_ERROR and "duplicate testcase" in err


@pytest.mark.compile
def test_duplicate_testcase_names_both_files(shards, tmp_path):
    copy = tmp_path / "copy.xml"
    shutil.copy(shards["reports"] / "shard-1.xml", copy)
    out = tmp_path / "out.xml"
    code, _, err = run_cli(["merge", str(shards["reports"] / "shard-1.xml"), str(copy),
                         "-o", str(out)])
    assert code == ExitCode.USAGE_ERROR
    assert err.count("\n") == 1 and "duplicate testcase" in err
    assert "shard-1.xml" in err and "copy.xml" in err
    assert not out.exists()


@pytest.mark.compile
def test_an_empty_shard_merges(shards, tmp_path):
    empty = tmp_path / "shard-3.xml"
    empty.write_text('<?xml version="1.0"?><testsuites name="cl_validate" tests="0" '
                     'failures="0" errors="0" time="0"/>', encoding="utf-8")
    out = tmp_path / "all.xml"
    code, _, err = run_cli(["merge", str(shards["merged"]), str(empty), "-o", str(out)])
    assert code == ExitCode.OK, err
    assert sorted(_testcases(out)) == sorted(_testcases(shards["merged"]))


def test_a_bare_testsuite_and_same_named_suites_merge(tmp_path):
    a = tmp_path / "a.xml"
    b = tmp_path / "b.xml"
    a.write_text('<testsuite name="s" tests="1" failures="0" errors="0" time="1.5">'
                 '<testcase classname="c" name="t1" time="1.5"/></testsuite>')
    b.write_text('<testsuites><testsuite name="s" tests="1" failures="1" errors="0" time="2">'
                 '<testcase classname="c" name="t2" time="2"><failure message="m">x</failure>'
                 '</testcase></testsuite></testsuites>')
    out = tmp_path / "o.xml"
    code, _, err = run_cli(["merge", str(a), str(b), "-o", str(out)])
    assert code == ExitCode.OK, err
    (suite,) = ET.parse(out).getroot().findall("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("time")) == ("2", "1", "3.500")


HOSTILE = {
    "empty.xml": ("", "malformed XML"),
    "text.xml": ("this is not xml", "malformed XML"),
    "html.xml": ("<html><body>hi</body></html>", "root element is <html>"),
    "truncated.xml": ('<testsuites><testsuite name="s"><testcase', "malformed XML"),
    "noname.xml": ('<testsuites><testsuite name="s" tests="1"><testcase classname="c"/>'
                   "</testsuite></testsuites>", "has no name"),
    "bomb.xml": (textwrap.dedent("""\
        <?xml version="1.0"?>
        <!DOCTYPE t [<!ENTITY a "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa">
        <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
        <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
        <!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">
        <!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;">
        <!ENTITY f "&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;">
        ]>
        <testsuites><testsuite name="&f;"/></testsuites>
        """), "malformed XML"),
    "binary.xml": ("\x00\x01\x02garbage", "malformed XML"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_input_is_one_line_and_writes_nothing(tmp_path, name):
    text, fragment = HOSTILE[name]
    bad = tmp_path / name
    bad.write_text(text, encoding="utf-8")
    good = tmp_path / "good.xml"
    good.write_text('<testsuites><testsuite name="s" tests="0" failures="0" errors="0"/>'
                    "</testsuites>")
    out = tmp_path / "out.xml"
    code, stdout, err = run_cli(["merge", str(good), str(bad), "-o", str(out)])
    assert code == ExitCode.USAGE_ERROR
    assert err.startswith(f"cl-validate: error: {bad}") and fragment in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists() and stdout == ""
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_missing_and_folder_inputs_are_one_line(tmp_path):
    out = tmp_path / "o.xml"
    code, _, err = run_cli(["merge", str(tmp_path / "nope.xml"), "-o", str(out)])
    assert code == ExitCode.USAGE_ERROR and "cannot read report: No such file" in err
    code, _, err = run_cli(["merge", str(tmp_path), "-o", str(out)])
    assert code == ExitCode.USAGE_ERROR and "cannot read report: Is a directory" in err
    assert not out.exists()


@pytest.mark.compile
def test_merge_never_replaces_an_input_or_a_file_that_is_not_a_report(shards, tmp_path):
    shard1 = tmp_path / "s1.xml"
    shutil.copy(shards["reports"] / "shard-1.xml", shard1)
    before = shard1.read_bytes()
    code, _, err = run_cli(["merge", str(shard1), "-o", str(shard1)])
    assert code == ExitCode.USAGE_ERROR and "also one of the reports to merge" in err
    assert shard1.read_bytes() == before
    notes = tmp_path / "NOTES.md"
    notes.write_text("# my notes\n")
    code, _, err = run_cli(["merge", str(shard1), "-o", str(notes)])
    assert code == ExitCode.USAGE_ERROR and "refusing to replace a file that is not a JUnit" in err
    assert notes.read_text() == "# my notes\n"
    # A previous merged report is replaced (that is what -o asks for), atomically.
    old = tmp_path / "old.xml"
    shutil.copy(shards["merged"], old)
    code, _, err = run_cli(["merge", str(shard1), "-o", str(old)])
    assert code == ExitCode.OK, err
    assert sorted(_testcases(old)) == sorted(_testcases(shard1))


def test_merge_is_a_plugged_subcommand_with_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["merge", "--help"])
    assert exc.value.code == 0
    assert "-o FILE" in capsys.readouterr().out
    code = main(["merge", "a.xml"])
    assert code == ExitCode.USAGE_ERROR
    assert "the following arguments are required: -o/--output" in capsys.readouterr().err


SCHEMA = DATA / "junit-cl_validate.xsd"


def _merge_one(tmp_path: Path, text: str) -> ET.Element:
    """Merge one hand-written report; the output must be valid against the project's schema."""
    import xmlschema

    src = tmp_path / "in.xml"
    src.write_text(text)
    out = tmp_path / "out.xml"
    code, _, err = run_cli(["merge", str(src), "-o", str(out)])
    assert code == ExitCode.OK, err
    xmlschema.XMLSchema(str(SCHEMA)).validate(str(out))
    return ET.parse(out).getroot()


def test_nested_suites_keep_their_testcases_as_suites_of_their_own(tmp_path):
    """Some tools nest <testsuite> in <testsuite>; the schema does not allow it. Every
    nested suite's testcases become a suite named by its path, none dropped."""
    root = _merge_one(tmp_path, """<testsuites>
      <testsuite name="outer" tests="3" failures="1" errors="0" time="9">
        <testcase classname="c" name="top" time="1"/>
        <testsuite name="inner" tests="2" failures="1" errors="0" time="5">
          <testcase classname="c" name="a" time="2"><failure message="m">x</failure></testcase>
          <testsuite name="deepest" tests="1" failures="0" errors="0" time="3">
            <testcase classname="c" name="b" time="3"/>
          </testsuite>
        </testsuite>
      </testsuite>
    </testsuites>""")
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == ["outer", "outer/inner", "outer/inner/deepest"]
    names = {n: [tc.get("name") for tc in s.findall("testcase")] for n, s in suites.items()}
    assert names == {"outer": ["top"], "outer/inner": ["a"], "outer/inner/deepest": ["b"]}
    assert [(s.get("tests"), s.get("failures")) for s in suites.values()] == \
        [("1", "0"), ("1", "1"), ("1", "0")]
    # A parent's own time may or may not count its nested suites': its testcases' sum, so the
    # total is never counted twice.
    assert [s.get("time") for s in suites.values()] == ["1.000", "2.000", "3.000"]
    assert (root.get("tests"), root.get("failures"), root.get("time")) == ("3", "1", "6.000")


@pytest.mark.parametrize("bad", ["nan", "inf", "-1", "-inf", "1,5", "", "soon"])
def test_times_that_are_not_finite_non_negative_numbers_are_unknown(tmp_path, bad):
    """Written as they came, time="nan" made the merged report invalid. A testcase's bad time
    is left out; a suite's bad time is the sum of its testcases' known times."""
    root = _merge_one(tmp_path, f"""<testsuites>
      <testsuite name="s" tests="3" failures="0" errors="0" time="{bad}">
        <testcase classname="c" name="bad" time="{bad}"/>
        <testcase classname="c" name="fine" time="1.25"/>
        <testcase classname="c" name="exponent" time="2e0"/>
      </testsuite>
    </testsuites>""")
    (suite,) = root.findall("testsuite")
    times = {tc.get("name"): tc.get("time") for tc in suite.findall("testcase")}
    assert times == {"bad": None, "fine": "1.25", "exponent": "2.000"}
    assert suite.get("time") == "3.250" and root.get("time") == "3.250"


def test_a_report_nested_past_the_limit_is_one_line(tmp_path):
    deep = tmp_path / "deep.xml"
    deep.write_text('<testsuites><testsuite name="s">' + "<testsuite name='n'>" * 100
                    + "</testsuite>" * 101 + "</testsuites>")
    out = tmp_path / "out.xml"
    code, _, err = run_cli(["merge", str(deep), "-o", str(out)])
    assert code == ExitCode.USAGE_ERROR and err.count("\n") == 1 and "Traceback" not in err
    assert "not a JUnit report: elements nested more than 64 deep" in err
    assert not out.exists()
