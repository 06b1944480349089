"""End to end through the real pipeline: tiny models, real torch.export, real TVM compile.

One CLI run over a folder of small cases (module-scoped, ~30 s), then each test reads the
verdicts, the console output and the JUnit file it produced.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from junitparser import Error, Failure, JUnitXml, Skipped

from cl_validate.cli import main
from cl_validate.errors import ExitCode
from tests.conftest import tiny_case

pytestmark = pytest.mark.compile

DATA = Path(__file__).parent / "data"


CASES = {
    "ok.toml": tiny_case(kernels=4, targets=None),
    "over_budget.toml": tiny_case(1, tolerance=None),
    "too_tight.toml": tiny_case(1, model="tiny_models:classifier", tolerance=(0.0, 0.0)),
    "nan.toml": tiny_case(model="tiny_models:nan_model", tolerance=None),
    "classifier_cuda.toml": tiny_case(1, model="tiny_models:classifier", targets=("cuda",),
                                      tolerance=None),
    "weights_unbound.toml": tiny_case(extra='pipeline = "unbound_pipeline:nhwc_unbound"'),
}


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("suite")
    cases = root / "cases"
    cases.mkdir()
    for name in ("tiny_models.py", "unbound_pipeline.py"):
        shutil.copy(DATA / name, cases / name)
    for name, text in CASES.items():
        (cases / name).write_text(text, encoding="utf-8")
    junit = root / "reports" / "r.xml"
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", str(cases), "--junit", str(junit)])
    return code, out.getvalue(), err.getvalue(), JUnitXml.fromfile(str(junit)), junit


def _cases(xml: JUnitXml, target: str) -> dict[tuple[str, str], object]:
    out = {}
    for suite in xml:
        if suite.name == f"cl_validate.{target}":
            for tc in suite:
                out[(tc.classname, tc.name.removesuffix(f"[{target}]"))] = tc
    return out


def test_exit_code_is_check_failed(suite_run):
    code, out, err, _, _ = suite_run
    assert code == ExitCode.CHECK_FAILED, out + err


def test_progress_line_per_case_and_target(suite_run):
    _, out, _, _, _ = suite_run
    lines = [ln for ln in out.splitlines() if ln.startswith("[")]
    assert len(lines) == 7  # 5 cases on llvm + ok.toml and classifier_cuda on cuda
    assert any("PASS" in ln and " ok  cuda " in ln and "numerics=skip" in ln for ln in lines)


def test_passing_case(suite_run):
    _, _, _, xml, _ = suite_run
    llvm = _cases(xml, "llvm")
    for check in ("layout", "layout_transforms", "kernels", "numerics"):
        tc = llvm[("ok", check)]
        assert tc.is_passed, check
        assert tc._elem.get("file").endswith("ok.toml")


def test_budget_failure_message_names_count_budget_and_line(suite_run):
    _, out, _, xml, _ = suite_run
    tc = _cases(xml, "llvm")[("over_budget", "layout_transforms")]
    (failure,) = tc.result
    assert isinstance(failure, Failure)
    assert failure.message.startswith("layout_transforms 2 > budget 1 (llvm) — next: ")
    assert 'declare the input layout = "NHWC"' in failure.message  # both are boundaries
    assert failure.type == "BudgetExceeded"
    text = Path(tc._elem.get("file")).read_text().splitlines()
    assert text[int(tc._elem.get("line")) - 1].strip() == "layout_transforms = 1"
    assert ">>" in failure.text and "permute_dims" in failure.text
    assert "FAILED over_budget [llvm] layout_transforms: layout_transforms 2 > budget 1" in out


def test_numerics_failure_reports_error_figures(suite_run):
    _, _, _, xml, _ = suite_run
    tc = _cases(xml, "llvm")[("too_tight", "numerics")]
    (failure,) = tc.result
    assert failure.type == "NumericsMismatch"
    assert "max abs" in failure.message and "outside rtol 0 atol 0" in failure.message
    assert "max_abs=" in failure.text


def test_nan_model_fails_numerics(suite_run):
    _, _, _, xml, _ = suite_run
    (failure,) = _cases(xml, "llvm")[("nan", "numerics")].result
    assert failure.type == "NonFinite"
    assert "non-finite values" in failure.message


def test_unfolded_weight_transform_fails(suite_run):
    _, _, _, xml, _ = suite_run
    (failure,) = _cases(xml, "llvm")[("weights_unbound", "layout_transforms")].result
    assert failure.type == "WeightTransform"
    assert "weight transform" in failure.message


def test_cuda_builds_without_gpu_and_skips_numerics(suite_run):
    _, out, _, xml, _ = suite_run
    cuda = _cases(xml, "cuda")
    assert cuda[("ok", "layout_transforms")].is_passed
    (skipped,) = cuda[("ok", "numerics")].result
    assert isinstance(skipped, Skipped) and "no cuda device" in skipped.message
    assert "ok [cuda] kernel list" in out and "fused_conv2d" in out


def test_layout_is_read_before_legalization_on_cuda(suite_run):
    _, _, _, xml, _ = suite_run
    cuda = _cases(xml, "cuda")
    assert cuda[("classifier_cuda", "layout")].is_passed
    assert cuda[("classifier_cuda", "layout_transforms")].is_passed


def _xunit2_schema() -> str:
    """Our schema without its documented extras (``file``/``line`` and <properties> on a
    <testcase>): the xunit2 rules pytest's own JUnit is validated against."""
    import xml.etree.ElementTree as ET

    xs = "{http://www.w3.org/2001/XMLSchema}"
    tree = ET.parse(DATA / "junit-cl_validate.xsd")
    (testcase,) = [e for e in tree.getroot().iter(f"{xs}element") if e.get("name") == "testcase"]
    kind = testcase.find(f"{xs}complexType")
    for attr in [a for a in kind.findall(f"{xs}attribute") if a.get("name") in ("file", "line")]:
        kind.remove(attr)
    seq = kind.find(f"{xs}sequence")
    seq.remove(next(e for e in seq.findall(f"{xs}element") if e.get("name") == "properties"))
    return ET.tostring(tree.getroot(), encoding="unicode")


def test_junit_validates_against_schemas(suite_run):
    import xml.etree.ElementTree as ET

    import xmlschema

    _, _, _, _, junit = suite_run
    ours = xmlschema.XMLSchema(str(DATA / "junit-cl_validate.xsd"))
    ours.validate(str(junit))
    # Everything but our documented extras also conforms to the plain xunit2 rules.
    strict = xmlschema.XMLSchema(_xunit2_schema())
    tree = ET.parse(junit)
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        strict.validate(tree)  # the extras are what the strict rules refuse
    for tc in tree.iter("testcase"):
        tc.attrib.pop("file", None)
        tc.attrib.pop("line", None)
        for props in tc.findall("properties"):
            tc.remove(props)
    strict.validate(tree)
    # ... and the public JUnit schema of Jenkins' xUnit plugin (vendored, origin in its header).
    xmlschema.XMLSchema(str(DATA / "junit-10.xsd")).validate(tree)


def test_no_error_verdicts_in_the_suite(suite_run):
    _, _, _, xml, _ = suite_run
    errors = [(tc.classname, tc.name) for suite in xml for tc in suite
              if any(isinstance(r, Error) for r in tc.result)]
    assert errors == []
