"""The package's structure is kept by tools, not by hope: layers, no cycles, light start-up."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "cl_validate"
HEAVY = ("torch", "tvm")


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def test_startup_path_loads_neither_torch_nor_tvm():
    """Listing cases, validating a case file, the CLI's and the pytest plugin's start-up."""
    code = ("import sys, cl_validate, cl_validate.spec, cl_validate.cli, cl_validate.cli.main, "
            "cl_validate.pytest_plugin; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def _function_level_imports(path: Path) -> list[tuple[ast.stmt, str]]:
    """(import statement, module it imports) for every import inside a function."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[ast.stmt, str]] = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.Import):
                found.extend((node, a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.append((node, node.module))
    return found


def _commented_lazy(lines: list[str], node: ast.stmt) -> bool:
    """``# lazy: ...`` on the import's line, or above the run of imports it belongs to (a
    run may have blank lines between its sections, as isort writes them)."""
    no = node.lineno - 1
    if "# lazy:" in lines[no]:
        return True
    while no > 0:
        above = lines[no - 1].strip()
        if above.startswith("# lazy:"):
            return True
        if above and not above.startswith(("from ", "import ", "#")):
            return False
        no -= 1
    return False


def test_imports_inside_functions_only_defer_torch_or_tvm_and_say_so():
    """An import inside a function is allowed only to keep torch/TVM off a start-up path:
    the module it imports must load torch or TVM (directly or through its own imports), and
    a ``# lazy:`` comment must say so. Anything else belongs at the top of the module."""
    graph = grimp.build_graph("cl_validate", include_external_packages=True)

    def loads_heavy(module: str) -> bool:
        if module.split(".")[0] in HEAVY:
            return True
        if not module.startswith("cl_validate"):
            return False
        return any(graph.chain_exists(importer=module, imported=h, as_packages=True)
                   for h in HEAVY)

    wrong = []
    for path in _modules():
        lines = path.read_text(encoding="utf-8").splitlines()
        for node, module in _function_level_imports(path):
            where = f"{path.relative_to(ROOT)}:{node.lineno} imports {module}"
            if not loads_heavy(module):
                wrong.append(f"{where}: loads neither torch nor TVM; import it at the top")
            elif not _commented_lazy(lines, node):
                wrong.append(f"{where}: say why it is deferred with a '# lazy:' comment")
    assert not wrong, "\n".join(wrong)


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """The package and its import-linter contracts, copied where lint-imports finds them
    first (PYTHONPATH) and may be edited."""
    shutil.copytree(PACKAGE, tmp_path / "cl_validate",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _lint_imports(where: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "lint-imports"
    env = {**os.environ, "PYTHONPATH": str(where)}
    return subprocess.run([str(exe), "--no-cache"], cwd=where, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_contracts_hold_and_fail_on_an_upward_import(package_copy: Path):
    kept = _lint_imports(package_copy)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "3 kept, 0 broken" in kept.stdout
    model = package_copy / "cl_validate" / "spec" / "model.py"
    model.write_text(model.read_text() + "\nfrom cl_validate.report import console  # noqa\n")
    broken = _lint_imports(package_copy)
    assert broken.returncode == 1, broken.stdout
    assert "cl_validate.spec.model -> cl_validate.report.console" in broken.stdout
    assert "Imports go down the data path" in broken.stdout


def test_a_cycle_breaks_the_contracts(package_copy: Path):
    paths = package_copy / "cl_validate" / "paths.py"
    paths.write_text(paths.read_text() + "\nfrom cl_validate import atomic  # noqa\n")
    atomic = package_copy / "cl_validate" / "atomic.py"
    atomic.write_text(atomic.read_text() + "\nfrom cl_validate import paths  # noqa\n")
    broken = _lint_imports(package_copy)
    assert broken.returncode == 1
    assert "No import cycles" in broken.stdout and "BROKEN" in broken.stdout
