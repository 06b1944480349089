"""fold_params: what depends on weights and constants alone is computed once, when the
program is compiled, including what is computed from tensors made from nothing (``zeros``,
``full``, ``arange``), which neither TVM's LiftTransformParams nor FoldConstant folds."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cl_validate.compile.fold import fold_params
from cl_validate.ir import bindings, op_name

pytestmark = pytest.mark.compile


class CircularPad(nn.Module):
    """A circular pad (torch decomposes it into a zero buffer and slice scatters) between
    two convolutions: ConvertLayout transposes the buffer, a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(F.pad(self.a(x), [1, 1, 1, 1], mode="circular"))


def test_a_transform_of_a_buffer_made_from_nothing_folds(tmp_path) -> None:
    """It failed the case as a weight transform that survived to run time."""
    from tests.passes.conftest import compile_nhwc

    _, kernels = compile_nhwc(tmp_path, CircularPad, (1, 3, 16, 16), rtol=1e-5, atol=1e-5,
                              input_layout="NCHW")
    assert not kernels.weight_transforms, kernels.render()
    assert len(kernels.runtime_transforms) == 2, kernels.render()  # the boundaries


class IgnoresItsInput(nn.Module):
    """A convolution of a constant: the output does not depend on the input at all."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.ones(1, 3, 8, 8))


def test_a_model_whose_output_ignores_its_input_compiles_to_its_constant(tmp_path) -> None:
    """TVM's weight lifting took the output itself out of ``main`` and the build failed
    ("Var gv is not defined"); the whole output is folded instead, computed as PyTorch
    computes it (a check that the numerics cannot fail then says so)."""
    from tests.passes.conftest import compile_nhwc

    _, kernels = compile_nhwc(tmp_path, IgnoresItsInput, (1, 3, 8, 8), rtol=1e-5, atol=1e-5,
                              input_layout="NCHW")
    assert len(kernels.kernels) == 0, kernels.render()


def test_a_buffer_only_read_at_run_time_is_left_to_its_kernel() -> None:
    """``x + zeros`` reads the zeros where its kernel makes them (no constant the size of the
    activation to read instead); ``x + permute(zeros)`` has the permute computed once."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 64, 64, 8), "float32"))
    w = relax.Var("w", relax.TensorType((8,), "float32"))
    with bb.function("main", [x, w], attrs={"num_input": 1}):
        with bb.dataflow():
            a = bb.emit(relax.op.add(relax.op.add(x, w),
                                     relax.op.zeros((1, 64, 64, 8), "float32")))
            z = bb.emit(relax.op.full((1, 8, 64, 64), relax.const(0.5, "float32"), "float32"))
            b = bb.emit(relax.op.add(a, relax.op.permute_dims(z, [0, 2, 3, 1])))
            gv = bb.emit_output(b)
        bb.emit_func_output(gv)
    mod = fold_params(bb.get(), {"w": tvm.runtime.tensor(torch.zeros(8).numpy())})
    ops = [op_name(b.value) for b in bindings(mod["main"])]
    assert ops.count("relax.zeros") == 1, ops
    assert "relax.full" not in ops and "relax.permute_dims" not in ops, ops
    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})),
                              tvm.cpu())
    ones = torch.ones(1, 64, 64, 8)
    out = vm["main"](tvm.runtime.tensor(ones.numpy())).numpy()
    assert (out == 1.5).all()


def test_fold_constant_runs_only_where_it_has_something_to_fold(tmp_path, monkeypatch) -> None:
    """FoldConstant legalizes every op to look for constant operands; after the weights'
    transform a convolution network has none left, so it is skipped there, and the stage's
    IR is the same as with it, structurally."""
    import tvm_ffi

    from cl_validate.compile import fold
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.spec import load_case

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)
            self.fc = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(F.relu(self.bn(self.conv(x))).mean((2, 3)))

    path = tmp_path / "c.toml"
    path.write_text('model = "x:y"\n[[inputs]]\nname = "x"\nshape = [1, 3, 8, 8]\n'
                    '[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n')
    case = load_case(path)
    front = export_and_import(Net().eval(), case, (torch.randn(1, 3, 8, 8),))
    seen: list[bool] = []
    real = fold._foldable
    monkeypatch.setattr(fold, "_foldable", lambda v: seen.append(real(v)) or seen[-1])
    guarded = compile_case(front, case, "llvm", build=False).stage("fold_params").mod
    assert seen and not any(seen)
    monkeypatch.setattr(fold, "_foldable", lambda v: True)
    always = compile_case(front, case, "llvm", build=False).stage("fold_params").mod
    assert tvm_ffi.structural_equal(guarded, always)
    from tvm import relax

    x = relax.Var("x", relax.TensorType((2,), "float32"))
    one = relax.const(1.0, "float32")
    assert real(relax.op.add(one, one))  # computed: FoldConstant runs
    assert real(one)  # a bound constant, propagated into its uses
    assert not real(relax.op.add(x, one))
