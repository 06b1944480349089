"""A half-precision model (``model.half()``, ``model.to(torch.bfloat16)``) compiles and runs:
TVM 0.27's importer built every convolution and ``addmm`` with a float32 result and then
added the half-precision bias (the import failed: "Binary operators must have the same
datatype"), and a bfloat16 input reached the program as float32 (the run failed)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

pytestmark = pytest.mark.compile


class ConvHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.fc = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b(F.relu(self.a(x)))
        return self.fc(y.mean((2, 3)))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_precision_model_compiles_and_computes_pytorchs_values(tmp_path, dtype):
    import tvm

    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.execute import run_torch, run_tvm
    from cl_validate.session.inputs import make_inputs, torch_inputs
    from cl_validate.spec import load_case

    path = tmp_path / "c.toml"
    path.write_text(f'model = "x:y"\n[[inputs]]\nname = "x"\nshape = [2, 3, 8, 8]\n'
                    f'dtype = "{dtype}"\n[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n')
    case = load_case(path)
    torch.manual_seed(0)
    net = ConvHead().eval().to(getattr(torch, dtype))
    arrays = make_inputs(case)
    tensors = torch_inputs(case, arrays)
    compiled = compile_case(export_and_import(net, case, tensors), case, "llvm")
    got = run_tvm(compiled.executable, case, arrays, tvm.cpu())[0]
    want = run_torch(net, tensors)[0]
    assert got.shape == want.shape == (2, 5)
    step = 2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -10  # the dtype's relative step
    np.testing.assert_allclose(got, want, rtol=4 * step, atol=4 * step)


class NormsAndSoftmax(nn.Module):
    """Tokens through a LayerNorm, a softmax over 64 keys and a mean: each a sum that PyTorch
    accumulates in float32 for a float16 input."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 4, 4)
        self.norm = nn.LayerNorm(32)
        self.fc = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.norm(self.stem(x).flatten(2).transpose(1, 2))  # (B, 64, 32)
        scores = (t @ t.transpose(1, 2) * 0.2).softmax(-1)
        return self.fc((scores @ t).mean(1)).softmax(-1)


def test_float16_reductions_are_as_close_to_float64_as_pytorchs():
    """Summed in float16 (TVM's default), the program was several times further from the
    float64 model than PyTorch's float16 eager; summed in float32, within 2x of it."""
    from tests.conftest import tvm_outputs

    torch.manual_seed(0)
    net = NormsAndSoftmax().eval()
    x = torch.rand(2, 3, 32, 32) * 4 - 2
    exact = net.double()(x.double()).detach().numpy()
    half = net.half()
    eager = half(x.half()).float().detach().numpy()
    got = tvm_outputs(half, x.half().float(), decompose=True, dtype="float16")[0]

    def rmse(a: np.ndarray) -> float:
        return float(np.sqrt(np.mean((a.astype(np.float64) - exact) ** 2)))

    assert rmse(got) <= 2 * rmse(eager), (rmse(got), rmse(eager))
