"""One movement result read by several reshape/permute chains (CSWin's values: a window map
read by a depthwise conv, the same map viewed as attention heads) is made once, in the layout
that leaves every reader a reshape: no transpose into NCHW and back for the conv, none into
heads for the attention. And q, k and v selected from one projection (``qkv[0]``) whose
chains are the same partition are partitioned once, before the split."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import tvm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from tvm import relax
from tvm.relax import op as R

from cl_validate.compile.passes.shared_chains import share_chain_layouts
from cl_validate.ir import count_permutes, known_shape
from tests.passes.conftest import compile_nhwc_case

pytestmark = pytest.mark.compile


class WindowValues(nn.Module):
    """Tokens from a conv map; q, k, v from one Linear; windows of `hs` x `ws` tokens; the
    values read twice: as a map by a depthwise conv (a positional term) and as heads."""

    def __init__(self, hs: int, ws: int, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.hs, self.ws, self.heads = hs, ws, heads
        self.stem = nn.Conv2d(3, dim, 1)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.pos = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.proj = nn.Conv2d(dim, dim, 1)

    def _map(self, z: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """(B, N, C) tokens -> (B*windows, C, hs, ws) maps, as CSWin partitions its values."""
        b, _, c = z.shape
        z = z.transpose(1, 2).reshape(b, c, h // self.hs, self.hs, w // self.ws, self.ws)
        return z.permute(0, 2, 4, 1, 3, 5).reshape(-1, c, self.hs, self.ws)

    def _heads(self, m: torch.Tensor) -> torch.Tensor:
        c = m.shape[1]
        return m.reshape(-1, self.heads, c // self.heads, self.hs * self.ws).permute(0, 1, 3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        b, c, h, w = x.shape
        qkv = self.qkv(x.flatten(2).transpose(1, 2)).reshape(b, h * w, 3, c).permute(
            2, 0, 1, 3)
        q, k, v = qkv[0], qkv[1], qkv[2]  # selects (take), as CSWin indexes them
        vmap = self._map(v, h, w)
        q, k, pos, v = (self._heads(self._map(q, h, w)), self._heads(self._map(k, h, w)),
                        self._heads(self.pos(vmap)), self._heads(vmap))
        attn = torch.softmax(q @ k.transpose(-2, -1) * 0.5, dim=-1)
        out = (attn @ v + pos).transpose(1, 2).reshape(-1, self.hs, self.ws, c)
        out = out.view(b, h // self.hs, w // self.ws, self.hs, self.ws, c)
        out = out.permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        return self.proj(out.permute(0, 3, 1, 2))


def test_values_read_as_a_map_and_as_heads_cost_no_transform(tmp_path) -> None:
    kernels = compile_nhwc_case(tmp_path, lambda: WindowValues(4, 4), (1, 3, 4, 4),
                                rtol=1e-5, atol=1e-6)
    assert kernels.runtime_transforms == [], kernels.render()


def test_row_stripes_are_views_of_the_tokens(tmp_path) -> None:
    """Windows of whole rows (CSWin's vertical stripes): every partition is a view."""
    kernels = compile_nhwc_case(tmp_path, lambda: WindowValues(2, 4), (1, 3, 4, 4),
                                rtol=1e-5, atol=1e-6)
    assert kernels.runtime_transforms == [], kernels.render()


@pytest.mark.parametrize(("hs", "ws"), [(4, 2), (2, 2)], ids=["column_stripes", "windows"])
def test_q_k_and_v_selected_from_one_projection_are_partitioned_once(tmp_path, hs, ws) -> None:
    """Windows that are not views of the tokens: one partition, made before the split
    (here the projection writes it: the qkv product reads and writes through transposes)."""
    kernels = compile_nhwc_case(tmp_path, lambda: WindowValues(hs, ws), (1, 3, 4, 4),
                                rtol=1e-5, atol=1e-6)
    assert kernels.runtime_transforms == [], kernels.render()


# --- property: random chains sharing a source --------------------------------------------
def _factorizations(n: int) -> list[tuple[int, int]]:
    return [(a, n // a) for a in range(2, n) if n % a == 0]


@st.composite
def _movement(draw: st.DrawFn, shape: tuple[int, ...]) -> list[tuple[str, tuple[int, ...]]]:
    """1-3 random steps: a permute, an axis split in two, two neighbours merged, or a
    per-tensor quantize-dequantize (a quantized network's, which commutes with them)."""
    steps: list[tuple[str, tuple[int, ...]]] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["permute", "split", "merge", "qdq"]))
        if kind == "qdq":
            steps.append(("qdq", shape))
            continue
        if kind == "permute" and len(shape) > 1:
            perm = tuple(draw(st.permutations(range(len(shape)))))
            steps.append(("permute", perm))
            shape = tuple(shape[p] for p in perm)
            continue
        splittable = [i for i, d in enumerate(shape) if _factorizations(d)]
        if kind == "split" and splittable and len(shape) < 6:
            i = draw(st.sampled_from(splittable))
            a, b = draw(st.sampled_from(_factorizations(shape[i])))
            shape = (*shape[:i], a, b, *shape[i + 1:])
        elif len(shape) > 2:
            i = draw(st.integers(0, len(shape) - 2))
            shape = (*shape[:i], shape[i] * shape[i + 1], *shape[i + 2:])
        else:
            continue
        steps.append(("reshape", shape))
    return steps


def _apply(bb: relax.BlockBuilder, x: relax.Expr, steps: list[tuple[str, tuple[int, ...]]]
           ) -> relax.Expr:
    """`steps` applied to `x`, one binding each (as the importer writes them)."""
    for kind, arg in steps:
        if kind == "qdq":
            scale, zero = relax.const(0.05, "float32"), relax.const(128, "uint8")
            x = bb.emit(R.dequantize(bb.emit(R.quantize(x, scale, zero, out_dtype="uint8")),
                                     scale, zero, out_dtype="float32"))
        else:
            x = bb.emit(R.permute_dims(x, list(arg)) if kind == "permute"
                        else R.reshape(x, list(arg)))
    return x


@st.composite
def _shared_sources(draw: st.DrawFn) -> relax.Function:
    """A source read by 2-3 movement chains (some views of one another), or split into parts
    (takes or one-wide slices) each moved the same way, or differently."""
    shape = tuple(draw(st.lists(st.sampled_from([2, 3, 4, 6]), min_size=2, max_size=4)))
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            src = bb.emit(R.exp(x))
            ends = []
            if draw(st.booleans()):  # one source, several chains
                mid = _apply(bb, src, draw(_movement(shape)))
                first = draw(_movement(known_shape(mid)))
                ends.append(_apply(bb, mid, first))
                views_only = draw(st.integers(0, 3)) > 0
                for _ in range(draw(st.integers(1, 2))):
                    if views_only or draw(st.booleans()):  # the first chain's end, viewed
                        b = _apply(bb, mid, first)
                        views = [(k, a) for k, a in draw(_movement(known_shape(b)))
                                 if k == "reshape"]  # any reshape is a view
                        ends.append(_apply(bb, b, views or [("reshape", known_shape(b))]))
                    else:
                        ends.append(_apply(bb, mid, draw(_movement(known_shape(mid)))))
            else:  # parts along one axis
                axis = draw(st.integers(0, len(shape) - 1))
                part_shape = tuple(d for i, d in enumerate(shape) if i != axis)
                same = draw(_movement(part_shape)) if len(part_shape) > 1 else []
                all_same = draw(st.integers(0, 3)) > 0
                for i in range(shape[axis]):
                    if draw(st.booleans()):
                        part = bb.emit(R.take(src, relax.const(i, "int64"), axis=axis))
                    else:
                        part = bb.emit(R.reshape(bb.emit(R.strided_slice(
                            src, [axis], [i], [i + 1])), list(part_shape)))
                    steps = same if all_same or draw(st.booleans()) else draw(
                        _movement(part_shape))
                    ends.append(_apply(bb, part, steps))
            out = bb.emit_output(relax.Tuple([R.negative(e) for e in ends]))
        bb.emit_func_output(out)
    return bb.get()["main"]


@pytest.mark.fuzz
@settings(max_examples=300 if os.environ.get("CL_VALIDATE_FUZZ") == "long" else 24,
          derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(func=_shared_sources())
def test_sharing_is_exact_and_never_adds_a_transform(func: relax.Function,
                                                     run_llvm_pair) -> None:
    """Random shared sources and splits (QDQ pairs among the steps); 24 examples by default,
    300 with ``CL_VALIDATE_FUZZ=long``."""
    before = tvm.IRModule({"main": func})
    after = tvm.IRModule({"main": share_chain_layouts(func)})
    assert relax.analysis.well_formed(after) is not False
    assert count_permutes(after) <= count_permutes(before)
    x = np.random.default_rng(0).uniform(-1, 1, size=known_shape(func.params[0])).astype(
        "float32")
    for want, got in zip(*run_llvm_pair(before, after, x), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_quantize_dequantize_pair_on_a_readers_way_is_kept_and_seen_through(run_llvm) -> None:
    """A quantized network quantizes the conv's input inside the chain (CSWin's values, PT2E:
    map -> quantize -> dequantize -> ConvertLayout's transpose -> conv): the pair, per
    tensor, commutes with the movement, so the chains still share it, and the reader keeps
    its pair."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 16, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            src = bb.emit(R.exp(x))
            mid = _apply(bb, src, [("permute", (0, 2, 1)), ("reshape", (1, 8, 4, 4))])
            conv_in = _apply(bb, mid, [("qdq", (1, 8, 4, 4)), ("permute", (0, 2, 3, 1))])
            heads = _apply(bb, mid, [("reshape", (1, 2, 4, 16)), ("permute", (0, 3, 1, 2))])
            out = bb.emit_output(relax.Tuple([R.negative(conv_in), R.negative(heads)]))
        bb.emit_func_output(out)
    before = tvm.IRModule({"main": bb.get()["main"]})
    after = tvm.IRModule({"main": share_chain_layouts(before["main"])})
    assert count_permutes(before) == 3 and count_permutes(after) == 0, after
    assert "quantize" in after.script()
    data = np.random.default_rng(0).uniform(-1, 1, size=(1, 16, 8)).astype("float32")
    for want, got in zip(run_llvm(before, data), run_llvm(after, data), strict=True):
        np.testing.assert_array_equal(got, want)
