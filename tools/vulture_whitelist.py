"""Names vulture cannot see used (``tox -e lint`` runs ``vulture``, configured in
pyproject.toml's ``[tool.vulture]``, over cl_validate/ and this file).

Each entry is read by something vulture does not follow: a framework calling it by name, an
attribute a library reads back, a dataclass field read by reflection, or code outside
cl_validate/ (the tests, the benchmarks). Registration decorators (``@register`` for checks,
``@register_pipeline`` for pipelines) are ignored in the configuration instead. A name that is
unused for real is removed, not listed here.
"""

from vulture.whitelist_utils import Whitelist

_ = Whitelist()

# pytest calls its plugin's hooks and its collectors' and items' methods by name
# (cl_validate/pytest_plugin.py)
_.pytest_addoption
_.pytest_collect_file
_.pytest_collection_finish
_.pytest_sessionfinish
_.collect
_.setup
_.runtest
_.reportinfo

# TVM's PyExprMutator dispatches on the method name (cl_validate/compile/fold.py)
_.visit_generic_const_

# attributes a library reads back: argparse's help formatter (cli/budget.py, calibrate.py,
# pins.py), junitparser's <system-out> and <testsuite> attributes (report/junit.py)
_.formatter_class
_.system_out
_.hostname
_.timestamp

# Figures fields: reported by reflection (`Figures.properties` walks `dataclasses.fields`)
_.baseline_kernels  # checks/kernel_list.py
_.kernel_changes  # checks/kernel_list.py
_.layout_sensitive_ops  # checks/layout.py

# used outside cl_validate/: by the tests and the benchmarks
_.unregister  # checks/registry.py: tests that register a toy check remove it again
_.blocks_in  # report/reference.py: tests/test_docs.py, tests/test_registry.py
_.count_permutes  # ir.py: tests/passes
_.is_own  # ir.py: tests/passes/test_deploy_patterns.py
_.run_torch  # session/execute.py: tests, benchmarks/zoo_floor.py, numerics_cost.py
_.judge_in_process  # session/in_process.py: tests
_.available  # session/sandbox.py: the tests that need a confined case skip without it
_.export_seconds  # compile/frontend.py: benchmarks/layout_floor.py
