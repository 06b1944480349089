"""Learned queries cross-attending to a feature map (DETR's and Mask2Former's decoders).

Two faults shown by one such decoder: the query projection depends on weights alone, so a
stage before folding wrote it as a kernel of its own and folding then could not find that
kernel (``There is no definition of I.GlobalVar("matmul")``: the model did not build); and
``nn.MultiheadAttention`` on sequence-first memory imports its key/value projection as a
batched matmul whose weight is broadcast to every token, which folding turned into a
constant that many times the weight's size, read whole on every run.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from torch import nn
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from cl_validate.compile.fold import fold_params
from cl_validate.compile.passes import ElideBroadcasts
from cl_validate.ir import bindings, op_name


class MaskedDecoder(nn.Module):
    """Queries (a parameter) attend to a conv map (sequence first) under a 3-D boolean mask
    per batch·head predicted from the map; a row masked everywhere attends to all."""

    def __init__(self, dim: int = 16, heads: int = 2, queries: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.backbone = nn.Sequential(nn.Conv2d(3, dim, 4, 4), nn.ReLU())
        self.mask_embed = nn.Conv2d(dim, heads, 1)
        self.queries = nn.Parameter(torch.randn(queries, 1, dim))
        self.attn = nn.MultiheadAttention(dim, heads)
        self.out = nn.Linear(dim, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.backbone(x)
        mem = f.flatten(2).permute(2, 0, 1)
        m = self.mask_embed(f).flatten(2).sigmoid()
        mask = (m.unsqueeze(2).expand(-1, -1, self.queries.shape[0], -1) < 0.5).flatten(0, 1)
        mask = mask & ~mask.all(-1, keepdim=True)
        q = self.queries.expand(-1, f.shape[0], -1)
        out, _ = self.attn(q, mem, mem, attn_mask=mask, need_weights=False)
        return self.out(out).transpose(0, 1)


@pytest.mark.compile
def test_a_masked_decoder_builds_computes_and_reads_each_weight_once(tmp_path):
    from tests.test_attention import _compile  # numerics against PyTorch inside

    kernels = _compile(MaskedDecoder(), 16, tmp_path)
    tokens, weight_bytes = 16, 16 * 32 * 4  # the memory's tokens; the k/v weight, float32
    kv = [k for k in kernels.kernels if k.name.startswith("fused_matmul")
          and k.bytes_read is not None and k.bytes_read > tokens * 16 * 4]
    assert kv, kernels.render()
    # tokens in plus the weight and bias, not the weight once per token
    assert all(k.bytes_read < 2 * (tokens * 16 * 4 + weight_bytes) for k in kv), kernels.render()


def test_folding_keeps_the_kernels_an_earlier_stage_wrote_on_weights():
    """A kernel called on weights alone is computed by folding, with the module's other
    functions (it was dropped with them: the lifted computation called a missing kernel)."""

    @I.ir_module
    class Mod:
        @T.prim_func(private=True, s_tir=True)
        def double(a: T.Buffer((T.int64(4),), "float32"), b: T.Buffer((T.int64(4),), "float32")):
            for i in range(T.int64(4)):
                with T.sblock("b"):
                    vi = T.axis.spatial(T.int64(4), i)
                    b[vi] = a[vi] * T.float32(2)

        @R.function
        def main(x: R.Tensor((4,), "float32"), w: R.Tensor((4,), "float32")):
            R.func_attr({"num_input": 1})
            cls = Mod
            with R.dataflow():
                d = R.call_tir(cls.double, (w,), out_ty=R.Tensor((4,), "float32"))
                gv = R.add(x, d)
                R.output(gv)
            return gv

    w = np.arange(4, dtype="float32")
    folded = fold_params(Mod, {"w": tvm.runtime.tensor(w)})
    assert len(folded["main"].params) == 1
    exe = tvm.compile(folded, target=tvm.target.Target({"kind": "llvm"}))
    x = np.ones(4, dtype="float32")
    got = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_array_equal(got, x + 2 * w)


def _matmul_reads(func: relax.Function) -> list[tuple[tuple[int, ...], ...]]:
    return [tuple(tuple(int(d) for d in a.ty.shape) for a in b.value.args)
            for b in bindings(func) if op_name(b.value) == "relax.matmul"]


def test_a_matmul_reads_a_weight_broadcast_over_its_batch_unbroadcast():
    @I.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((6, 1, 8), "float32"), w: R.Tensor((8, 3), "float32"),
                 v: R.Tensor((1, 8, 3), "float32"), u: R.Tensor((8, 1), "float32")):
            with R.dataflow():
                xb = R.broadcast_to(x, R.shape([6, 1, 8]))
                wb = R.broadcast_to(w, R.shape([6, 8, 3]))
                a = R.matmul(xb, wb)  # both go: (6, 1, 8) @ (8, 3) is (6, 1, 3)
                vb = R.broadcast_to(v, R.shape([6, 8, 3]))
                b = R.matmul(R.zeros(R.shape([1, 1, 8]), "float32"), vb)  # stays: the batch
                ub = R.broadcast_to(u, R.shape([8, 3]))  # stays: the matrix itself widens
                c = R.matmul(x, ub)
                gv = (a, b, c)
                R.output(gv)
            return gv

    after = ElideBroadcasts()(Mod)["main"]
    assert _matmul_reads(after) == [((6, 1, 8), (8, 3)), ((1, 1, 8), (6, 8, 3)),
                                    ((6, 1, 8), (8, 3))]
    ops = [op_name(b.value) for b in bindings(after)]
    assert ops.count("relax.broadcast_to") == 2


def test_a_matmul_reads_a_weight_broadcast_and_reshaped_over_its_batch_unbroadcast():
    """``torch.matmul`` of a 4-D input by a weight, as export decomposes it: the weight
    expanded to the batch and the batch merged into one axis (CaiT's talking heads). Read as
    the matrix it is; a broadcast of several matrices, or a reshape that regroups the matrix
    axes, stays."""

    @I.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((6, 5, 4), "float32"), w: R.Tensor((4, 4), "float32"),
                 m: R.Tensor((2, 1, 4, 4), "float32")):
            with R.dataflow():
                wb = R.reshape(R.broadcast_to(w, R.shape([2, 3, 4, 4])), R.shape([6, 4, 4]))
                a = R.matmul(x, wb)  # goes: every batch is w
                mb = R.reshape(R.broadcast_to(m, R.shape([2, 3, 4, 4])), R.shape([6, 4, 4]))
                b = R.matmul(x, mb)  # stays: two matrices
                rb = R.reshape(R.broadcast_to(w, R.shape([3, 4, 4])), R.shape([6, 2, 4]))
                c = R.matmul(R.zeros(R.shape([6, 5, 2]), "float32"), rb)  # stays: regrouped
                gv = (a, b, c)
                R.output(gv)
            return gv

    after = ElideBroadcasts()(Mod)["main"]
    assert _matmul_reads(after) == [((6, 5, 4), (4, 4)), ((6, 5, 4), (6, 4, 4)),
                                    ((6, 5, 2), (6, 2, 4))]
