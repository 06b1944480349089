"""Attention as people spell it: every spelling of the same block raised into the one
attention op, at its boundary floor, with PyTorch's numbers — and a spelling that cannot be
raised exactly left as matmuls, saying why.

Each spelling is a real case (torch.export, import, the ``nhwc`` pipeline for llvm, built and
run): ``einsum`` with the heads ahead of or behind the tokens, ``baddbmm``/``bmm`` on batch
and heads folded into one axis, a max-subtracted softmax written out, causal masks as
``masked_fill`` with ``-inf`` (``~tril``, ``triu``) or ``where`` with a ``-inf`` made by
``full`` (GPT-2's), and K/V heads repeated by
``repeat_interleave`` (grouped-query attention as Llama's ``repeat_kv`` writes it).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from torch import nn

pytestmark = pytest.mark.compile

B, N, C, H = 1, 6, 16, 4
D = C // H


class _Block(nn.Module):
    """A token attention block: one qkv Linear (K/V of `kv_heads` heads), the scores spelled
    by `spelling`, an output projection."""

    def __init__(self, spelling: str) -> None:
        super().__init__()
        self.spelling = spelling
        self.kvh = H // 2 if spelling == "repeat_interleave" else H
        self.qkv = nn.Linear(C, C + 2 * self.kvh * D)
        self.proj = nn.Linear(C, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).split([C, self.kvh * D, self.kvh * D], -1)
        if self.spelling == "einsum_bshd":  # heads behind the tokens, as the Linear has them
            q, k, v = (t.view(B, N, -1, D) for t in (q, k, v))
            a = torch.einsum("bqhd,bkhd->bhqk", q, k) * D ** -0.5
            o = torch.einsum("bhqk,bkhd->bqhd", a.softmax(-1), v)
            return self.proj(o.reshape(B, N, C))
        q, k, v = (t.view(B, N, -1, D).transpose(1, 2) for t in (q, k, v))
        return self.proj(self._heads(q, k, v).transpose(1, 2).reshape(B, N, C))

    def _heads(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s, spelling = D ** -0.5, self.spelling
        if spelling == "einsum":
            a = torch.einsum("bhid,bhjd->bhij", q, k) * s
            return torch.einsum("bhij,bhjd->bhid", a.softmax(-1), v)
        if spelling.startswith("baddbmm"):  # batch and heads folded (older diffusers)
            q, k, v = (t.reshape(B * H, N, D) for t in (q, k, v))
            a = torch.baddbmm(torch.zeros(B * H, N, N), q, k.transpose(1, 2), beta=0, alpha=s)
            if spelling == "baddbmm_causal":  # a mask the folded scores broadcast
                a = a.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))
            return torch.bmm(a.softmax(-1), v).view(B, H, N, D)
        if spelling == "repeat_interleave":
            k, v = (t.repeat_interleave(H // self.kvh, dim=1) for t in (k, v))
        a = (q @ k.transpose(-2, -1)) * s
        if spelling == "stable_softmax":
            a = a - a.amax(-1, keepdim=True)
            e = a.exp()
            return (e / e.sum(-1, keepdim=True)) @ v
        if spelling == "not_tril":
            a = a.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))
        if spelling == "triu":
            a = a.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
        if spelling == "bare_softmax":
            e = a.exp()
            return (e / e.sum(-1, keepdim=True)) @ v
        if spelling == "where_full":  # GPT-2's: the fill a tensor made by `full`
            causal = torch.ones(N, N, dtype=torch.bool).tril()
            a = torch.where(causal, a, torch.full([], float("-inf"), dtype=a.dtype))
        if spelling == "finite_fill":
            a = a.masked_fill(torch.ones(N, N).tril() == 0, -1e9)
        return a.softmax(-1) @ v


def _compiled(spelling: str, tmp_path):  # type: ignore[no-untyped-def]
    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.execute import run_torch, run_tvm
    from cl_validate.session.inputs import make_inputs, torch_inputs
    from cl_validate.spec import load_case

    path = tmp_path / f"{spelling}.toml"
    path.write_text(f'model = "x:y"\n[[inputs]]\nname = "x"\nshape = [{B}, {N}, {C}]\n')
    case = load_case(path)
    torch.manual_seed(0)
    model = _Block(spelling).eval()
    arrays = make_inputs(case)
    tensors = torch_inputs(case, arrays)
    compiled = compile_case(export_and_import(model, case, tensors), case, "llvm")
    got = run_tvm(compiled.executable, case, arrays, tvm.cpu())[0]
    np.testing.assert_allclose(got, run_torch(model, tensors)[0], rtol=1e-5, atol=1e-6)
    return compiled, read_kernel_list(compiled)


@pytest.mark.parametrize("spelling", ["plain", "einsum", "einsum_bshd", "baddbmm",
                                      "baddbmm_causal",
                                      "stable_softmax", "not_tril", "triu", "where_full",
                                      "repeat_interleave"])
def test_every_spelling_of_attention_is_raised_at_the_floor(spelling, tmp_path):
    compiled, kernels = _compiled(spelling, tmp_path)
    names = [k.name for k in kernels]
    assert sum("attention" in n for n in names) == 1, names
    assert not any("softmax" in n or n.startswith(("max", "sum")) for n in names), names
    assert len(kernels.runtime_transforms) == 0, kernels.render()
    assert compiled.attention_left == []


def test_a_mask_filled_with_a_finite_value_stays_as_matmuls_and_says_why(tmp_path):
    """``masked_fill(mask == 0, -1e9)``: not an additive mask (a row masked whole is the
    fill's uniform average, where ``-1e9`` added keeps the scores' order), so it is not
    raised; the note names the fill."""
    compiled, kernels = _compiled("finite_fill", tmp_path)
    assert not any("attention" in k.name for k in kernels)
    (line,) = compiled.attention_left
    assert "left as matmuls: the scores are masked with -1e+09, not -inf" in line, line


def test_a_softmax_written_out_is_one_softmax_and_without_its_maximum_is_left_alone():
    """``exp(x - max(x)) / sum(exp(x - max(x)))`` is the op's own steps: one softmax. Without
    the maximum it overflows where the op would not: not the same program, left as written."""
    from tvm import relax
    from tvm.script import relax as R

    from cl_validate.compile.passes.spelled_softmax import spelled_softmax
    from cl_validate.ir import bindings, op_name

    @R.function
    def stable(x: R.Tensor((2, 3, 5), "float32")) -> R.Tensor((2, 3, 5), "float32"):
        with R.dataflow():
            m = R.max(x, axis=[1], keepdims=True)
            e = R.exp(R.subtract(x, m))
            y = R.divide(e, R.sum(e, axis=[1], keepdims=True))
            R.output(y)
        return y

    @R.function
    def bare(x: R.Tensor((2, 3, 5), "float32")) -> R.Tensor((2, 3, 5), "float32"):
        with R.dataflow():
            e = R.exp(x)
            y = R.divide(e, R.sum(e, axis=[-1], keepdims=True))
            R.output(y)
        return y

    @R.function
    def other_axes(x: R.Tensor((2, 3, 5), "float32")) -> R.Tensor((2, 3, 5), "float32"):
        with R.dataflow():
            m = R.max(x, axis=[2], keepdims=True)
            e = R.exp(R.subtract(x, m))
            y = R.divide(e, R.sum(e, axis=[1], keepdims=True))
            R.output(y)
        return y

    rewritten = spelled_softmax(stable)
    ops = [op_name(b.value) for b in bindings(rewritten)]
    assert ops == ["relax.nn.softmax"], ops
    assert int(next(iter(bindings(rewritten))).value.attrs.axis) == 1
    x = np.random.default_rng(0).standard_normal((2, 3, 5)).astype("float32") * 30
    llvm = tvm.target.Target({"kind": "llvm"})
    mods = [tvm.IRModule({"main": f.with_attr("global_symbol", "main")})
            for f in (stable, rewritten)]
    run = [relax.VirtualMachine(tvm.compile(m, target=llvm), tvm.cpu())["main"](
        tvm.runtime.tensor(x)).numpy() for m in mods]
    np.testing.assert_allclose(run[1], run[0], rtol=1e-6, atol=1e-7)
    for f in (bare, other_axes):
        assert spelled_softmax(f).same_as(f)


def test_a_softmax_without_its_maximum_between_products_says_why(tmp_path):
    """``exp(s) / exp(s).sum(-1)`` between the products is attention-like but not the op's
    computation (it overflows where the op would not): left as matmuls, and the note says
    so (before, nothing was said: no softmax op, no note)."""
    compiled, kernels = _compiled("bare_softmax", tmp_path)
    assert not any("attention" in k.name for k in kernels)
    (line,) = compiled.attention_left
    assert "left as matmuls: a softmax written without subtracting its maximum" in line, line
