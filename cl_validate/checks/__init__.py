"""Checks: judge a `Measurement` against the case file, one verdict per check.

``verdict`` (`Status`, `CheckResult`, `CaseResult`, typed `Measured` figures) ·
``measurement`` (what a worker measured) · one module per check: ``layout``, ``budget``
(``layout_transforms`` and ``kernels``, with the ratchet), ``kernel_list`` (baselines),
``numerics`` · ``judge`` (all of them for one case × target) · ``calibration`` (proposing a
tolerance). Pure functions of data: no compile, no TVM, no torch.
"""
