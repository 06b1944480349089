"""Property tests of the cleanup passes on generated Relax functions (Hypothesis).

For every generated function in mixed layouts (`relax_graphs.relax_functions`), after TVM's
ConvertLayout to NHWC: the cleanup passes keep the result bit for bit (both versions built for
llvm and run on the same random input) and never add a run-time transform.

The default profile is quick and deterministic (a fixed number of derandomized examples);
``CL_VALIDATE_FUZZ=long`` runs the long profile (hundreds of random examples), e.g.
``CL_VALIDATE_FUZZ=long python -m pytest -m fuzz tests/passes``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tvm
from hypothesis import HealthCheck, given, settings
from relax_graphs import relax_functions  # tests/passes is on sys.path (rootdir import)
from tvm import relax

from cl_validate.compile.passes import NormalizeAxes, cleanup_passes
from cl_validate.ir import count_permutes, known_shape

pytestmark = pytest.mark.fuzz
NHWC = {"relax.nn.conv2d": ["NHWC", "OHWI"]}
_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow,
                                                       HealthCheck.data_too_large]}
settings.register_profile("cl_validate-quick", max_examples=12, derandomize=True, **_COMMON)
settings.register_profile("cl_validate-long", max_examples=400, **_COMMON)
PROFILE = f"cl_validate-{os.environ.get('CL_VALIDATE_FUZZ', 'quick')}"


@settings(settings.get_profile(PROFILE))
@given(func=relax_functions())
def test_cleanup_is_exact_and_never_adds_a_transform(
        func: relax.Function, run_llvm_pair: Callable[..., tuple[list[np.ndarray], ...]]
) -> None:
    converted = relax.transform.ConvertLayout(NHWC)(NormalizeAxes()(tvm.IRModule({"main": func})))
    cleaned = tvm.transform.Sequential(cleanup_passes())(converted)
    assert relax.analysis.well_formed(cleaned) is not False  # 0.27 returns None when it holds
    assert count_permutes(cleaned) <= count_permutes(converted)
    shape = known_shape(func.params[0])
    assert shape is not None
    x = np.random.default_rng(0).uniform(-1, 1, size=shape).astype("float32")
    for want, got in zip(*run_llvm_pair(converted, cleaned, x), strict=True):
        np.testing.assert_array_equal(got, want)


def test_the_strategy_reaches_every_op_kind() -> None:
    """The generator is not stuck on a few ops: a quick sample covers every op the passes
    carry a layout through."""
    seen: set[str] = set()

    # 150, not 60: a full run under load once reached all but max_pool2d and take in 60
    @settings(max_examples=150, derandomize=True, **_COMMON)
    @given(func=relax_functions())
    def collect(func: Any) -> None:
        for block in func.body.blocks:
            for b in block.bindings:
                if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op):
                    seen.add(b.value.op.name.removeprefix("relax."))

    collect()
    wanted = {"permute_dims", "reshape", "clip", "concat", "sum", "nn.softmax", "nn.pad",
              "nn.conv2d", "nn.max_pool2d", "nn.avg_pool2d", "broadcast_to", "matmul",
              "where", "expand_dims", "take", "strided_slice"}
    assert wanted <= seen, wanted - seen
