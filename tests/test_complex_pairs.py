"""Rotary positions written with complex numbers (Meta's LLaMA reference, SAM 2's memory
attention) and spectral mixing (GFNet, FNet, LaMa's Fourier convolutions): TVM 0.27 had no
converter for ``view_as_complex``, ``view_as_real``, ``complex`` or the FFTs and no complex
dtype, so such a model did not import. Complex tensors are now pairs of reals, a DFT a
product with a constant matrix along each axis; an op the pairs cannot compute is named
before the import."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import tvm
from torch import nn

from cl_validate.errors import CompileStageError

pytestmark = pytest.mark.compile


class Rotary(nn.Module):
    """Patch tokens, q and k rotated as complex products, SDPA, keys from twice the tokens
    (the rotation repeated for them). `made`: "constant", a complex constant (an attribute,
    as SAM 2 keeps it) viewed; else made in the forward from real buffers, by
    ``torch.complex`` or ``torch.polar``."""

    def __init__(self, made: str, dim: int = 16, heads: int = 2, tokens: int = 16) -> None:
        super().__init__()
        self.made, self.heads, hd = made, heads, dim // heads
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.q, self.k, self.v = (nn.Linear(dim, dim) for _ in range(3))
        angles = torch.outer(torch.arange(tokens).float(),
                             1.0 / (100 ** (torch.arange(0, hd, 2).float() / hd)))
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        self.freqs_cis = torch.polar(torch.ones_like(angles), angles)

    def _rotate(self, t: torch.Tensor, repeat: int) -> torch.Tensor:
        if self.made == "constant":
            f = self.freqs_cis.view(1, 1, *self.freqs_cis.shape).repeat(1, 1, repeat, 1)
        elif self.made == "polar":  # Meta's precompute_freqs_cis, in the forward
            angles = torch.atan2(self.sin, self.cos)
            f = torch.polar(torch.ones_like(angles), angles)[None, None].repeat(1, 1, repeat, 1)
        else:
            f = torch.complex(self.cos, self.sin)[None, None].repeat(1, 1, repeat, 1)
        tc = torch.view_as_complex(t.float().reshape(*t.shape[:-1], -1, 2))
        return torch.view_as_real(tc * f).flatten(3).type_as(t)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)
        b, n, c = t.shape
        mem = torch.cat([t, t.flip(1)], dim=1)
        q = self.q(t).view(b, n, self.heads, -1).transpose(1, 2)
        k = self.k(mem).view(b, 2 * n, self.heads, -1).transpose(1, 2)
        v = self.v(mem).view(b, 2 * n, self.heads, -1).transpose(1, 2)
        out = F.scaled_dot_product_attention(self._rotate(q, 1), self._rotate(k, 2), v)
        return out.transpose(1, 2).reshape(b, n, c)


@pytest.mark.parametrize("made", ["complex", "polar", "constant"])
def test_rotary_positions_as_complex_products_compile_and_compute_them(made, tmp_path):
    from tests.test_attention import _compile  # numerics against PyTorch inside

    kernels = _compile(Rotary(made), 16, tmp_path)
    assert sum(k.name.startswith("attention") for k in kernels.kernels) == 1, kernels.render()


class Shifted(nn.Module):
    """Complex arithmetic beside the rotation: a real added to and subtracted from a complex
    of fewer axes, a real times a complex, complex minus complex."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = torch.view_as_complex(x[0, 0].reshape(4, 2, 2))  # (4, 2) complex
        w = torch.view_as_complex(x[0, 1].reshape(4, 2, 2))
        real = x[0, 2, :2, :2]  # (2, 2)
        out = (x[0, :, :2, :2] + z[:2]) - (w[:2] * real) - (real - w[1])  # (3, 2, 2)
        return torch.view_as_real(out).flatten(-2)


def test_complex_arithmetic_with_reals_of_other_shapes_computes_it(tmp_path):
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.execute import run_torch, run_tvm
    from cl_validate.session.inputs import make_inputs, torch_inputs
    from cl_validate.spec import load_case

    path = tmp_path / "c.toml"
    path.write_text('model = "x:y"\n[[inputs]]\nname = "x"\nshape = [1, 3, 4, 4]\n'
                    '[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n')
    case = load_case(path)
    arrays = make_inputs(case)
    tensors = torch_inputs(case, arrays)
    compiled = compile_case(export_and_import(Shifted(), case, tensors), case, "llvm")
    got = run_tvm(compiled.executable, case, arrays, tvm.cpu())[0]
    np.testing.assert_allclose(got, run_torch(Shifted(), tensors)[0], rtol=1e-6, atol=1e-6)


class Exponential(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.view_as_real(torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2)).exp())


def test_an_op_the_pairs_cannot_compute_is_named_before_the_import(tmp_path):
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.session.inputs import make_inputs, torch_inputs
    from cl_validate.spec import load_case

    path = tmp_path / "c.toml"
    path.write_text('model = "x:y"\n[[inputs]]\nname = "x"\nshape = [1, 3, 4, 4]\n'
                    '[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n')
    case = load_case(path)
    with pytest.raises(CompileStageError) as err:
        export_and_import(Exponential(), case, torch_inputs(case, make_inputs(case)))
    message = str(err.value)
    assert "no converter for exp.default on complex tensors (hint:" in message, message
    assert "Traceback" not in message and "\n" not in message, message


class Spectral(nn.Module):
    """Every DFT form torch.fft decomposes to, on a conv map viewed as channels-last tokens:
    GFNet's global filter (``rfft2``, a complex weight, ``irfft2``, ``norm="ortho"``), FNet's
    mixing (``fft`` over two axes, real part), an odd-length inverse (``irfft`` with ``n``), a
    spectrum's magnitude and phase after ``fftshift``."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 6, 3, padding=1)
        self.weight = nn.Parameter(torch.randn(7, 4, 6, 2) * 0.5)
        self.head = nn.Conv2d(6, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.stem(x).permute(0, 2, 3, 1)  # (B, 7, 7, C) tokens
        f = torch.fft.rfft2(t, dim=(1, 2), norm="ortho") * torch.view_as_complex(self.weight)
        t = t + torch.fft.irfft2(f, s=(7, 7), dim=(1, 2), norm="ortho")
        t = t + torch.fft.fft2(t, dim=(1, 2)).real * 0.1
        t = t + torch.fft.irfft(torch.fft.rfft(t, dim=2), n=7, dim=2)
        spectrum = torch.fft.fftshift(torch.fft.fft(t, dim=-1, norm="forward"), dim=-1)
        t = t + spectrum.abs() + 0.01 * spectrum.angle()
        return self.head(t.permute(0, 3, 1, 2))


def test_fourier_transforms_compute_them_reading_the_tokens_in_place(tmp_path):
    from tests.passes.conftest import compile_nhwc

    torch.manual_seed(0)
    model = Spectral()
    _, kernels = compile_nhwc(tmp_path, lambda: model, (1, 3, 7, 7), rtol=1e-4, atol=1e-4,
                              input_layout="NCHW")
    # the NCHW input and output boundaries only: every DFT reads the (B, H, W, C) tokens
    # as (before, n, after), in place
    assert len(kernels.runtime_transforms) == 2, kernels.render()


class FourierUnit(nn.Module):
    """LaMa's Fourier unit on an NCHW feature map: ``rfftn`` over (H, W), the real and
    imaginary parts stacked into channels for a 1x1 conv, ``irfftn`` back; beside a local
    conv, as in its fast Fourier convolution."""

    def __init__(self, c: int = 4) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.mix = nn.Conv2d(2 * c, 2 * c, 1)
        self.local = nn.Conv2d(c, c, 3, padding=1)
        self.head = nn.Conv2d(c, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(x))
        f = torch.fft.rfftn(y, dim=(-2, -1), norm="ortho")
        f = torch.stack((f.real, f.imag), dim=-1).permute(0, 1, 4, 2, 3)
        f = torch.relu(self.mix(f.reshape(f.shape[0], -1, *f.shape[3:])))
        f = f.view(f.shape[0], -1, 2, *f.shape[2:]).permute(0, 1, 3, 4, 2)
        spectral = torch.fft.irfftn(torch.complex(f[..., 0], f[..., 1]), s=y.shape[-2:],
                                    dim=(-2, -1), norm="ortho")
        return self.head(self.local(y) + spectral)


def test_a_feature_map_is_transformed_channels_last(tmp_path):
    """The (H, W) transforms of an NCHW feature map read it channels-last (the importer's
    permutes to and from it cancel against ConvertLayout's): its boundaries only, as the
    model without the Fourier unit."""
    from tests.passes.conftest import compile_nhwc

    torch.manual_seed(0)
    model = FourierUnit()
    _, kernels = compile_nhwc(tmp_path, lambda: model, (1, 3, 8, 8), rtol=1e-4, atol=1e-4,
                              input_layout="NCHW")
    assert len(kernels.runtime_transforms) == 2, kernels.render()
