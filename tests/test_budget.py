"""Budgets that only go down: the ratchet (stale budgets), per-target budget sources, and
``cl-validate budget tighten`` rewriting real case files without losing a comment.

Planning and rewriting are tested on case files with given measurements (no compile); the CLI
tests compile a bundled case and tiny models for real.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

import pytest
from junitparser import Failure, JUnitXml

from cl_validate.checks.verdict import Status
from cl_validate.errors import ExitCode
from cl_validate.measurements.kernel_list import Kernel, KernelList, StageCount, Transform
from cl_validate.paths import repo_path
from cl_validate.spec import load_case
from cl_validate.spec.budgets import MeasuredCounts, plan, rewrite
from cl_validate.spec.casefile import CaseText
from cl_validate.spec.config import StalePolicy
from tests.conftest import DATA, MINIMAL, judge_check, run_cli, tiny_case

ROOT = Path(__file__).parents[1]
COUNTS = [StageCount("import", 0, 0)]


def _kernels(transforms: int, extra: int = 1) -> KernelList:
    ks = [Kernel(i, f"transpose{i}", (f"transpose{i}",),
                 (Transform("permute_dims", i, f"transpose{i}", False),))
          for i in range(transforms)]
    ks += [Kernel(len(ks) + j, f"fused_conv2d{j}_add{j}", ("conv2d", "add")) for j in range(extra)]
    return KernelList(ks)


OVERRIDDEN = (MINIMAL + "kernels = 3\n\n[targets_override.cuda]\n"
              "budget = { layout_transforms = 1 }\n")


# --------------------------------------------------------------------------------------------
# The ratchet and where a budget comes from
# --------------------------------------------------------------------------------------------
def test_under_budget_is_stale_and_fails_by_default(write_case):
    case = load_case(write_case(OVERRIDDEN))
    r = judge_check("layout_transforms", case, "llvm", kernels=_kernels(1), stage_counts=COUNTS)
    assert r.status is Status.FAILED and r.kind == "BudgetStale"
    # the command names the file, so it works for a case outside model_cases/ too
    assert r.message == ("budget stale: layout_transforms 1 < 2 (llvm) — run cl-validate "
                         f"budget tighten {repo_path(case.path)}")
    assert r.figures.stale and r.line == 11
    r = judge_check("kernels", case, "llvm", kernels=_kernels(1))
    assert r.kind == "BudgetStale" and r.message.startswith("budget stale: kernels 2 < 3")


def test_warn_policy_passes_but_still_says_stale(write_case):
    case = load_case(write_case(OVERRIDDEN))
    r = judge_check("layout_transforms", case, "llvm", StalePolicy.WARN,
                    kernels=_kernels(1), stage_counts=COUNTS)
    assert r.status is Status.PASSED and r
    assert "budget stale" in r.message and r.figures.stale


def test_exact_budget_passes_without_stale_mark(write_case):
    case = load_case(write_case(OVERRIDDEN))
    r = judge_check("layout_transforms", case, "llvm", kernels=_kernels(2), stage_counts=COUNTS)
    assert r.status is Status.PASSED and not r.figures.stale


def test_budget_source_names_the_override_and_its_line(write_case):
    case = load_case(write_case(OVERRIDDEN))
    r = judge_check("layout_transforms", case, "cuda", kernels=_kernels(2), stage_counts=COUNTS)
    assert r.message.startswith("layout_transforms 2 > budget 1 (cuda)")
    # the way to raise it, if intended, names the file (a case outside model_cases/ too)
    assert r.message.endswith(f"(if intended: cl-validate budget tighten {repo_path(case.path)} "
                              "--allow-increase --reason TEXT)")
    assert r.figures.budget_source == "targets_override.cuda, line 15"
    assert r.body.startswith("budget 1 (targets_override.cuda, line 15)\n")
    r = judge_check("kernels", case, "cuda", kernels=_kernels(2, extra=1))
    assert r.figures.budget_source == "budget, line 12"  # cuda inherits the kernels budget
    assert r.body.startswith("budget 3 (budget, line 12)")


# --------------------------------------------------------------------------------------------
# Planning and rewriting (no compile)
# --------------------------------------------------------------------------------------------
RESNET = (ROOT / "tests" / "data" / "resnet50_annotated.toml").read_text()


def _case(tmp_path: Path, text: str, name: str = "c.toml"):
    path = tmp_path / name
    path.write_text(text)
    return load_case(path)


def test_tighten_lowers_in_place_and_keeps_every_comment(tmp_path):
    case = _case(tmp_path, RESNET)
    p = plan(case, {None: {"llvm": {"layout_transforms": 1, "kernels": 56},
                    "cuda": {"layout_transforms": 1, "kernels": 55}}},
             allow_increase=False, reason="")
    new = rewrite(RESNET, p)
    changed = {(a, b) for a, b in zip(RESNET.splitlines(), new.splitlines(), strict=True)
               if a != b}
    assert changed == {
        ("layout_transforms = 2", "layout_transforms = 1"),
        ("kernels = 58                # BatchNorm decomposed and fused into each conv; no BN "
         "kernels", "kernels = 56                # BatchNorm decomposed and fused into each "
         "conv; no BN kernels"),
        ("budget = { layout_transforms = 1, kernels = 57 }",
         "budget = { layout_transforms = 1, kernels = 55 }"),
    }
    assert not p.refused


def test_tighten_adds_an_override_only_where_a_target_differs(tmp_path):
    case = _case(tmp_path, MINIMAL + "kernels = 5   # why five\n")
    p = plan(case, {None: {"llvm": {"layout_transforms": 2, "kernels": 4},
                    "cuda": {"layout_transforms": 2, "kernels": 3}}},
             allow_increase=False, reason="")
    new = rewrite(case.path.read_text(), p)
    assert "kernels = 4   # why five\n" in new
    assert new.endswith("[targets_override.cuda]\nbudget = { kernels = 3 }\n")
    after = _case(tmp_path, new, "after.toml")
    assert after.budget_for("llvm").get("kernels") == 4
    assert after.budget_for("cuda").get("kernels") == 3


def test_a_target_not_measured_keeps_its_budget(tmp_path):
    case = _case(tmp_path, MINIMAL)
    p = plan(case, {None: {"llvm": {"layout_transforms": 1, "kernels": 4}}},
             allow_increase=False,
             reason="")
    after = _case(tmp_path, rewrite(case.path.read_text(), p), "after.toml")
    assert after.budget_for("llvm").get("layout_transforms") == 1
    assert after.budget_for("cuda").get("layout_transforms") == 2  # pinned in an override
    assert after.budget.get("kernels") is None  # an undeclared kernel budget is not added
    assert any("not measured" in e for e in p.effective)


def test_an_increase_is_refused_unless_allowed_with_a_reason(tmp_path):
    case = _case(tmp_path, OVERRIDDEN)
    measured: MeasuredCounts = {None: {"llvm": {"layout_transforms": 2, "kernels": 3},
                                 "cuda": {"layout_transforms": 2, "kernels": 3}}}
    p = plan(case, measured, allow_increase=False, reason="")
    assert not p.writes
    assert p.refused == ["cuda: layout_transforms 2 > budget 1 — not raised (pass "
                         "--allow-increase --reason TEXT to raise it)"]
    p = plan(case, measured, allow_increase=True, reason="the new head needs a transpose")
    new = rewrite(case.path.read_text(), p)
    assert ('budget = { layout_transforms = 2, reason = "the new head needs a transpose" }'
            in new)
    after = _case(tmp_path, new, "after.toml")
    assert after.budget_for("cuda").get("layout_transforms") == 2
    assert after.budget_for("cuda").reason == "the new head needs a transpose"


def test_exact_budgets_mean_no_writes(tmp_path):
    case = _case(tmp_path, RESNET)
    p = plan(case, {None: {"llvm": {"layout_transforms": 2, "kernels": 58},
                    "cuda": {"layout_transforms": 1, "kernels": 57}}},
             allow_increase=False, reason="")
    assert p.writes == {} and p.refused == []


def test_a_rewrite_keeps_each_lines_own_ending_and_the_byte_order_mark(tmp_path):
    """A file with CRLF and LF lines (edited on two systems) and a BOM: the lines the rewrite
    does not touch keep their bytes, a changed or added line takes the file's usual end."""
    lines = (MINIMAL + "kernels = 5   # why five\n").splitlines(keepends=True)
    mixed = "".join(ln if i % 4 == 3 else ln.replace("\n", "\r\n")
                    for i, ln in enumerate(lines))
    path = tmp_path / "c.toml"
    path.write_bytes(b"\xef\xbb\xbf" + mixed.encode())
    source = CaseText.read(path)
    assert "\r" not in source.text and source.newline == "\r\n"
    assert source.kept() == "CRLF and LF line ends and the UTF-8 byte-order mark kept"
    p = plan(load_case(path), {None: {"llvm": {"layout_transforms": 2, "kernels": 4},
                                      "cuda": {"layout_transforms": 2, "kernels": 3}}},
             allow_increase=False, reason="")
    data = source.encode(rewrite(source.text, p))
    assert data.startswith(b"\xef\xbb\xbf")
    expect = (mixed.replace("kernels = 5   # why five\r\n", "kernels = 4   # why five\r\n")
              .replace("kernels = 5   # why five\n", "kernels = 4   # why five\r\n")
              + "\r\n[targets_override.cuda]\r\nbudget = { kernels = 3 }\r\n")
    assert data.decode("utf-8-sig") == expect
    written = tmp_path / "after.toml"
    written.write_bytes(data)
    assert load_case(written).budget_for("cuda").get("kernels") == 3  # the BOM reads back


# --------------------------------------------------------------------------------------------
# The CLI on real compiles
# --------------------------------------------------------------------------------------------
@pytest.mark.compile
def test_tighten_writes_through_a_link_keeping_crlf_the_bom_and_the_mode(tmp_path,
                                                                        monkeypatch):
    """Before: every CRLF became LF (and the diff hid it), the BOM went, and the link was
    replaced by a regular file while the real one stayed stale — and was named as updated."""
    shared, cases = tmp_path / "elsewhere", tmp_path / "cases"
    shared.mkdir()
    cases.mkdir()
    shutil.copy(DATA / "tiny_models.py", shared)  # the model is found next to the target
    original = b"\xef\xbb\xbf" + tiny_case(3, comments=True).replace("\n", "\r\n").encode()
    target = shared / "tiny.toml"
    target.write_bytes(original)
    target.chmod(0o640)
    link = cases / "tiny.toml"
    link.symlink_to("../elsewhere/tiny.toml")
    monkeypatch.chdir(tmp_path)
    code, out = run_cli(["budget", "tighten", "cases/tiny.toml", "--no-isolation"]).both()
    assert code == ExitCode.OK, out
    assert "cases/tiny.toml -> elsewhere/tiny.toml:\n" in out
    assert "(CRLF line ends and the UTF-8 byte-order mark kept)" in out
    assert link.is_symlink() and os.readlink(link) == "../elsewhere/tiny.toml"
    written = target.read_bytes()
    assert re.search(rb"layout_transforms = 2   # boundaries \[tighten [-\d]+: was "
                     rb"`layout_transforms = 3`: check this comment\]\r\n", written)
    assert unflagged(written.decode("utf-8-sig")) == original.replace(
        b"layout_transforms = 3", b"layout_transforms = 2").decode("utf-8-sig")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in shared.iterdir() if p.name != "__pycache__") == \
        ["tiny.toml", "tiny_models.py"]  # no temporary file left beside the target



def unflagged(text: str) -> str:
    """`text` without the markers tighten leaves on comments next to the numbers it changed."""
    text = re.sub(r"[ \t]*# \^ \[tighten [^\]]*\]\r?\n", "", text)
    return re.sub(r" \[tighten [-\d]+: was `[^`]*`: check this comment\]", "", text)


@pytest.mark.compile
def test_tighten_restores_a_loosened_bundled_case_byte_for_byte(tmp_path):
    shutil.copytree(ROOT / "model_cases" / "zoo", tmp_path / "zoo")
    original = (ROOT / "model_cases" / "forum_conv.toml").read_text()
    loose = original.replace("layout_transforms = 2", "layout_transforms = 4").replace(
        "kernels = 3 ", "kernels = 6 ")
    loose += "\n[targets_override.cuda]\nbudget = { kernels = 5 }   # cuda is different\n"
    case = tmp_path / "forum_conv.toml"
    case.write_text(loose)
    code, out = run_cli(["budget", "tighten", str(case), "--no-isolation", "--dry-run"]).both()
    assert code == ExitCode.OK, out
    assert case.read_text() == loose and "dry run: not written" in out
    assert "+layout_transforms = 2" in out

    code, out = run_cli(["budget", "tighten", str(case), "--no-isolation"]).both()
    assert code == ExitCode.OK, out
    assert "llvm  layout_transforms 4 -> 2 (lowered)" in out
    assert "cuda  kernels 5 -> 3 (lowered)" in out
    text = case.read_text()
    assert unflagged(text) == original + (
        "\n[targets_override.cuda]\nbudget = { kernels = 3 }   # cuda is different\n")
    # each changed number's comment is flagged: trailing, or the block right above
    assert "# cuda is different [tighten " in text
    assert "kernels = 3                 # transpose, conv2d+bias, transpose [tighten " in text
    assert "# ^ [tighten " in text.split("layout_transforms = 2")[0]  # the block above
    assert text.count("check this comment]") == 3
    mtime = case.stat().st_mtime_ns
    code, out = run_cli(["budget", "tighten", str(case), "--no-isolation"]).both()
    assert code == ExitCode.OK and "0 file(s) updated, 1 exact" in out
    assert case.stat().st_mtime_ns == mtime  # an exact file is not touched


@pytest.mark.compile
def test_tighten_refuses_to_raise_silently_then_raises_with_a_reason(tmp_path):
    shutil.copy(DATA / "tiny_models.py", tmp_path)
    case = tmp_path / "tiny.toml"
    case.write_text(tiny_case(1, kernels=4, comments=True))
    before = case.read_text()
    code, out = run_cli(["budget", "tighten", str(case), "--no-isolation"]).both()
    assert code == ExitCode.CHECK_FAILED
    assert "REFUSED" in out and "llvm: layout_transforms 2 > budget 1" in out
    assert case.read_text() == before

    code, out = run_cli(["budget", "tighten", str(case), "--allow-increase"]).both()
    assert code == ExitCode.USAGE_ERROR and "--allow-increase needs --reason TEXT" in out

    code, out = run_cli(["budget", "tighten", str(case), "--no-isolation", "--allow-increase",
                      "--reason", "output boundary is NCHW"]).both()
    assert code == ExitCode.OK, out
    text = case.read_text()
    # the comment beside the raised number is flagged for the reviewer, with the old value
    assert re.search(r"layout_transforms = 2   # boundaries \[tighten \d{4}-\d\d-\d\d: "
                     r"was `layout_transforms = 1`: check this comment\]\n", text), text
    assert 'reason = "output boundary is NCHW"' in text and "# the two NCHW boundaries" in text
    assert load_case(case).budget.reason == "output boundary is NCHW"
    code, out = run_cli(["run", str(case), "--no-isolation"]).both()  # the loader accepts `reason`
    assert code == ExitCode.OK, out


@pytest.mark.compile
def test_stale_budget_fails_unless_pyproject_says_warn(tmp_path, monkeypatch):
    shutil.copy(DATA / "tiny_models.py", tmp_path)
    case = tmp_path / "tiny.toml"
    case.write_text(tiny_case(3, kernels=4, comments=True))
    monkeypatch.chdir(tmp_path)
    junit = tmp_path / "r.xml"
    code, out = run_cli(["run", str(case), "--no-isolation", "--junit", str(junit)]).both()
    assert code == ExitCode.CHECK_FAILED, out
    (tc,) = [tc for s in JUnitXml.fromfile(str(junit)) for tc in s
             if tc.name == "layout_transforms[llvm]"]
    (failure,) = tc.result
    assert isinstance(failure, Failure) and failure.type == "BudgetStale"
    assert failure.message == ("budget stale: layout_transforms 2 < 3 (llvm) — run "
                               "cl-validate budget tighten tiny.toml")
    assert tc._elem.get("line") == "14" and "budget 3 (budget, line 14)" in failure.text

    (tmp_path / "pyproject.toml").write_text('[tool.cl_validate]\nstale_budget = "warn"\n')
    code, out = run_cli(["run", str(case), "--no-isolation"]).both()
    assert code == ExitCode.OK, out
    assert "2/3 stale" in out
    assert "WARNING tiny [llvm] layout_transforms: budget stale: layout_transforms 2 < 3" in out



# --------------------------------------------------------------------------------------------
# A budget under its old name (float_qdq_convs is float_qdq_products)
# --------------------------------------------------------------------------------------------
def test_a_budget_under_its_old_name_is_read_and_tightened_where_it_is(tmp_path):
    """``float_qdq_convs`` (the budget before it counted every quantized product) is read as
    ``float_qdq_products``, at its own line; tighten lowers it in place, in the file's
    spelling, comment kept, and adds no second key."""
    text = MINIMAL + "float_qdq_convs = 3   # three left in float\n"
    case = _case(tmp_path, text)
    budget = case.budget_for("llvm")
    assert budget.get("float_qdq_products") == 3
    assert budget.line("float_qdq_products") == text.splitlines().index(
        "float_qdq_convs = 3   # three left in float") + 1
    p = plan(case, {None: {"llvm": {"layout_transforms": 2, "float_qdq_products": 1},
                    "cuda": {"layout_transforms": 2, "float_qdq_products": 1}}},
             allow_increase=False, reason="")
    new = rewrite(case.path.read_text(), p)
    assert "float_qdq_convs = 1   # three left in float" in new, new
    assert "float_qdq_products" not in new, new
    assert _case(tmp_path, new, "after.toml").budget_for("cuda").get("float_qdq_products") == 1


def test_a_budget_under_both_names_is_one_line_at_the_second(write_case):
    path = write_case(MINIMAL + "float_qdq_products = 0\nfloat_qdq_convs = 0\n")
    code, out = run_cli(["list", str(path)]).both()
    assert code == ExitCode.USAGE_ERROR, out
    assert "'float_qdq_convs' and 'float_qdq_products' are one budget under two names" in out
    assert f"{path.name}:{MINIMAL.count(chr(10)) + 2}" in out, out
