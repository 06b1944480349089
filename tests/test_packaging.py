"""What another repository installs: a version from git tags, the tested pins shipped inside
the package (``cl-validate pins``, the ``pinned`` extra), ``cl-validate --version``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cl_validate.errors import ExitCode
from cl_validate.measurements import sources
from tests.conftest import run_cli

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower().replace(
        "_", "-")


def test_the_pinned_extra_installs_exactly_the_shipped_pins():
    extra = PYPROJECT["project"]["optional-dependencies"]["pinned"]
    assert sorted(extra) == sorted(f"{k}=={v}" for k, v in sources.pins().items())


def test_every_runtime_dependency_is_pinned_and_constraints_txt_does_not_pin_twice():
    shipped = {_name(k) for k in sources.pins()}
    deps = {_name(d) for d in PYPROJECT["project"]["dependencies"] if "python_version" not in d}
    assert deps <= shipped, f"not pinned in cl_validate/pins.txt: {sorted(deps - shipped)}"
    lines = (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
    assert "-c cl_validate/pins.txt" in lines  # tox and CI run under the same pins
    own = {_name(ln) for ln in lines if ln.strip() and not ln.startswith(("#", "-"))}
    assert not own & shipped, f"pinned twice: {sorted(own & shipped)}"


def test_the_pins_file_is_package_data_and_the_pytest_plugin_has_its_extra():
    assert "pins.txt" in PYPROJECT["tool"]["setuptools"]["package-data"]["cl_validate"]
    assert any(_name(r) == "pytest" for r in PYPROJECT["project"]["optional-dependencies"][
        "pytest"])
    # the version comes from git tags, with a fallback where there is no git
    assert PYPROJECT["project"]["dynamic"] == ["version"]
    assert "version" not in PYPROJECT["project"]
    scm = PYPROJECT["tool"]["setuptools_scm"]
    assert scm["fallback_version"] and scm["version_file"] == "cl_validate/_version.py"
    assert any(r.startswith("setuptools-scm") for r in PYPROJECT["build-system"]["requires"])
    # a GitHub tarball (how an action is checked out) has no .git: the archival file says
    assert "$Format:%H$" in (ROOT / ".git_archival.txt").read_text()
    assert ".git_archival.txt  export-subst" in (ROOT / ".gitattributes").read_text()


def test_version_names_tvm_and_torch_without_importing_them(capsys):
    with pytest.raises(SystemExit) as exc:
        from cl_validate.cli.main import main

        main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    from cl_validate import __version__

    assert out.startswith(f"cl-validate {__version__} (apache-tvm ")
    assert re.search(r"\(apache-tvm [\w.+]+, torch [\w.+]+, Python \d+\.\d+\.\d+\)\n$",
                     out), out
    # read from the distributions' metadata: neither is imported
    code = ("import sys\nfrom cl_validate.cli import main\ntry:\n    main(['--version'])\n"
            "except SystemExit:\n    pass\nprint(sorted({'torch', 'tvm'} & set(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.stdout.splitlines()[-1] == "[]", proc.stdout + proc.stderr


def test_pins_prints_the_constraints_file_and_check_compares_with_what_is_installed(
        monkeypatch):
    code, out = run_cli(["pins"]).both()
    assert code == ExitCode.OK and out == sources.pin_text()
    assert re.search(r"^apache-tvm==\S+$", out, flags=re.M)
    code, out = run_cli(["pins", "--check"]).both()
    # this environment is installed from constraints.txt, so from the pins
    assert code == ExitCode.OK, out
    assert out.count("ok      ") == len(sources.pins())
    moved = sources.pin_text().replace("numpy==", "numpy==0.0.1+", 1)
    monkeypatch.setattr(sources, "pin_text", lambda: moved)
    code, out = run_cli(["pins", "--check"]).both()
    assert code == ExitCode.CHECK_FAILED
    assert "DIFFERS numpy==0.0.1+" in out and "1 version(s) differ" in out


def test_a_local_version_label_matches_its_pin():
    match = sources.pin_matches
    assert match("2.13.0+cpu", "2.13.0") and match("2.13.0", "2.13.0")
    assert not match("2.13.1", "2.13.0") and not match("2.13.0", "2.13.0+cpu")


@pytest.mark.compile
def test_a_run_off_the_pins_says_so_once_in_every_report(monkeypatch, write_case, tmp_path):
    """A GPU machine's torch is rarely the pinned one: its counts may move for that reason
    alone, and the run says so in the console, the JUnit properties and the Markdown."""
    from junitparser import JUnitXml

    from tests.conftest import tiny_case

    case = write_case(tiny_case())
    junit, md = tmp_path / "r.xml", tmp_path / "r.md"
    args = ["run", str(case), "--junit", str(junit), "--markdown", str(md)]
    code, out = run_cli(args).both()
    assert code == ExitCode.OK and "not the pinned versions" not in out  # installed as pinned
    props = {p.name: p.value for p in next(iter(JUnitXml.fromfile(str(junit)))).properties()}
    assert props["version.torch"] == sources.installed("torch") and "off_pins" not in props

    moved = sources.pin_text().replace("torch==", "torch==1.0.0+", 1)
    monkeypatch.setattr(sources, "pin_text", lambda: moved)
    code, out = run_cli(args).both()
    assert code == ExitCode.OK, out
    have = sources.installed("torch")
    assert out.count("not the pinned versions") == 1
    assert f"torch {have} (pinned 1.0.0+" in out and "budgets recorded under the pins" in out
    suite = next(iter(JUnitXml.fromfile(str(junit))))
    props = {p.name: p.value for p in suite.properties()}
    assert props["off_pins"].startswith(f"torch {have} (pinned 1.0.0+")
    assert "not the pinned versions: torch" in md.read_text()
