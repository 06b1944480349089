"""QDQ int8 through the real pipeline: real int8 tensors in the IR, numerics within a step."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from cl_validate.checks.verdict import Status
from cl_validate.compile.factory import build_model
from cl_validate.session.in_process import judge_in_process
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions
from tests.conftest import tiny_case
from tests.conftest import tvm_outputs as _outputs

pytestmark = pytest.mark.compile
ZOO = Path(__file__).parents[1] / "model_cases"


CASE = """
model = "zoo.qdq:qdq_conv"
targets = ["llvm"]
[[inputs]]
name = "x"
shape = [1, 3, 32, 32]
[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]
[budget]
layout_transforms = 2
[tolerance]
rtol = 0.0
atol = 0.0626
"""


def test_qdq_conv_imports_int8_and_matches_torch_within_one_step(write_case):
    if str(ZOO) not in sys.path:
        sys.path.insert(0, str(ZOO))
    case = load_case(write_case(CASE))
    (result,) = judge_in_process([case], RunOptions(isolate=False))
    assert result.check("numerics").status is Status.PASSED, result.check("numerics").message
    assert result.check("layout").status is Status.PASSED
    assert result.kernels is not None
    names = " ".join(k.name for k in result.kernels)
    assert "quantize" in names and "dequantize" in names and "conv2d" in names
    assert not result.kernels.weight_transforms  # the int8 weight's layout change folded


def test_qdq_ir_holds_int8_tensors(write_case):
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.session.inputs import make_inputs, torch_inputs

    if str(ZOO) not in sys.path:
        sys.path.insert(0, str(ZOO))
    case = load_case(write_case(CASE))
    front = export_and_import(build_model(case), case,
                              torch_inputs(case, make_inputs(case)))
    text = front.mod.script(show_meta=False)
    assert 'dtype="int8"' in text and "R.quantize(" in text and "R.dequantize(" in text


def test_float_floor_and_trunc_division_by_a_python_int_import_and_match(write_case):
    """TVM's converter makes the divisor int32 and the import fails on a float tensor."""
    case = load_case(write_case(tiny_case(model="tiny_models:floor_div_positions",
                                          tolerance=(1e-5, 1e-5)).replace(
        "[1, 3, 16, 16]", "[1, 3, 8, 8]")))
    (result,) = judge_in_process([case], RunOptions(isolate=False))
    assert result.check("compile").status is Status.PASSED, result.check("compile").message
    assert result.check("numerics").status is Status.PASSED, result.check("numerics").message


def test_amax_amin_and_a_view_head_with_channels_last_input(write_case):
    """amax/amin import through our converter; with NHWC input the model still sees a tensor
    it can ``view(n, -1)`` (the wrapper's permute is made contiguous), and nothing is left to
    transpose: the flatten folds into the Linear weight."""
    case = load_case(write_case(tiny_case(0, model="tiny_models:spatial_gate_view_head",
                                          tolerance=(1e-5, 1e-5)).replace(
        "shape = [1, 3, 16, 16]", 'shape = [1, 3, 8, 8]\nlayout = "NHWC"')))
    (result,) = judge_in_process([case], RunOptions(isolate=False))
    for check in ("compile", "layout_transforms", "numerics"):
        assert result.check(check).status is Status.PASSED, result.check(check).message


def test_an_integer_clamp_with_one_bound_compiles_and_computes_it():
    """TVM's converter makes ``x.clamp(max=k)`` on integers ``R.clip(x, -inf, k)``, whose
    legalization fails ("Cannot convert infinity to BigInt", docs/upstream/int-clamp.md).
    A min above the max gives the max everywhere (``R.clip`` gave the min)."""
    import numpy as np
    import torch
    import tvm
    from torch import nn
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map

    class Clamped(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            i = (x * 10).long()
            return (i.clamp(max=5) + 1, i.clamp(min=3), i.clamp(2, 7), (x * 3).clamp(max=1.5),
                    x.clamp(0.5, -0.5), i.clamp(7, 2))

    x = torch.rand(16)
    ep = torch.export.export(Clamped(), (x,))
    mod = from_exported_program(ep, custom_convert_map=custom_convert_map())
    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})),
                              tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy()))
    for g, w in zip(got, Clamped()(x), strict=True):
        np.testing.assert_array_equal(g.numpy(), w.numpy())


def test_a_tensor_full_of_infinity_or_nan_compiles_and_is_pytorchs():
    """``torch.full(size, -inf)`` (a causal mask, GPT-2's masked value) and ``full_like`` did
    not build: TVM 0.27's ``topi.full`` tests a non-finite value's dtype as a string and
    fails on the Relax dtype ("argument of type 'PrimType' is not iterable",
    docs/upstream/full-infinite.md)."""
    import numpy as np
    from torch import nn

    from tests.conftest import tvm_outputs

    class Filled(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            inf = float("inf")
            return (torch.where(x > 0, x, torch.full([], -inf)),
                    torch.triu(torch.full((5, 5), -inf), 1) + x,
                    torch.where(x > 0, x, torch.full_like(x, -inf)).softmax(-1),
                    torch.nan_to_num(x + torch.full((5,), float("nan")), 7.0),
                    torch.minimum(x, torch.full((1,), inf)),
                    torch.where(x > 0, x.half(), torch.full([], -inf, dtype=torch.float16)))

    x = torch.randn(2, 5, 5)
    for got, want in zip(tvm_outputs(Filled(), x), Filled()(x), strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=0)  # the softmax


def test_selu_celu_and_rrelu_compute_what_pytorch_computes():
    """torch.export's decompositions make ``selu`` an ``elu`` with a scale and ``celu`` one
    with an input scale; TVM 0.27's converter reads only ``alpha``, so SELU was off by its
    scale (docs/upstream/elu-scale.md). ``rrelu`` in inference had no converter."""
    import numpy as np
    from torch import nn

    class Activations(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return (F.selu(x), F.celu(x, 2.0), F.elu(x, 0.7), F.rrelu(x, 0.2, 0.4),
                    nn.SELU()(x * 0.5))

    x = torch.linspace(-4, 4, 33).reshape(3, 11)
    model = Activations().eval()
    for g, w in zip(_outputs(model, x, decompose=True), model(x), strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-6, atol=1e-6)


def test_tensor_unfold_windows_are_exact():
    """``Tensor.unfold`` (patches, audio frames, overlapping windows) had no converter."""
    import numpy as np
    from torch import nn

    class Windows(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            patches = x.unfold(2, 2, 2).unfold(3, 2, 2)
            return patches, x.flatten(1).unfold(-1, 5, 3), x.unfold(1, 2, 1)

    x = torch.randn(2, 3, 6, 8)
    for g, w in zip(_outputs(Windows(), x, decompose=True), Windows()(x), strict=True):
        np.testing.assert_array_equal(g, w.numpy())


def test_group_norm_without_an_affine_weight_or_bias_imports():
    """TVM 0.27's importer crashed on ``native_group_norm`` with no weight or bias ("Found
    null pointer node"): ``F.group_norm(x, g)``, ``nn.GroupNorm(affine=False)``."""
    import numpy as np
    from torch import nn

    class Norms(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.plain = nn.GroupNorm(2, 4, affine=False)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return (F.group_norm(x, 2), self.plain(x * 2),
                    F.group_norm(x, 4, torch.linspace(0.5, 2, 4)), F.group_norm(x.flatten(2), 1))

    x = torch.randn(2, 4, 5, 5)
    model = Norms().eval()
    for g, w in zip(_outputs(model, x, decompose=True), model(x), strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5)


def test_prod_and_kthvalue_along_an_axis_import():
    """``torch.prod(x, dim)`` and ``torch.kthvalue`` had no converter."""
    import numpy as np
    from torch import nn

    class Reductions(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            v, i = torch.kthvalue(x, 2, dim=1)
            v2, i2 = torch.kthvalue(x, 3, dim=-1, keepdim=True)
            return torch.prod(x, dim=1), torch.prod(x, 2, keepdim=True), v, i, v2, i2

    x = torch.randn(2, 4, 5, 5)
    for g, w in zip(_outputs(Reductions(), x, decompose=True), Reductions()(x), strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-6, atol=1e-6)


def test_var_mean_imports_with_each_correction():
    """``torch.var_mean`` (BiT's StdConv2d standardizes its weight with it) has no converter
    in TVM 0.27: biased and unbiased variance, a kept or a dropped axis, all axes."""
    import numpy as np
    import tvm
    from torch import nn
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map

    class VarMean(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            v, m = torch.var_mean(x, dim=[1, 2, 3], keepdim=True, unbiased=False)
            v1, m1 = torch.var_mean(x, dim=1)
            v2, m2 = torch.var_mean(x, correction=2)
            return (x - m) / torch.sqrt(v + 1e-10), v1, m1, v2, m2

    x = torch.randn(4, 3, 5, 5)
    ep = torch.export.export(VarMean(), (x,))
    mod = from_exported_program(ep, custom_convert_map=custom_convert_map())
    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})),
                              tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy()))
    for g, w in zip(got, VarMean()(x), strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-5)


def test_a_failed_stage_names_the_op_and_the_models_source():
    """TVM's own converter's ``R.clip(int64, -inf, 5)`` fails legalization with "Cannot
    convert infinity to BigInt" and no op or line: the culprit search runs each call through
    the failed stage alone and names the one that fails, with the import's source for it."""
    import math

    import pytest
    import tvm
    from tvm import relax

    from cl_validate.compile.culprit import culprit
    from cl_validate.errors import CompileStageError

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(x))
            i = bb.emit(relax.op.astype(y, "int64"))
            c = bb.emit(relax.op.clip(i, -math.inf, 5))
            out = bb.emit_output(relax.op.add(c, relax.const(1, "int64")))
        bb.emit_func_output(out)
    mod = bb.get()
    legalize = relax.transform.LegalizeOps()
    with pytest.raises(Exception) as info:
        legalize(mod)
    where = culprit(legalize, mod, {c.name: "pos (RelPos) at model.py:42"}, info.value)
    assert where == f"relax.clip (binding {c.name}, from pos (RelPos) at model.py:42)"
    message = str(CompileStageError("legalize", info.value, at=where))
    assert message.startswith("legalize failed: ") and message.endswith(f"at {where}")
    assert "BigInt" in message
    assert culprit(legalize, tvm.IRModule({}), {}, info.value) is None


def test_max_and_min_along_a_dim_are_reductions_with_the_first_index_of_a_tie():
    """``x.max(dim)`` was a sort (``topk``) in TVM's converter, and ``x.min(dim)`` did not
    import; both are now the reduction and its arg-reduction, ties at the first index as in
    PyTorch, keepdim or not, on floats and integers."""
    import numpy as np
    import torch
    import tvm
    from torch import nn
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map

    class Extremes(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            hi, hi_at = x.max(dim=1)
            lo, lo_at = x.min(dim=-1, keepdim=True)
            ihi, ihi_at = (x * 4).round().long().max(2)  # integers: many ties
            return hi, hi_at, lo, lo_at, ihi, ihi_at, x.max(dim=0).values

    x = torch.randn(3, 5, 7).round()  # few distinct values: ties along every axis
    ep = torch.export.export(Extremes(), (x,))
    mod = from_exported_program(ep, custom_convert_map=custom_convert_map())
    assert "topk" not in mod.script()
    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})),
                              tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy()))
    for g, w in zip(got, Extremes()(x), strict=True):
        assert g.numpy().dtype == w.numpy().dtype
        np.testing.assert_array_equal(g.numpy(), w.numpy())


_NEGATIVE_INDEXING = {
    "select": lambda x, i: x[:, :, -1],  # the last step: TCN, RNN heads
    "select_first_axis": lambda x, i: x[-2],
    "one_index_tensor": lambda x, i: x[:, i],
    "constant_index_tensor": lambda x, i: x[:, torch.tensor([-1, 2, -4])],
    "adjacent_index_tensors": lambda x, i: x[:, i, i],
    "index_tensors_apart": lambda x, i: x[i, :, i],  # broadcast shape first, as PyTorch
    "every_axis": lambda x, i: x[i, i, i],
    "take": lambda x, i: torch.take(x, i),
}


@pytest.mark.parametrize("name", sorted(_NEGATIVE_INDEXING))
def test_negative_indices_count_from_the_end_as_in_pytorch(name):
    """TVM 0.27's converters pass a negative index to ``take`` (fast mode), which reads out
    of bounds: ``x[:, :, -1]`` came out as another value (or NaN), a wrong program."""
    import numpy as np
    import tvm
    from torch import nn
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map

    pick = _NEGATIVE_INDEXING[name]

    class Indexed(nn.Module):
        def forward(self, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
            return pick(x, i)

    x, i = torch.randn(4, 5, 6), torch.tensor([-1, 0, -4, 3])
    ep = torch.export.export(Indexed(), (x, i))
    mod = from_exported_program(ep, custom_convert_map=custom_convert_map())
    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})),
                              tvm.cpu())
    (got,) = vm["main"](tvm.runtime.tensor(x.numpy()), tvm.runtime.tensor(i.numpy()))
    np.testing.assert_array_equal(got.numpy(), pick(x, i).numpy())


def test_negative_indices_on_a_dynamic_axis_count_from_its_run_time_length():
    import numpy as np
    import tvm
    from torch import nn
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map

    class Indexed(nn.Module):
        def forward(self, x: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return x[-1], x[:, i], x[i, i], x[i, 1:, i]

    i = torch.tensor([-1, 2, -3])
    batch = torch.export.Dim("batch", min=3, max=16)
    ep = torch.export.export(Indexed(), (torch.randn(3, 5, 5), i),
                             dynamic_shapes={"x": {0: batch}, "i": None})
    mod = from_exported_program(ep, custom_convert_map=custom_convert_map())
    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})),
                              tvm.cpu())
    for n in (3, 7):
        x = torch.randn(n, 5, 5)
        got = vm["main"](tvm.runtime.tensor(x.numpy()), tvm.runtime.tensor(i.numpy()))
        for g, w in zip(got, Indexed()(x, i), strict=True):
            np.testing.assert_array_equal(g.numpy(), w.numpy())


_ADAPTIVE_MAX = {
    "global": lambda x: F.adaptive_max_pool2d(x, 1),  # CBAM's channel attention
    "size_divides": lambda x: F.adaptive_max_pool2d(x, (3, 2)),
    "overlapping_windows": lambda x: F.adaptive_max_pool2d(x, (4, 7)),
    "one_axis_kept": lambda x: F.adaptive_max_pool2d(x, (None, 3)),
    "no_batch_axis": lambda x: F.adaptive_max_pool2d(x[0], 2),
    "global_indices": lambda x: F.adaptive_max_pool2d(x, 1, return_indices=True)[1],
}


@pytest.mark.parametrize("name", sorted(_ADAPTIVE_MAX))
def test_adaptive_max_pool_imports_with_pytorchs_windows(name):
    """TVM 0.27 has no converter for ``adaptive_max_pool2d``: CBAM did not import."""
    import numpy as np
    import tvm
    from torch import nn
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map

    pool = _ADAPTIVE_MAX[name]

    class Pooled(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return pool(x)

    x = torch.randn(2, 3, 6, 10)
    ep = torch.export.export(Pooled(), (x,))
    mod = from_exported_program(ep, custom_convert_map=custom_convert_map())
    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})),
                              tvm.cpu())
    (got,) = vm["main"](tvm.runtime.tensor(x.numpy()))
    np.testing.assert_array_equal(got.numpy(), pool(x).numpy())


def _put(x: torch.Tensor, where: object, value: object, accumulate: bool = False
         ) -> torch.Tensor:
    y = x.clone()
    if accumulate:
        y[where] += value  # type: ignore[index]
    else:
        y[where] = value  # type: ignore[index]
    return y


_INDEXED_WRITES = {
    "after_a_slice": lambda x, i: _put(x, (slice(None), i), 5.0),
    "values_of_the_indexed_shape": lambda x, i: _put(x, (slice(None), slice(None), i),
                                                     x[:, :, :4] * 2),
    "first_axis": lambda x, i: _put(x, i, -1.0),
    "adjacent_pair": lambda x, i: _put(x, (slice(None), i, i), 7.0),
    "constant_negative_accumulated": lambda x, i: _put(
        x, (slice(None), torch.tensor([-1, 0])), 1.0, accumulate=True),
    "broadcast_index_tensors": lambda x, i: _put(x, (slice(None), i[:, None], i[None, :]), 3.0),
    "mask_of_one_value": lambda x, i: _put(x, x > 0, 0.0),
    "mask_over_leading_axes": lambda x, i: _put(x, x[..., 0] > 0, 2.0),
}


@pytest.mark.parametrize("name", sorted(_INDEXED_WRITES))
def test_indexed_writes_import_with_pytorchs_semantics(name):
    """``x[:, idx] = v`` did not import ("IndexPut requires the number of index tensors to
    match the data tensor dimensions"), a negative index went through, and ``x[x > 0] = 0``
    failed on its boolean index."""
    import numpy as np
    import tvm
    from torch import nn
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map

    write = _INDEXED_WRITES[name]

    class Written(nn.Module):
        def forward(self, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
            return write(x, i)

    x, i = torch.randn(4, 5, 6), torch.tensor([-1, 0, -4, 3])
    ep = torch.export.export(Written(), (x, i))
    mod = from_exported_program(ep, custom_convert_map=custom_convert_map())
    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})),
                              tvm.cpu())
    (got,) = vm["main"](tvm.runtime.tensor(x.numpy()), tvm.runtime.tensor(i.numpy()))
    np.testing.assert_array_equal(got.numpy(), write(x, i).numpy())
