"""UnfoldChannelFilters: a filter run on every channel by folding the channels into the batch
(``upfirdn2d``, kornia's ``filter2d``, Gaussian blurs) is the depthwise convolution it is, so a
channels-last program needs no transpose into the fold and back; the pipeline keeps it only
where the layout stages then leave fewer transforms. Folds whose planes something mixes, and
convolutions of more than one input channel, are left as they are."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import tvm
from torch import nn
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from cl_validate.compile.passes import UnfoldChannelFilters
from cl_validate.ir import bindings, known_shape, op_name
from tests.passes.conftest import compile_nhwc

pytestmark = pytest.mark.compile


class FoldedFilter(nn.Module):
    """upfirdn2d's reference code, reduced: channels into the batch, each plane zero-stuffed
    (`up`), padded, viewed channel-first, convolved with a (k, 1, 3, 3) kernel, activated,
    subsampled (`down`), viewed back as (N, C·k, H', W')."""

    def __init__(self, up: int = 1, down: int = 1, k: int = 1) -> None:
        super().__init__()
        self.up, self.down = up, down
        self.register_buffer("kernel", torch.rand(k, 1, 3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        y = x.reshape(-1, h, w, 1)
        if self.up > 1:
            y = y.view(-1, h, 1, w, 1, 1)
            y = F.pad(y, [0, 0, 0, self.up - 1, 0, 0, 0, self.up - 1])
            y = y.view(-1, h * self.up, w * self.up, 1)
        y = F.pad(y, [0, 0, 1, 2, 1, 2]).permute(0, 3, 1, 2)
        y = F.leaky_relu(F.conv2d(y, self.kernel) * 1.5, 0.2)
        y = y[:, :, ::self.down, ::self.down]
        return y.reshape(n, -1, y.shape[-2], y.shape[-1])


class Between(nn.Module):
    def __init__(self, filt: nn.Module, k: int = 1) -> None:
        super().__init__()
        self.a, self.filt, self.b = nn.Conv2d(3, 4, 3, padding=1), filt, nn.Conv2d(4 * k, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.filt(self.a(x)))


def _convs(compiled) -> list[tuple[int, tuple[int, ...] | None]]:
    """(groups, data shape) of every convolution after the layout stages."""
    return [(int(b.value.attrs.groups), known_shape(b.value.args[0]))
            for b in bindings(compiled.stage("cleanup").mod["main"])
            if op_name(b.value) == "relax.nn.conv2d"]


@pytest.mark.parametrize(("up", "down", "k", "batch"), [
    (1, 1, 1, 1), (2, 1, 1, 2), (1, 2, 2, 1)], ids=["blur", "upsample-batch2", "down-k2"])
def test_a_folded_filter_between_convolutions_costs_no_transform(tmp_path, up, down, k,
                                                                 batch) -> None:
    compiled, kernels = compile_nhwc(
        tmp_path, lambda: Between(FoldedFilter(up, down, k), k), (batch, 3, 10, 10),
        rtol=1e-4, atol=1e-5)
    # NHWC in, NCHW out: the output boundary alone (folded: one transform into the fold and
    # one back besides)
    assert len(kernels.runtime_transforms) == 1, kernels.render()
    assert (4, (batch, 10 * up + 3, 10 * up + 3, 4)) in _convs(compiled), _convs(compiled)


def test_a_filter_with_no_converted_op_around_it_stays_folded(tmp_path) -> None:
    """An NCHW input filtered and returned: folded, no transform at all; as a depthwise NHWC
    convolution it would cost one at each end, so the pipeline keeps the fold."""
    compiled, kernels = compile_nhwc(tmp_path, lambda: FoldedFilter(), (1, 3, 10, 10),
                                     rtol=1e-5, atol=1e-6, input_layout="NCHW")
    assert not kernels.runtime_transforms, kernels.render()
    assert [g for g, _ in _convs(compiled)] == [1]


X = R.Tensor((2, 3, 8, 8), "float32")
W1 = R.Tensor((1, 1, 3, 3), "float32")


def test_the_folded_convolution_becomes_a_depthwise_one() -> None:
    @I.ir_module
    class Before:
        @R.function
        def main(x: X, w: W1) -> R.Tensor((2, 3, 6, 6), "float32"):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                f = R.reshape(x, R.shape([6, 1, 8, 8]))
                y = R.nn.conv2d(f, w)
                gv = R.reshape(y, R.shape([2, 3, 6, 6]))
                R.output(gv)
            return gv

    after = UnfoldChannelFilters()(Before)["main"]
    convs = [b.value for b in bindings(after) if op_name(b.value) == "relax.nn.conv2d"]
    assert len(convs) == 1
    assert int(convs[0].attrs.groups) == 3
    assert known_shape(convs[0].args[0]) == (2, 3, 8, 8)
    assert known_shape(convs[0].args[1]) == (3, 1, 3, 3)


def test_folds_whose_planes_are_mixed_are_left() -> None:
    """A two-channel convolution of the folded planes (frames folded into the batch, not a
    per-channel filter), and a sum over the folded axis: no depthwise form is the same."""

    @I.ir_module
    class TwoChannels:
        @R.function
        def main(x: X, w: R.Tensor((1, 2, 3, 3), "float32")) -> R.Tensor((1, 3, 6, 6), "float32"):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                f = R.reshape(x, R.shape([3, 2, 8, 8]))
                y = R.nn.conv2d(f, w)
                gv = R.reshape(y, R.shape([1, 3, 6, 6]))
                R.output(gv)
            return gv

    @I.ir_module
    class Mixed:
        @R.function
        def main(x: X, w: W1) -> R.Tensor((1, 6, 6), "float32"):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                f = R.reshape(x, R.shape([6, 1, 8, 8]))
                y = R.nn.conv2d(f, w)
                s = R.sum(y, axis=[0])
                gv = R.reshape(s, R.shape([1, 6, 6]))
                R.output(gv)
            return gv

    for mod in (TwoChannels, Mixed):
        tvm.ir.assert_structural_equal(UnfoldChannelFilters()(mod), mod)


class AudioFIR(nn.Module):
    """A per-channel FIR on (N, C, T) signals, folded as (N·C, 1, T) for a one-channel Conv1d
    (as torchaudio-style filters do), between two Conv1d."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv1d(3, 4, 3, padding=1), nn.Conv1d(4, 4, 1)
        self.register_buffer("taps", torch.rand(1, 1, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        n, c, t = y.shape
        y = F.conv1d(F.pad(y.reshape(n * c, 1, t), [2, 2]), self.taps).reshape(n, c, t)
        return self.b(y)


def test_a_folded_conv1d_filter_is_a_depthwise_conv1d(tmp_path) -> None:
    """The conv1d layout the case's conv2d implies (NWC): the filter runs in it too."""
    compiled, kernels = compile_nhwc(tmp_path, AudioFIR, (2, 3, 12), rtol=1e-4, atol=1e-5,
                                     input_layout=None)
    convs = [int(b.value.attrs.groups) for b in bindings(compiled.stage("cleanup").mod["main"])
             if op_name(b.value) == "relax.nn.conv1d"]
    assert sorted(convs) == [1, 1, 4], convs
    # the (N, C, T) input and output boundaries only
    assert len(kernels.runtime_transforms) == 2, kernels.render()


def test_a_symbolic_batch_is_left_as_it_is() -> None:
    """Planes that cannot be counted (a symbolic batch) are not split into (N, C)."""

    @I.ir_module
    class Symbolic:
        @R.function
        def main(x: R.Tensor(("n", 3, 8, 8), "float32"), w: W1
                 ) -> R.Tensor(("n", 3, 6, 6), "float32"):
            n = T.int64()
            R.func_attr({"num_input": 1})
            with R.dataflow():
                f = R.reshape(x, R.shape([n * 3, 1, 8, 8]))
                y = R.nn.conv2d(f, w)
                gv = R.reshape(y, R.shape([n, 3, 6, 6]))
                R.output(gv)
            return gv

    tvm.ir.assert_structural_equal(UnfoldChannelFilters()(Symbolic), Symbolic)
