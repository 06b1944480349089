"""Attention over channels (Restormer's MDTA, DANet's channel attention, XCiT's cross-covariance
attention): the scores sum over the tokens (a convolution's H·W), so raised as attention each
of q, k and v would be a transpose of the whole map; it stays as matmuls, which read the
channels-last map in place, and says why."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

pytestmark = pytest.mark.compile


class ChannelAttention(nn.Module):
    """Restormer's transposed attention, small: q, k, v split from one conv, each
    ``(B, heads, C/heads, H·W)``, normalized over H·W, a per-head temperature."""

    def __init__(self, c: int = 16, heads: int = 2, sdpa: bool = False) -> None:
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.qkv = nn.Conv2d(3, 3 * c, 1)
        self.dw = nn.Conv2d(3 * c, 3 * c, 3, padding=1, groups=3 * c)
        self.temperature = nn.Parameter(torch.rand(heads, 1, 1) + 0.5)
        self.out = nn.Conv2d(c, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        q, k, v = self.dw(self.qkv(x)).chunk(3, dim=1)
        c = q.shape[1]
        q, k, v = (t.reshape(b, self.heads, c // self.heads, h * w) for t in (q, k, v))
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        if self.sdpa:  # the same attention written with PyTorch's fused op
            o = F.scaled_dot_product_attention(q * self.temperature, k, v, scale=1.0)
        else:
            o = ((q @ k.transpose(-2, -1)) * self.temperature).softmax(dim=-1) @ v
        return x + self.out(o.reshape(b, c, h, w))


def _compiled(tmp_path, sdpa: bool = False):
    import tvm

    from cl_validate.analysis.fused_kernels import read_kernel_list
    from cl_validate.compile.frontend import export_and_import
    from cl_validate.compile.program import compile_case
    from cl_validate.session.execute import run_torch, run_tvm
    from cl_validate.session.inputs import make_inputs, torch_inputs
    from cl_validate.spec import load_case

    path = tmp_path / "c.toml"
    path.write_text('model = "x:y"\n[[inputs]]\nname = "x"\nshape = [1, 3, 12, 12]\n'
                    'layout = "NHWC"\n[layout]\n"relax.nn.conv2d" = ["NHWC", "OHWI"]\n')
    case = load_case(path)
    torch.manual_seed(0)
    model = ChannelAttention(sdpa=sdpa).eval()
    arrays = make_inputs(case)
    tensors = torch_inputs(case, arrays)
    compiled = compile_case(export_and_import(model, case, tensors), case, "llvm")
    want = run_torch(model, tensors)
    got = run_tvm(compiled.executable, case, arrays, tvm.cpu())
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
    return compiled, read_kernel_list(compiled)


@pytest.mark.parametrize("sdpa", [False, True], ids=["matmuls", "sdpa"])
def test_attention_over_channels_stays_as_matmuls_and_says_why(tmp_path, sdpa):
    """Written as matmuls or with ``F.scaled_dot_product_attention`` alike."""
    compiled, kernels = _compiled(tmp_path, sdpa)
    assert not any(k.name.startswith("attention") for k in kernels.kernels), kernels.render()
    assert any("sum over the tokens" in line for line in compiled.attention_left), \
        compiled.attention_left
    # raised, q, k and v were a transpose each and the output one more (5 in all); as
    # matmuls the map is read in place (v's depth is a head's share of the channels, one
    # stride through memory) and k too; q keeps one transpose: read in place as well, the
    # sum over 144 pixels would step both operands a pixel a term (`walk_problem`)
    assert len(kernels.runtime_transforms) == 2, kernels.render()
    assert sorted(t.attribution.reason.name for t in kernels.runtime_transforms) == \
        ["DECLINED", "OUTPUT_BOUNDARY"]
    (kept,) = [t.attribution for t in kernels.runtime_transforms
               if t.attribution.reason.name == "DECLINED"]
    assert kept.relax_op == "StridedProducts" and kept.why == (
        "its sum over 144 (> 128) would read both operands strided, neither contiguous"), kept


def test_attention_over_a_map_s_pixels_is_still_raised():
    """The same map, attention the other way (YOLO11's PSA, channel-major: the scores sum
    over channels, the softmax over pixels): raised."""
    from cl_validate.compile.passes.raise_attention import find

    matches, left = find(_map_attention(over_channels=False))
    assert len(matches) == 1 and not left
    matches, left = find(_map_attention(over_channels=True))
    assert not matches and len(left) == 1 and "sum over the tokens" in left[0].why


def _map_attention(over_channels: bool):
    """q, k, v split from one convolution's (1, 24, 4, 4) output, each (1, 2 heads, 4
    channels, 16 pixels): attention over the channels (the scores sum over the pixels), or
    YOLO11 PSA's over the pixels (``qᵀ @ k``, ``v @ pᵀ``)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 3, 4, 4], "float32"))
    w = relax.Var("w", relax.TensorType([24, 3, 1, 1], "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            parts = bb.emit(relax.op.split(bb.emit(relax.op.nn.conv2d(x, w)), 3, axis=1))
            q, k, v = (bb.emit(relax.op.reshape(bb.emit(relax.TupleGetItem(parts, i)),
                                                [1, 2, 4, 16])) for i in range(3))
            swap = [0, 1, 3, 2]
            if over_channels:
                s = bb.emit(relax.op.matmul(q, bb.emit(relax.op.permute_dims(k, swap))))
                p = bb.emit(relax.op.nn.softmax(s, axis=-1))
                o = bb.emit_output(relax.op.matmul(p, v))
            else:
                s = bb.emit(relax.op.matmul(bb.emit(relax.op.permute_dims(q, swap)), k))
                p = bb.emit(relax.op.nn.softmax(s, axis=-1))
                o = bb.emit_output(relax.op.matmul(v, bb.emit(relax.op.permute_dims(p, swap))))
        bb.emit_func_output(o)
    return bb.get()["main"]
