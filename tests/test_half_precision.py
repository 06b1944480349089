"""A half-precision model (``model.half()``, ``model.to(torch.bfloat16)``) compiles and runs:
TVM 0.27's importer built every convolution and ``addmm`` with a float32 result and then
added the half-precision bias (the import failed: "Binary operators must have the same
datatype"), and a bfloat16 input reached the program as float32 (the run failed)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cl_validate.checks.verdict import Status
from cl_validate.session.in_process import judge_in_process
from cl_validate.spec import load_case
from cl_validate.spec.options import RunOptions

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


class HalfAttention(nn.Module):
    """timm's written-out attention (packed qkv, heads by permute, ``(q * scale) @ kᵀ``,
    softmax, ``@ v``) on the tokens of a conv patch embed."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, 32, 2, 2)
        self.qkv, self.proj, self.head = nn.Linear(32, 96), nn.Linear(32, 32), nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).flatten(2).transpose(1, 2)
        b, n, c = t.shape
        q, k, v = self.qkv(t).reshape(b, n, 3, 4, 8).permute(2, 0, 3, 1, 4).unbind(0)
        a = ((q * 8 ** -0.5) @ k.transpose(-2, -1)).softmax(-1) @ v
        return self.head((t + self.proj(a.transpose(1, 2).reshape(b, n, c))).mean(1))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_attention_is_raised_and_summed_in_float32(tmp_path, dtype):
    """TVM imports a half model's ``q @ kᵀ`` with float32 scores, and the softmax's result is
    rounded back to the half type: the raise took only one dtype, so a half model's written-out
    attention stayed as matmuls with its head transposes (2 transforms where float32 has 1).
    Raised, it sums in float32 (as PyTorch's kernels do) and is as close to float64 as eager."""
    import tvm

    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.execute import run_tvm
    from cl_validate.session.inputs import make_inputs, torch_inputs
    from cl_validate.spec import load_case

    path = tmp_path / "c.toml"
    path.write_text(f'model = "x:y"\n[[inputs]]\nname = "x"\nshape = [1, 3, 16, 16]\n'
                    f'dtype = "{dtype}"\n[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n')
    case = load_case(path)
    torch.manual_seed(0)
    net = HalfAttention().eval()
    arrays = make_inputs(case)
    tensors = torch_inputs(case, arrays)
    exact = net.double()(tensors[0].double()).detach().numpy()
    half = net.to(getattr(torch, dtype))
    eager = half(tensors[0]).float().detach().numpy()
    compiled = compile_case(export_and_import(half, case, tensors), case, "llvm")
    kernels = read_kernel_list(compiled)
    assert sum(k.name.startswith("attention") for k in kernels.kernels) == 1, kernels.render()
    assert len(kernels.runtime_transforms) == 1, kernels.render()  # the NCHW input's
    got = run_tvm(compiled.executable, case, arrays, tvm.cpu())[0]

    def rmse(a: np.ndarray) -> float:
        return float(np.sqrt(np.mean((a.astype(np.float64) - exact) ** 2)))

    assert rmse(got) <= 2 * rmse(eager), (rmse(got), rmse(eager))


def test_the_attention_kernel_sums_half_inputs_in_float32():
    """float16 Q, K, V over 256 keys: summed in float16 the scores and the weighted sum were
    several float16 steps off; summed in float32 and rounded once, within one step or so."""
    import tvm

    from cl_validate.compile.attention import attention_te

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, n, 2, 64)).astype("float16") for n in (8, 256, 256))
    tq, tk, tv = (tvm.te.placeholder(a.shape, "float16", n) for a, n in
                  ((q, "q"), (k, "k"), (v, "v")))
    out = attention_te(tq, tk, tv, None, 0.125, None)
    assert str(out.dtype) == "float16"
    func = tvm.te.create_prim_func([tq, tk, tv, out])
    lib = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target({"kind": "llvm"}))
    res = tvm.runtime.tensor(np.zeros((1, 8, 2, 64), "float16"))
    lib["main"](*map(tvm.runtime.tensor, [q, k, v]), res)
    q64, k64, v64 = (a.astype(np.float64).transpose(0, 2, 1, 3) for a in (q, k, v))
    s = q64 @ k64.transpose(0, 1, 3, 2) * 0.125
    p = np.exp(s - s.max(-1, keepdims=True))
    want = ((p / p.sum(-1, keepdims=True)) @ v64).transpose(0, 2, 1, 3)
    err = np.abs(res.numpy().astype(np.float64) - want)
    steps = err / np.maximum(np.abs(want), 2.0 ** -14) / 2.0 ** -11  # in half-steps (ulp/2)
    assert float(np.quantile(steps, 0.99)) <= 2.0, float(np.quantile(steps, 0.99))


def _compiled_half(tmp_path, net: nn.Module, shape: tuple[int, ...], dtype: str = "float16"):
    """`net` in `dtype` compiled for llvm: (kernel list, TVM's outputs, PyTorch's outputs);
    `exact_outputs` runs it in float64 on the same inputs."""
    import tvm

    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.execute import run_torch, run_tvm
    from cl_validate.session.inputs import make_inputs, torch_inputs
    from cl_validate.spec import load_case

    path = tmp_path / "h.toml"
    path.write_text(f'model = "x:y"\n[[inputs]]\nname = "x"\nshape = {list(shape)}\n'
                    f'dtype = "{dtype}"\n[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n')
    case = load_case(path)
    torch.manual_seed(0)
    arrays = make_inputs(case)
    tensors = torch_inputs(case, arrays)
    _exact[id(net)] = [t.detach().numpy() for t in _as_tuple(
        copy.deepcopy(net).eval().double()(*(t.double() for t in tensors)))]
    net = net.eval().to(getattr(torch, dtype))
    compiled = compile_case(export_and_import(net, case, tensors), case, "llvm")
    got = run_tvm(compiled.executable, case, arrays, tvm.cpu())
    return read_kernel_list(compiled), got, run_torch(net, tensors)


_exact: dict[int, list[np.ndarray]] = {}


def _as_tuple(out: object) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)  # type: ignore[return-value]


def exact_outputs(net: nn.Module) -> list[np.ndarray]:
    """The float64 outputs of `net` from its last `_compiled_half`."""
    return _exact[id(net)]


def _rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a.astype(np.float64) - b) ** 2)))


class Products(nn.Module):
    """A product of each kind TVM imports with a float32 result (mm, bmm, matmul, einsum),
    returned as they are, and a float32 constant concatenated with a float16 map (PyTorch
    promotes the concatenation to float32; TVM's concat refused mixed dtypes)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8) / 3)
        self.register_buffer("grid", torch.arange(8.0).view(1, 1, 8), persistent=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        t = x.flatten(1, 2)  # (B, 24, 8)
        mm = t[0] @ self.w
        bmm = torch.bmm(t, t.transpose(1, 2))
        einsum = torch.einsum("bnc,cd->bnd", t, self.w)
        return mm, bmm, t.unsqueeze(1) @ self.w, einsum, torch.cat(
            [self.grid.float().expand(len(t), 1, 8), t[:, :1]], 1)


def test_half_precision_products_return_the_models_dtype(tmp_path):
    """TVM builds mm, bmm, matmul and einsum with a float32 result and left it so: every op
    after a product computed and stored float32 (twice the bytes), and a model returning one
    returned float32. Rounded to the model's dtype now, as PyTorch's are."""
    _, got, want = _compiled_half(tmp_path, Products(), (2, 3, 8, 8))
    assert [g.dtype for g in got] == [np.float16] * 4 + [np.float32], [g.dtype for g in got]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=4e-3,
                                   atol=4e-3)


class ChannelMajorAttention(nn.Module):
    """YOLO11's PSA in small: heads viewed channel-major off a 1×1 conv, ``(qᵀ @ k) · s``,
    softmax, ``v @ attnᵀ``, a 1×1 projection and the residual."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.hd = heads, dim // heads
        self.stem, self.qkv = nn.Conv2d(3, dim, 3, 2, 1), nn.Conv2d(dim, 3 * dim, 1)
        self.proj = nn.Conv2d(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.stem(x)
        b, c, h, w = m.shape
        q, k, v = self.qkv(m).view(b, self.heads, 3 * self.hd, h * w).split([self.hd] * 3, 2)
        attn = ((q.transpose(-2, -1) @ k) * self.hd ** -0.5).softmax(-1)
        return self.proj((v @ attn.transpose(-2, -1)).view(b, c, h, w)) + m


@pytest.mark.parametrize("model, size, dtype", [
    ("windows", 8, "float16"), ("timm-eager", 16, "float16"), ("sam", 16, "float16"),
    ("psa", 16, "float16"), ("windows", 8, "bfloat16"), ("psa", 16, "bfloat16")])
def test_a_half_precision_transformer_has_its_float32_transforms(tmp_path, model, size,
                                                                 dtype):
    """The roundings a half model gets (products and norms rounded to its dtype, a raised
    attention's float32 result) sat between permutes that cancel in float32: Swin's window
    reverse, written by the output projection in float32, stayed a transpose (7 transforms
    for 1 on a small Swin stage). Widen-and-round-back pairs are dropped (exact) and a
    product writes through its rounding: the counts are float32's, the numerics as close to
    float64 as PyTorch's half eager is. bfloat16 besides: a bfloat16 constant scale was not
    read as a number (numpy holds it as ml_dtypes' bfloat16, of kind "V"), and products
    on bfloat16 operands were not taken as strided products (YOLO11's PSA 6 for 2)."""
    from tests.test_attention import _FoldedHeads, _TimmBlock, _Windows

    make = {"windows": _Windows, "timm-eager": lambda: _TimmBlock(fused=False),
            "sam": _FoldedHeads, "psa": ChannelMajorAttention}[model]
    net = make()
    half, got, want = _compiled_half(tmp_path, net, (1, 3, size, size), dtype)
    single, _, _ = _compiled_half(tmp_path, make(), (1, 3, size, size), "float32")
    assert len(half.runtime_transforms) == len(single.runtime_transforms), half.render()
    assert got[0].dtype == (np.float16 if dtype == "float16" else np.float32)  # bf16: read
    exact = exact_outputs(net)[0]
    assert _rmse(got[0], exact) <= 2 * _rmse(want[0], exact), (_rmse(got[0], exact),
                                                                _rmse(want[0], exact))


def test_a_widened_value_rounded_back_is_the_value_and_a_rounding_stays():
    """``astype(astype(x, float32), float16)`` of a float16 ``x`` is ``x`` bit for bit (and an
    int8 through int32); float32 through float16 and back is a rounding, and stays."""
    import tvm
    from tvm import relax

    from cl_validate.compile.passes.casts import drop_round_trips

    def func(dtype: str, mid: str) -> relax.Function:
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType((2, 3), dtype))
        with bb.function("main", [x]):
            with bb.dataflow():
                w = bb.emit(relax.op.astype(x, mid))
                y = bb.emit(relax.op.astype(w, dtype))
                out = bb.emit_output(relax.op.add(y, y))
            bb.emit_func_output(out)
        return bb.get()["main"]

    def casts(f: relax.Function) -> int:
        return str(f).count("R.astype")

    assert casts(drop_round_trips(func("float16", "float32"))) == 0
    assert casts(drop_round_trips(func("bfloat16", "float32"))) == 0
    assert casts(drop_round_trips(func("int8", "int32"))) == 0
    assert casts(drop_round_trips(func("float32", "float16"))) == 2
    assert casts(drop_round_trips(func("int32", "int8"))) == 2
    assert casts(drop_round_trips(func("float32", "int32"))) == 2
    tvm.ir.assert_structural_equal(drop_round_trips(func("float32", "float16")),
                                   func("float32", "float16"))


class Deformable(nn.Module):
    """Deformable attention's sampling in a half model: offsets from a Linear, a grid_sample
    of the map at them, a weighted sum (RT-DETR's decoder, in small)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, 2, 1)
        self.offsets = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.conv(x)  # (B, 8, 8, 8)
        q = m.flatten(2).transpose(1, 2)[:, :5]  # 5 queries
        grid = torch.tanh(self.offsets(q)).unsqueeze(2)  # (B, 5, 1, 2)
        return F.grid_sample(m, grid, align_corners=False).squeeze(-1) * 2


def test_a_half_precision_grid_sample_builds_and_computes_pytorchs_values(tmp_path):
    """TVM lowers a float16 ``image.grid_sample`` to a float32 result its type calls float16:
    the next binary op failed the build (RT-DETR in float16: "Binary operators must have the
    same datatype"). Sampled in float32, rounded once."""
    net = Deformable()
    _, got, want = _compiled_half(tmp_path, net, (2, 3, 16, 16))
    exact = exact_outputs(net)[0]
    assert got[0].dtype == np.float16
    assert _rmse(got[0], exact) <= 2 * _rmse(want[0], exact), (_rmse(got[0], exact),
                                                                _rmse(want[0], exact))


class Outlook(nn.Module):
    """VOLO's outlook attention in small: values unfolded in 3×3 neighbourhoods, weights by a
    Linear and a softmax, ``(a @ v).permute(...).reshape(...)`` folded back (overlap-add)."""

    def __init__(self, dim: int = 8, heads: int = 2, k: int = 3) -> None:
        super().__init__()
        self.heads, self.k, self.hd = heads, k, dim // heads
        self.embed = nn.Conv2d(3, dim, 4, 4)
        self.v, self.attn = nn.Linear(dim, dim), nn.Linear(dim, heads * k ** 4)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).permute(0, 2, 3, 1)
        b, h, w, c = t.shape
        kk = self.k * self.k
        v = F.unfold(self.v(t).permute(0, 3, 1, 2), self.k, padding=1)
        v = v.reshape(b, self.heads, self.hd, kk, h * w).permute(0, 1, 4, 3, 2)
        a = self.attn(t).reshape(b, h * w, self.heads, kk, kk).permute(0, 2, 1, 3, 4)
        a = (a * self.hd ** -0.5).softmax(dim=-1)
        out = (a @ v).permute(0, 1, 4, 3, 2).reshape(b, c * kk, h * w)
        out = F.fold(out, output_size=(h, w), kernel_size=self.k, padding=1)
        return t + self.proj(out.permute(0, 2, 3, 1))


def test_casts_move_off_the_movements_between_permutes(tmp_path):
    """VOLO's outlooker in float16: the product's rounding and the fold's float32 read sat
    between the model's permutes, which float32 folds into one (5 transforms for 4 on the
    full block). The rounding moves before the views, the widening after them.

    Its last product writes through the fold's transpose (SinkPermutes' write pairs) in
    float16 as in float32: the product's rounding, still between them when SinkPermutes runs
    (NarrowMovements, later, moves it), is written with the product (its epilogue). It kept
    one transform more in float16 until that was seen."""
    net = Outlook()
    half, got, want = _compiled_half(tmp_path, net, (1, 3, 16, 16))
    single, _, _ = _compiled_half(tmp_path, Outlook(), (1, 3, 16, 16), "float32")
    # the input boundary and the fold's permute (the unfold's is gone: SinkPads)
    assert len(single.runtime_transforms) == 2, single.render()
    assert len(half.runtime_transforms) == 2, half.render()
    exact = exact_outputs(net)[0]
    assert _rmse(got[0], exact) <= 2 * _rmse(want[0], exact)


def test_narrow_movements_moves_casts_and_keeps_values():
    """A rounding after views and permutes goes before them; a widening before them goes
    after; the values are the same bit for bit, in float16 and bfloat16; a cast whose operand
    is read elsewhere stays."""
    import ml_dtypes
    import tvm
    from tvm import relax

    from cl_validate.compile.passes.casts import narrow_movements

    def func(src: str, dst: str, shared: bool = False) -> tvm.IRModule:
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType((2, 3, 4), src))
        with bb.function("main", [x]):
            with bb.dataflow():
                if src == "float32":  # a rounding after the movements
                    m = bb.emit(relax.op.permute_dims(bb.emit(relax.op.reshape(x, (6, 4))),
                                                      [1, 0]))
                    y = bb.emit(relax.op.astype(m, dst))
                    outs = [y, m] if shared else [y]
                else:  # a widening before them
                    c = bb.emit(relax.op.astype(x, dst))
                    y = bb.emit(relax.op.permute_dims(bb.emit(relax.op.reshape(c, (6, 4))),
                                                      [1, 0]))
                    outs = [y, c] if shared else [y]
                out = bb.emit_output(relax.Tuple(outs) if shared else y)
            bb.emit_func_output(out)
        return bb.get()

    def order(mod: tvm.IRModule) -> list[str]:
        return [str(b.value.op.name) for b in mod["main"].body.blocks[0].bindings
                if isinstance(b.value, relax.Call)]

    def run(mod: tvm.IRModule, x: np.ndarray) -> np.ndarray:
        exe = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
        vm = relax.VirtualMachine(exe, tvm.cpu())
        return vm["main"](tvm.runtime.tensor(x)).numpy()

    for src, dst in (("float32", "float16"), ("float16", "float32"),
                     ("float32", "bfloat16"), ("bfloat16", "float32")):
        before = func(src, dst)
        after = tvm.IRModule({"main": narrow_movements(before["main"])})
        assert order(after)[0 if src == "float32" else -1] == "relax.astype", after
        x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(
            ml_dtypes.bfloat16 if src == "bfloat16" else src)
        np.testing.assert_array_equal(run(after, x).astype(np.float32),
                                      run(before, x).astype(np.float32))
        shared = func(src, dst, shared=True)
        assert order(tvm.IRModule({"main": narrow_movements(shared["main"])})) == \
            order(shared)


class PoolUnpool(nn.Module):
    """SegNet's pool with indices and unpool at them, in small."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, i = F.max_pool2d(self.conv(x), 2, 2, return_indices=True)
        return F.max_unpool2d(y * 2, i, 2, 2)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_max_pool_indices_of_a_half_model_build_and_match(tmp_path, dtype):
    """The pool's indices are an argmax over the window; TVM's argmax of bfloat16 builds a
    kernel whose types disagree (SegNet in bfloat16 failed the build in FuseTIR). Taken over
    the window in float32 (exact): PyTorch's positions, bit for bit."""
    _, got, want = _compiled_half(tmp_path, PoolUnpool(), (1, 3, 8, 8), dtype)
    np.testing.assert_array_equal(got[0].astype(np.float32), want[0].astype(np.float32))



HALF_CASE = """model = "tiny_models:conv_relu_half"
targets = ["llvm"]

[[inputs]]
name = "x"
shape = [1, 3, 16, 16]
dtype = "float16"

[layout]
"relax.nn.conv2d" = ["NHWC", "OHWI"]

[budget]
layout_transforms = 2

[tolerance]
reference = "float64"
"""


def test_the_verdict_names_the_dtype_eager_ran_in(write_case):
    """A half model's eager run is in float16: its figures say "eager float16's error", not
    float32's (which no run computed), in the check's line and in the output's summary."""
    (result,) = judge_in_process([load_case(write_case(HALF_CASE))], RunOptions(isolate=False))
    numerics = result.check("numerics")
    assert numerics.status is Status.PASSED, numerics.message
    assert "x eager float16's" in numerics.message, numerics.message
    assert "float32" not in numerics.message + numerics.body, (numerics.message, numerics.body)



def test_a_channel_filter_of_a_half_model_is_unfolded_as_in_float32(tmp_path):
    """Upsampling and blur filters run on every channel by folding the channels into the
    batch (StyleGAN's ``upfirdn2d``, kornia's ``filter2d``: the bundled FIR filters' model)
    become depthwise convolutions in float16 as in float32: the input's and the output's
    transforms only. Before, the half model's casts were moved off the movements before the
    layout was carried through them, the layout stages then left the fold's transposes and
    the unfold was declined: 6 transforms for float32's 2."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "model_cases"))
    try:
        from zoo.filters import fir_resampler  # the bundled cases' models
    finally:
        sys.path.pop(0)
    torch.manual_seed(0)
    kernels, got, want = _compiled_half(tmp_path, fir_resampler(8), (1, 3, 16, 16))
    assert len(kernels.runtime_transforms) == 2, kernels.render()
    np.testing.assert_allclose(got[0].astype(np.float32), want[0].astype(np.float32),
                               rtol=2e-2, atol=2e-2)


class _Sorts(nn.Module):
    """Top-k, sort, median and k-th value of values of both signs (a detector's scores, an
    MoE router's logits)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (x.topk(3, -1).values, x.sort(-1).values, x.median(-1).values,
                x.kthvalue(2, -1).values, x.argsort(-1))


def test_a_bfloat16_sort_orders_values_as_pytorch_does(tmp_path):
    """TVM 0.27's sorts compare bfloat16's 16-bit patterns as integers: every negative value
    sorted above the positives, a wrong program (top-k of a bfloat16 model's scores). They
    sort the values widened to float32 (exact) and give PyTorch's values bit for bit."""
    torch.manual_seed(0)
    _, got, want = _compiled_half(tmp_path, _Sorts(), (4, 16), "bfloat16")
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


class _HalfMath(nn.Module):
    """RMSNorm (``x.pow(2).mean``), ``torch.square``, a fractional power and ``fmod`` by a
    Python number, ``exp2``, ``isinf``, ``argmin``; float16's inverse trigonometry."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rms = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        big = 3e4 if x.dtype == torch.float16 else 1e38  # some values overflow to inf
        out = [rms, torch.square(x), x.abs().pow(0.7), torch.fmod(x, 0.7), torch.exp2(x),
               torch.isinf(x.exp() * big), x.argmin(-1)]
        if x.dtype == torch.float16:
            y = x.clamp(-0.9, 0.9)
            out += [torch.atan2(x, x.flip(-1)), torch.asin(y), torch.acos(y), torch.atan(x),
                    torch.sinh(x), torch.cosh(x), torch.asinh(x), torch.acosh(x.abs() + 1)]
        return tuple(out)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_ops_tvm_cannot_build_in_half_precision_compute_as_pytorch(tmp_path, dtype):
    """``power``, ``fmod``, ``isinf``, ``argmin`` failed a bfloat16 model's build ("power only
    applies to float": every RMSNorm), LLVM has no float16 ``atan2`` or ``asinh`` ("unknown
    intrinsic"). Computed in float32 from the model's values, a Python number rounded to the
    model's dtype first, each result rounded once: PyTorch's values (to one rounding)."""
    torch.manual_seed(0)
    _, got, want = _compiled_half(tmp_path, _HalfMath(), (4, 16), dtype)
    ulp = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}[dtype]
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = g.astype("float32"), w.astype("float32")
        np.testing.assert_allclose(g, w, rtol=ulp, atol=ulp, err_msg=f"output {i}")
