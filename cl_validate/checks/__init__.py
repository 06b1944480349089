"""Checks: judge a `Measurement` against the case file, one verdict per check.

``registry`` (`Check`, the ordered registry every report iterates) · ``verdict`` (`Status`,
`CheckResult`, `CaseResult`, a check's `Figures`) · ``judge`` (every check on one case ×
target) · one module per check: ``compiled`` (``compile``), ``layout``, ``layout_transforms``,
``transform_bytes``, ``kernel_count`` (``kernels``), ``fallback_kernels``,
``kernel_baseline`` (``kernel_list``), ``numerics``, ``time_share`` · ``ratchet`` (what the
budget checks share) · ``calibration`` (proposing a tolerance). Pure functions of data: no
compile, no TVM, no torch.

Every module of this package is loaded with it, so a check module registers itself: adding a
check is adding its module (see `cl_validate.checks.registry`).
"""

import importlib as _importlib
import pkgutil as _pkgutil

for _module in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    _importlib.import_module(f"{__name__}.{_module}")
