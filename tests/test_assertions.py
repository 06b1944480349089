"""Run-time assertions in the exported graph (``F.one_hot`` checks its class values) made
main impure with no dataflow block, and ConvertLayout rewrites dataflow blocks only: the
whole model stayed NCHW. The assertions now follow one dataflow block of the computation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cl_validate.ir import bindings, op_name

pytestmark = pytest.mark.compile


class OneHotMix(nn.Module):
    """The channels' argmax, one-hot encoded back into channels, added to the map."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        return self.b(y + F.one_hot(y.argmax(1), 4).permute(0, 3, 1, 2).float())


def test_a_model_with_assertions_is_converted_like_any_other(tmp_path) -> None:
    from tests.passes.conftest import compile_nhwc

    compiled, kernels = compile_nhwc(tmp_path, OneHotMix, (1, 3, 8, 8), rtol=1e-5, atol=1e-5,
                                     input_layout="NCHW")
    main = compiled.stage("cleanup").mod["main"]
    convs = [str(b.value.attrs.data_layout) for b in bindings(main)
             if op_name(b.value) == "relax.nn.conv2d"]
    assert convs == ["NHWC", "NHWC"], convs
    asserts = [b for b in bindings(main) if op_name(b.value) == "relax.assert_op"]
    assert len(asserts) == 2  # still checked, after the computation
    # the boundaries only: the argmax counts along the channels wherever they stand
    assert len(kernels.runtime_transforms) == 2, kernels.render()
