"""Reporters: render `CaseResult`s as JUnit XML, console text, Markdown and GitHub annotations;
read reports' figures back (``figures``) to compare two runs (``delta``) or chart many
(``trend``)."""

from cl_validate.report.annotations import emit_annotations, github_annotations
from cl_validate.report.console import progress_line, summary_table
from cl_validate.report.junit import build_junit, write_junit
from cl_validate.report.markdown import append_step_summary, render_markdown, write_markdown

__all__ = [
    "append_step_summary",
    "build_junit",
    "emit_annotations",
    "github_annotations",
    "progress_line",
    "render_markdown",
    "summary_table",
    "write_junit",
    "write_markdown",
]
