"""A run over a suite of cases, in the parent process: ``driver`` (`run_suite`: measure, judge,
report each case × target), ``pool`` (isolated worker processes), ``shard`` (a CI job's share
of the cases). Never imports torch or TVM and never runs a model's code.
"""
