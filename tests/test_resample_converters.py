"""``F.interpolate``'s 2-D modes computed as PyTorch does. TVM 0.27's importer maps each to
``resize2d`` with the scale ``in / out`` and, for nearest, rounded half-pixel centres: a wrong
program for a nearest shrink or a resize to a size that is not a whole multiple (a mask
resized to a feature map, DETR), for a scale factor whose output size was rounded, and for
antialiasing. Every mode and geometry here, up and down, against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.conftest import tvm_outputs

pytestmark = pytest.mark.compile

# (mode, size, scale_factor, align_corners, antialias); the input is 7 x 10
RESIZES = [
    ("nearest", None, 2.0, None, False), ("nearest", None, 3.0, None, False),
    ("nearest", (14, 30), None, None, False), ("nearest", None, 1.7, None, False),
    ("nearest", (5, 4), None, None, False), ("nearest", None, 0.5, None, False),
    ("nearest", (9, 10), None, None, False),
    ("bilinear", None, 2.0, False, False), ("bilinear", None, 1.5, False, False),
    ("bilinear", (5, 13), None, False, False), ("bilinear", None, 0.6, True, False),
    ("bilinear", (1, 4), None, True, False), ("bilinear", (4, 3), None, False, True),
    ("bilinear", None, 2.5, False, True),
    ("bicubic", None, 1.5, False, False), ("bicubic", (9, 5), None, True, False),
    ("bicubic", None, 2.0, False, False),
]


class Resizes(nn.Module):
    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [F.interpolate(x, size=size, scale_factor=scale, mode=mode,
                              align_corners=align, antialias=aa)
                for mode, size, scale, align, aa in RESIZES]


def test_every_mode_and_geometry_is_pytorchs():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 10)
    got, want = tvm_outputs(Resizes(), x, decompose=True), Resizes()(x)
    for g, w, resize in zip(got, want, RESIZES, strict=True):
        assert g.shape == tuple(w.shape), resize
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5, err_msg=str(resize))


def test_a_mask_shrunk_to_a_feature_map_is_pytorchs():
    """DETR's padding mask: ``F.interpolate(mask[None].float(), size=feature.shape[-2:])``
    (nearest) and back to bool."""

    class Mask(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            mask = x[:, 0] > 0
            return F.interpolate(mask[None].float(), size=(3, 4)).to(torch.bool)[0]

    x = torch.randn(1, 3, 13, 17)
    (got,) = tvm_outputs(Mask(), x, decompose=True)
    np.testing.assert_array_equal(got, Mask()(x).numpy())


def test_resize2d_is_kept_where_it_is_pytorchs_function():
    """A whole upscale (nearest) and a resize by the scale in/out (linear, cubic) stay one
    ``resize2d``: its layout rule and schedules; a nearest shrink is a gather per axis."""
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map

    def ops(fn: object) -> str:
        class M(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return fn(x)  # type: ignore[operator,no-any-return]

        ep = torch.export.export(M(), (torch.randn(1, 3, 8, 8),)).run_decompositions()
        mod = from_exported_program(ep, custom_convert_map=custom_convert_map())
        assert isinstance(mod["main"], relax.Function)
        return str(mod["main"])

    assert "resize2d" in ops(lambda x: F.interpolate(x, scale_factor=2))
    assert "resize2d" in ops(lambda x: F.interpolate(x, size=(12, 12), mode="bilinear"))
    shrunk = ops(lambda x: F.interpolate(x, size=(3, 3)))
    assert "resize2d" not in shrunk and shrunk.count("R.take(") == 2


def test_a_resize_of_a_map_transposed_in_h_and_w_builds(tmp_path):
    """A map transposed in H and W (``x.transpose(2, 3)``), gated by a squeeze-excite and then
    upsampled: carrying the layout through the gate handed ``resize2d`` the layout "NWHC",
    which TVM's resize compute refuses ("NWHC layout is not supported": the build failed).
    A resize runs in NCHW or NHWC only; the transposition stays before it."""
    from tests.test_attention import _compile  # numerics against PyTorch inside

    class TransposedSE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.gate = nn.Sequential(nn.Conv2d(4, 2, 1), nn.ReLU(), nn.Conv2d(2, 4, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.conv(x).transpose(2, 3)
            y = y * torch.sigmoid(self.gate(y.mean((2, 3), keepdim=True)))
            return F.interpolate(y, scale_factor=2, mode="nearest")

    kernels = _compile(TransposedSE(), 8, tmp_path)
    assert len(kernels.runtime_transforms) <= 2, kernels.render()  # input and output
