"""Attention is exact for every shape it accepts: property tests against PyTorch's SDPA.

Hypothesis draws batch, query heads, K/V heads (the same, one shared by every query head —
multi-query, broadcast by SDPA itself or repeated by ``enable_gqa`` — or grouped), a K/V
batch of one, sequence lengths, head dimensions, an additive or boolean mask of
every broadcast shape, the causal flag and the scale. Each draw is a real case: torch.export,
the import, the `nhwc` pipeline for llvm (one attention kernel, written-out forms raised) built
and run, and the same
pipeline for cuda up to its legalized IR (the GPU's tiled kernel with its threads as serial
loops, or its two products and softmax) built and run on the CPU, both against
``F.scaled_dot_product_attention`` on the same inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import tvm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

pytestmark = pytest.mark.compile


class _Attention(nn.Module):
    """SDPA, or attention written out as the libraries do (``q @ kᵀ · scale``, mask, softmax,
    ``@ v``; K/V of one head broadcast by the matmuls, grouped heads repeated by
    ``repeat_interleave``), which the pipeline raises; "folded":
    written out on ``(B·H, L, E)``, batch and heads folded into one axis (SAM's form)."""

    def __init__(self, form: str, mask: str, causal: bool, scale: float | None,
                 gqa: bool) -> None:
        super().__init__()
        self.form, self.mask, self.causal, self.scale, self.gqa = form, mask, causal, scale, gqa

    def forward(self, q, k, v, *m):  # type: ignore[no-untyped-def]
        mask = None if not m else (m[0] > 0 if self.mask == "bool" else m[0])
        if self.form == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                  is_causal=self.causal, scale=self.scale,
                                                  enable_gqa=self.gqa)
        b, h, lq = q.shape[:3]
        if k.shape[1] not in (1, h):  # grouped heads, repeated as Llama's repeat_kv does
            k, v = (t.repeat_interleave(h // t.shape[1], dim=1) for t in (k, v))
        if self.form == "folded":
            q, k, v = (t.reshape(b * h, *t.shape[2:]) for t in (q, k, v))
        s = (q @ k.transpose(-2, -1)) * (self.scale or q.shape[-1] ** -0.5)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
        if self.causal:
            above = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
            s = s.masked_fill(above, float("-inf"))
        out = s.softmax(-1) @ v
        return out.view(b, h, lq, -1) if self.form == "folded" else out


@st.composite
def _attention(draw, folded: bool = False):  # type: ignore[no-untyped-def]
    b = draw(st.sampled_from([1, 2]))
    hq = draw(st.sampled_from([1, 2, 4]))
    hkv = hq if folded else draw(st.sampled_from(sorted({hq, 1, max(1, hq // 2)})))
    lq, lk = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    d = draw(st.sampled_from([2, 4, 8]))
    dv = draw(st.sampled_from([d, 3]))
    mask = draw(st.sampled_from(["none", "float", "bool"]))
    mask_shape = draw(st.sampled_from([(lq, lk), (1, 1, lq, lk), (b, 1, 1, lk), (b, hq, lq, lk),
                                       (1, hq, 1, lk)]))
    causal = mask == "none" and draw(st.booleans())
    scale = draw(st.sampled_from([None, 0.3]))
    # written out, K/V heads broadcast when one (the matmuls' rule), repeated when grouped;
    # folded, every head its own
    form = "folded" if folded else draw(st.sampled_from(["sdpa", "eager"]))
    if form == "folded" and mask_shape != (lq, lk):
        mask = "none"  # a folded mask is (B·H, L, S) or broadcast from (L, S)
    # SDPA broadcasts one K/V head (or batch) by itself; enable_gqa repeats grouped heads
    gqa = hkv != hq and (hkv != 1 or draw(st.booleans()))
    kv_batch = draw(st.sampled_from([b, 1])) if not gqa and form != "folded" else b
    return (form, b, kv_batch, hq, hkv, gqa, lq, lk, d, dv, mask,
            mask_shape if mask != "none" else None, causal, scale)


def _case(tmp_path, shapes: list[tuple[int, ...]]):  # type: ignore[no-untyped-def]
    from cl_validate.spec import load_case

    text = 'model = "x:y"\n' + "".join(
        f'[[inputs]]\nname = "{n}"\nshape = {list(s)}\n'
        for n, s in zip(["q", "k", "v", "m"], shapes, strict=False)) + \
        '[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n'
    path = tmp_path / "attention.toml"
    path.write_text(text)
    return load_case(path)


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_attention())
def test_attention_is_exact_for_every_shape_it_accepts(tmp_path, drawn):
    _check(tmp_path, drawn)


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_attention(folded=True))
def test_attention_on_folded_batch_and_heads_is_exact(tmp_path, drawn):
    """Written out on (B·H, L, E) and viewed back: read as B batches of H heads."""
    _check(tmp_path, drawn)


def _check(tmp_path, drawn):  # type: ignore[no-untyped-def]
    from cl_validate.compile.attention_tiles import cpu_form
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.compile.stage_program import build_stage
    from cl_validate.session.execute import run_torch, run_tvm
    from cl_validate.session.inputs import torch_inputs

    form, b, kv_batch, hq, hkv, gqa, lq, lk, d, dv, mask, mask_shape, causal, scale = drawn
    shapes = [(b, hq, lq, d), (kv_batch, hkv, lk, d), (kv_batch, hkv, lk, dv),
              *([mask_shape] if mask_shape else [])]
    case = _case(tmp_path, shapes)
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    if mask != "none":  # the first key of every row takes part (no row masked entirely:
        arrays[3][..., 0] = 1.0  # PyTorch's written-out softmax makes it NaN, SDPA zeros)
    model = _Attention(form, mask, causal, scale, gqa).eval()
    tensors = torch_inputs(case, arrays)
    want = run_torch(model, tensors)[0]
    front = export_and_import(model, case, tensors)

    cpu = compile_case(front, case, "llvm")
    got = run_tvm(cpu.executable, case, arrays, tvm.cpu())[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(drawn))

    gpu = compile_case(front, case, "cuda", build=False)
    legal = gpu.stage("legalize").mod
    parts = {gv.name_hint for gv, f in legal.functions_items()
             if isinstance(f, tvm.tirx.PrimFunc) and gv.name_hint.startswith("attention")}
    # every form raised (written out: masks added or filled with -inf, causal by triu, heads
    # folded into the batch): the GPU's tiled kernel, or where its tiles do not fit the head
    # dimension, its two products and softmax
    assert parts in ({"attention_tiled"},
                     {"attention_scores", "attention_softmax", "attention_output"}), \
        (drawn, sorted(parts))
    for gv, f in list(legal.functions_items()):  # the tiled kernel, its threads serial
        serial = cpu_form(f) if isinstance(f, tvm.tirx.PrimFunc) else None
        if serial is not None:
            legal.update_func(gv, serial.with_attrs(dict(f.attrs)))
    got_gpu = run_tvm(build_stage(legal), case, arrays, tvm.cpu())[0]
    np.testing.assert_allclose(got_gpu, want, rtol=1e-5, atol=1e-5, err_msg=str(drawn))


class _WindowedHeads(nn.Module):
    """Hiera's form: q, k, v taken from one tensor permuted to ``(3, ..batch axes.., L, E)``
    (five or more axes), the query optionally max-pooled along a stride split off L; SDPA,
    or attention written out (NesT's ``(q * scale) @ kᵀ``, softmax, ``@ v``), which the
    pipeline raises with the heads where the query's data has them."""

    def __init__(self, axes: list[int], pool: int, causal: bool, mask: bool,
                 form: str = "sdpa") -> None:
        super().__init__()
        self.axes, self.pool, self.causal, self.mask, self.form = axes, pool, causal, mask, form

    def forward(self, x, *m):  # type: ignore[no-untyped-def]
        q, k, v = x.permute(*self.axes).unbind(0)
        if self.pool > 1:
            q = q.view(*q.shape[:-2], self.pool, -1, q.shape[-1]).max(dim=-3).values
        if self.form == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m[0] if m else None,
                                                  is_causal=self.causal)
        s = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
        if m:
            s = s + m[0]
        if self.causal:
            above = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
            s = s.masked_fill(above, float("-inf"))
        return s.softmax(dim=-1) @ v


@st.composite
def _windowed(draw):  # type: ignore[no-untyped-def]
    batch = draw(st.lists(st.sampled_from([1, 2, 3]), min_size=3, max_size=4))  # b, w, h, ..
    n = draw(st.sampled_from([2, 4, 6]))
    d = draw(st.sampled_from([2, 4]))
    named = [*range(len(batch)), "n", "three"]  # x's axes, in a drawn storage order: E
    stored = draw(st.permutations(named))  # innermost (what the models do), or anywhere
    stored.insert(draw(st.sampled_from([len(stored), len(stored), 0, 2])), "d")
    sizes = {**dict(enumerate(batch)), "n": n, "three": 3, "d": d}
    order = draw(st.permutations(list(range(len(batch)))))  # q's batch axes
    axes = [stored.index(a) for a in ["three", *order, "n", "d"]]
    pool = draw(st.sampled_from([1, 2]))
    mask = draw(st.booleans())
    causal = not mask and draw(st.booleans())
    form = draw(st.sampled_from(["sdpa", "written"]))
    return [sizes[a] for a in stored], axes, pool, causal, mask, n // pool, n, form


@settings(max_examples=16, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_windowed())
def test_attention_on_five_or_more_axes_is_exact_however_they_are_stored(tmp_path, drawn):
    """SDPA, or attention written out, over several batch axes (windows and heads):
    whichever axes the import or the raise groups into Relax's batch and heads (by where the
    query's data lies), PyTorch's result."""
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.execute import run_torch, run_tvm
    from cl_validate.session.inputs import torch_inputs

    shape, axes, pool, causal, mask, lq, lk, form = drawn
    shapes = [tuple(shape), *([(lq, lk)] if mask else [])]
    case = _case(tmp_path, shapes)
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    model = _WindowedHeads(axes, pool, causal, mask, form).eval()
    tensors = torch_inputs(case, arrays)
    want = run_torch(model, tensors)[0]
    compiled = compile_case(export_and_import(model, case, tensors), case, "llvm")
    got = run_tvm(compiled.executable, case, arrays, tvm.cpu())[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(drawn))
