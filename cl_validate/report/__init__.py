"""Reporters: render `CaseResult`s as JUnit XML and as console text."""

from cl_validate.report.console import progress_line, summary_table
from cl_validate.report.junit import build_junit, write_junit

__all__ = ["build_junit", "progress_line", "summary_table", "write_junit"]
