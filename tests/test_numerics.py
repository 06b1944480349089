"""Seeded inputs and output handling."""

from __future__ import annotations

import numpy as np

from cl_validate.checks.verdict import Status
from cl_validate.session.execute import flatten_outputs
from cl_validate.session.in_process import judge_in_process
from cl_validate.session.inputs import make_inputs
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions
from tests.conftest import MINIMAL


def test_inputs_are_seeded_and_in_range(write_case):
    text = MINIMAL.replace('name = "x"', 'name = "x"\nrange = [2.0, 3.0]') + \
        '\n[[inputs]]\nname = "ids"\nshape = [4]\ndtype = "int64"\nrange = [0, 9]\n'
    case = load_case(write_case(text))
    a, b = make_inputs(case), make_inputs(case)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert a[0].dtype == np.float32 and a[0].shape == (1, 3, 16, 16)
    assert a[0].min() >= 2.0 and a[0].max() <= 3.0
    assert a[1].dtype == np.int64 and a[1].min() >= 0 and a[1].max() <= 9


def test_seed_changes_inputs(write_case):
    a = make_inputs(load_case(write_case(MINIMAL, "a.toml")))
    b = make_inputs(load_case(write_case("seed = 7\n" + MINIMAL, "b.toml")))
    assert not np.array_equal(a[0], b[0])


def test_flatten_nested_outputs():
    assert flatten_outputs((1, [2, (3,)], 4)) == [1, 2, 3, 4]


def test_the_float64_reference_runs_a_graph_module_that_creates_float32_states():
    """An exported (or PT2E-quantized) LSTM is a graph module whose zero states are created
    with ``dtype=float32`` baked in: in float64 its matmuls met float64 inputs ("mat1 and mat2
    must have the same dtype") and a quantized CRNN's numerics could not be judged."""
    import torch
    from torch import nn

    from cl_validate.session.execute import float64_model, run_torch64

    class Recurrent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.LSTM(4, 3, bidirectional=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.rnn(x)[0]

    torch.manual_seed(0)
    eager, x = Recurrent().eval(), torch.randn(5, 1, 4)
    graph = torch.export.export(eager, (x,)).module()
    (got,) = run_torch64(float64_model(graph), [x])
    assert got.dtype == np.float64
    want = eager.double()(x.double()).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_float64_reference_runs_a_graph_module_that_casts_to_its_own_dtype():
    """``x.to(h.dtype)``, ``.float()``, ``.type_as``: an exported graph keeps such a cast,
    a no-op at export, as an assertion that the tensor is float32
    (``aten._assert_tensor_metadata``), and a real cast (an index to float) as a copy to
    float32: in float64 the assertion failed ("Tensor dtype mismatch! Expected: Float, Got:
    double") and the numerics of a PT2E-quantized GPT-2, T5, Whisper or diffusers block
    could not be judged. Both follow the reference's float64."""
    import torch
    from torch import nn

    from cl_validate.session.execute import float64_model, run_torch64

    class Casts(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.proj(x).to(x.dtype)  # whisper's, diffusers' own-dtype casts
            positions = torch.arange(4).float() / 3  # T5's buckets: an index made float
            return h.float() * positions + h.type_as(x)

    torch.manual_seed(0)
    eager, x = Casts().eval(), torch.randn(2, 4)
    graph = torch.export.export(eager, (x,)).module()
    (got,) = run_torch64(float64_model(graph), [x])
    assert got.dtype == np.float64
    # float64 throughout, the index made float included (an integer's values are the same
    # in either), where eager float64 would take h.float() down to float32
    h = eager.proj.double()(x.double())
    want = (h * (torch.arange(4).double() / 3) + h).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_float64_reference_runs_a_graph_module_whose_index_grids_meet_products():
    """RAFT's ``coords_grid`` (``torch.arange(...).float()``) and a ``torch.linspace`` grid
    read by a matmul: in float64 the index made float32 met float64 in an op that does not
    promote ("expected scalar type Double but found Float") and a quantized RAFT's numerics
    could not be judged. The index is made float64 (the same values)."""
    import torch
    from torch import nn

    from cl_validate.session.execute import float64_model, run_torch64

    class Grid(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            coords = torch.arange(4).float().unsqueeze(1)
            lin = torch.linspace(0, 1, 4).unsqueeze(1)
            return x @ coords + x @ lin

    x = torch.randn(2, 4)
    graph = torch.export.export(Grid().eval(), (x,)).module()
    (got,) = run_torch64(float64_model(graph), [x])
    assert got.dtype == np.float64
    xd = x.double()
    want = xd @ torch.arange(4).double().unsqueeze(1) + xd @ torch.linspace(
        0, 1, 4, dtype=torch.float64).unsqueeze(1)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12)


def test_a_0_d_input_and_output_are_declared_and_judged(write_case):
    """A diffusion model's timestep is a 0-d tensor (``torch.tensor(500)``), and a model may
    return one (a loss, a mean): ``shape = []`` declares it, drawn from its range like any
    input, and both outputs are judged; before, the case file was refused."""
    case = load_case(write_case("""
        model = "tiny_models:timestep_block"
        targets = ["llvm"]
        [[inputs]]
        name = "x"
        shape = [1, 3, 8, 8]
        [[inputs]]
        name = "t"
        shape = []
        dtype = "int64"
        range = [0, 999]
        [layout]
        "relax.nn.conv2d" = ["NHWC", "OHWI"]
        [budget]
        layout_transforms = 2
        """))
    assert case.inputs[1].shape == ()
    _, t = make_inputs(case)
    assert t.shape == () and t.dtype == np.int64 and 0 <= int(t) <= 999
    (result,) = judge_in_process([case], RunOptions(isolate=False))
    numerics = result.check("numerics")
    assert numerics.status is Status.PASSED, (numerics.message, numerics.body)
    assert "output 1" in numerics.body, numerics.body  # the 0-d mean judged too
    assert result.check("layout_transforms").status is Status.PASSED  # x's and y's only
