"""A run over a suite of cases, in the parent process: ``driver`` (`run_suite`: answer from
the cache, measure, judge, report each case × target), ``pool`` (a fresh process per case,
and its limits: the front of ``run_loop``, ``lifecycle``, ``zygote_client``,
``result_pipes``, ``limits``, ``reaping``, ``slots`` and ``case_logs``), ``signals``
(signals to the parent, told apart by sender), ``shard`` (a CI job's share of the cases).
Never imports torch or TVM and never runs a model's code.
"""
