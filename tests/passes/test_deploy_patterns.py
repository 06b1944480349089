"""SinkPermutes on the patterns of deployed detection / diffusion / transformer models (#24):
golden Before/Expected IR, and the unfold-style advanced-indexing import.

The Before modules are what ConvertLayout leaves; Expected has no transpose in the middle.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.script import ir as I
from tvm.script import relax as R

from cl_validate.compile.passes import SinkPermutes
from cl_validate.ir import count_permutes

T4 = R.Tensor((1, 4, 4, 8), "float32")
C8 = R.Tensor((8,), "float32")


def _check(before: tvm.IRModule, expected: tvm.IRModule) -> None:
    tvm.ir.assert_structural_equal(SinkPermutes()(before), expected)


def test_group_norm_follows_the_stream_it_reads() -> None:
    """A diffusers ResnetBlock2D after an attention block: the residual stream comes back
    NHWC (the attention's ``transpose.reshape`` folded), ConvertLayout left the GroupNorm
    NCHW between two transposes. It runs on the NHWC stream, channel axis and axes renamed."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4, g: C8, b: C8) -> T4:
            R.func_attr({"num_input": 1})
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                n = R.nn.group_norm(a, g, b, num_groups=2, channel_axis=1, axes=[2, 3])
                s = R.nn.silu(n)
                c = R.permute_dims(s, axes=[0, 2, 3, 1])
                gv = R.add(c, x)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4, g: C8, b: C8) -> T4:
            R.func_attr({"num_input": 1})
            with R.dataflow():
                n = R.nn.group_norm(x, g, b, num_groups=2, channel_axis=3, axes=[1, 2])
                s = R.nn.silu(n)
                gv = R.add(s, x)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_dfl_decode_runs_on_anchor_major_boxes() -> None:
    """YOLOv8's DFL: boxes (B, anchors, 4·bins) in NHWC are viewed (B, 4, bins, anchors),
    transposed by the model (bins first), softmaxed over the bins and reduced by a 1×1 conv
    that ConvertLayout wants NHWC, i.e. (B, 4, anchors, bins). All of it runs on
    (B, anchors, 4, bins): the view is free, the model's transpose and ConvertLayout's
    meet, softmax takes the last axis, the 1×1 conv does not care which spatial axis is which;
    one transpose is left, where the output is channel-major."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 6, 16), "float32"),
                 w: R.Tensor((1, 1, 1, 4), "float32")) -> R.Tensor((1, 4, 6), "float32"):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 2, 1])
                v = R.reshape(a, R.shape([1, 4, 4, 6]))
                t = R.permute_dims(v, axes=[0, 2, 1, 3])
                s = R.nn.softmax(t, axis=1)
                u = R.permute_dims(s, axes=[0, 2, 3, 1])
                c = R.nn.conv2d(u, w, data_layout="NHWC", kernel_layout="OHWI")
                p = R.permute_dims(c, axes=[0, 3, 1, 2])
                gv = R.reshape(p, R.shape([1, 4, 6]))
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 6, 16), "float32"),
                 w: R.Tensor((1, 1, 1, 4), "float32")) -> R.Tensor((1, 4, 6), "float32"):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                v = R.reshape(x, R.shape([1, 6, 4, 4]))
                s = R.nn.softmax(v, axis=3)
                c = R.nn.conv2d(s, w, data_layout="NHWC", kernel_layout="OHWI")
                r = R.reshape(c, R.shape([1, 6, 4]))
                gv = R.permute_dims(r, axes=[0, 2, 1])
                R.output(gv)
            return gv

    _check(Before, Expected)
    _numerics_equal(Before, SinkPermutes()(Before))


def test_anchor_major_detector_output_needs_no_transpose() -> None:
    """A detector exported anchor-major: each level's (B, C, H, W) map flattened to
    (B, C, H·W), the levels concatenated along the anchors and transposed to (B, anchors, C).
    ConvertLayout leaves each level NCHW behind a transpose; in NHWC every level already is
    (B, H·W, C): the views are free, the concat runs on anchors, and the model's transpose
    meets ConvertLayout's: no transpose is left."""

    @I.ir_module
    class Before:
        @R.function
        def main(x1: R.Tensor((1, 4, 4, 8), "float32"), x2: R.Tensor((1, 2, 2, 8), "float32")
                 ) -> R.Tensor((1, 20, 8), "float32"):
            R.func_attr({"num_input": 2})
            with R.dataflow():
                a1 = R.permute_dims(x1, axes=[0, 3, 1, 2])
                r1 = R.reshape(a1, R.shape([1, 8, 16]))
                a2 = R.permute_dims(x2, axes=[0, 3, 1, 2])
                r2 = R.reshape(a2, R.shape([1, 8, 4]))
                c = R.concat((r1, r2), axis=2)
                s = R.sigmoid(c)
                gv = R.permute_dims(s, axes=[0, 2, 1])
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x1: R.Tensor((1, 4, 4, 8), "float32"), x2: R.Tensor((1, 2, 2, 8), "float32")
                 ) -> R.Tensor((1, 20, 8), "float32"):
            R.func_attr({"num_input": 2})
            with R.dataflow():
                r1 = R.reshape(x1, R.shape([1, 16, 8]))
                r2 = R.reshape(x2, R.shape([1, 4, 8]))
                c = R.concat((r1, r2), axis=1)
                s = R.sigmoid(c)
                gv = s  # the absorbed permute: an alias, removed by the next cleanup
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_a_part_of_the_heads_viewed_back_into_a_map_reads_the_conv_output() -> None:
    """YOLO11's PSA: a conv output viewed into heads (B, heads, q+k+v, H·W) needs the heads
    ahead of the pixels for the matmuls (that transpose stays), but the v part viewed back
    into a map for the positional conv is a slice of the NHWC conv output: the transpose back
    to NHWC becomes a slice, and nothing is transposed twice."""
    from cl_validate.compile.passes import ReadSlicesAtSource

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 4, 4, 16), "float32")
                 ) -> R.Tuple(R.Tensor((1, 2, 2, 16), "float32"),
                              R.Tensor((1, 4, 4, 8), "float32")):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                h = R.reshape(a, R.shape([1, 2, 8, 16]))
                parts = R.split(h, indices_or_sections=[2, 4], axis=2)
                q = parts[0]
                v = parts[2]
                m = R.reshape(v, R.shape([1, 8, 4, 4]))
                pe = R.permute_dims(m, axes=[0, 2, 3, 1])
                gv = (q, pe)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 4, 4, 16), "float32")
                 ) -> R.Tuple(R.Tensor((1, 2, 2, 16), "float32"),
                              R.Tensor((1, 4, 4, 8), "float32")):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                h = R.reshape(a, R.shape([1, 2, 8, 16]))
                parts = R.split(h, indices_or_sections=[2, 4], axis=2)
                q = parts[0]
                r = R.reshape(x, R.shape([4, 4, 2, 8]))
                s = R.strided_slice(r, axes=[3], begin=[4], end=[8])
                pe = R.reshape(s, R.shape([1, 4, 4, 8]))
                gv = (q, pe)
                R.output(gv)
            return gv

    after = ReadSlicesAtSource()(Before)
    tvm.ir.assert_structural_equal(after, Expected)
    assert count_permutes(after) == count_permutes(Before) - 1
    _numerics_equal(Before, after)


def test_a_strided_slice_from_the_end_reads_the_source_too() -> None:
    """``x[:, :, -4:]`` slices like a split's last part: the transpose back becomes a slice
    of the source, exact."""
    from cl_validate.compile.passes import ReadSlicesAtSource

    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 4, 4, 16), "float32")
                 ) -> R.Tuple(R.Tensor((1, 2, 8, 16), "float32"),
                              R.Tensor((1, 4, 4, 8), "float32")):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                h = R.reshape(a, R.shape([1, 2, 8, 16]))
                v = R.strided_slice(h, axes=[2], begin=[-4], end=[8])
                m = R.reshape(v, R.shape([1, 8, 4, 4]))
                pe = R.permute_dims(m, axes=[0, 2, 3, 1])
                gv = (h, pe)
                R.output(gv)
            return gv

    after = ReadSlicesAtSource()(Before)
    assert count_permutes(after) == count_permutes(Before) - 1 == 1
    _numerics_equal(Before, after)


def test_a_slice_that_needs_a_transpose_is_left_alone() -> None:
    """The same chain viewed back head-minor (B, q+k+v part, heads, pixels → a map whose
    channels run over the part first) interleaves the heads: no slice of the NHWC source
    gives it, and the transpose stays."""
    from cl_validate.compile.passes.slice_views import fold_sliced

    views = [("permute", (0, 3, 1, 2)), ("reshape", (1, 2, 8, 16))]
    assert fold_sliced((1, 4, 4, 16), [*views, ("slice", (2, 4, 8)),
                                       ("reshape", (1, 8, 4, 4)),
                                       ("permute", (0, 2, 3, 1))]) is not None
    head_minor = [*views, ("slice", (2, 4, 8)), ("permute", (0, 2, 1, 3)),
                  ("reshape", (1, 8, 4, 4)), ("permute", (0, 2, 3, 1))]
    assert fold_sliced((1, 4, 4, 16), head_minor) is None
    # a slice that cuts inside the inner atoms of a merged axis is not a slice of one atom
    assert fold_sliced((1, 4, 4, 16), [("reshape", (1, 256)), ("slice", (1, 3, 9))]) is None


def _numerics_equal(before: tvm.IRModule, after: tvm.IRModule) -> None:
    from tvm import relax

    rng = np.random.default_rng(0)
    args = [rng.standard_normal([int(d) for d in p.ty.shape]).astype("float32")
            for p in before["main"].params]
    outs = []
    for mod in (before, after):
        ex = tvm.compile(mod, target="llvm")
        vm = relax.VirtualMachine(ex, tvm.cpu())
        out = vm["main"](*[tvm.runtime.tensor(a) for a in args])
        outs.append([o.numpy() for o in out] if hasattr(out, "__len__") else [out.numpy()])
    for got, want in zip(outs[1], outs[0], strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.compile
def test_adjacent_index_tensors_import_as_one_take() -> None:
    """``x[:, :, ih[:, None, :, None], iw[None, :, None, :]]`` (overlapping k×k patches, as
    F.unfold) used to fail with "cannot broadcast index shapes"; it imports as a take along
    H·W with reshapes around it (no transpose) and computes what PyTorch does, negative
    indices included."""
    import torch
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map

    class Patches(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            ih = torch.arange(0, 6, 2)[:, None] + torch.arange(3)[None, :]
            iw = torch.arange(0, 6, 2)[:, None] + torch.arange(3)[None, :] - 8
            return x[:, :, ih[:, None, :, None], iw[None, :, None, :]] + 0.5

    x = torch.randn(2, 3, 8, 8)
    mod = from_exported_program(torch.export.export(Patches(), (x,)),
                                custom_convert_map=custom_convert_map())
    assert count_permutes(mod) == 0
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x.numpy()))[0].numpy()
    np.testing.assert_array_equal(out, Patches()(x).numpy())


@pytest.mark.compile
def test_int_tensor_plus_float_computes_in_float() -> None:
    """``torch.arange(h) + 0.5`` (anchor grids): TVM's converter made 0.5 an int64 0."""
    import torch
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map

    class Grid(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + (torch.arange(4) + 0.5) * (torch.arange(4) - 0.25) - (0.5 - torch.arange(4))

    x = torch.randn(1, 4)
    mod = from_exported_program(torch.export.export(Grid(), (x,)),
                                custom_convert_map=custom_convert_map())
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x.numpy()))[0].numpy()
    np.testing.assert_allclose(out, Grid()(x).numpy(), rtol=1e-6)


def test_a_sunk_own_permute_stays_the_models() -> None:
    """The model's own transpose (nn.MultiheadAttention's kᵀ) sunk through elementwise ops to
    where a matmul needs it materializes there, one transpose for two, still marked as the
    model's own: reports must not blame a layout rule for attention's head transpose."""
    from tvm import relax

    from cl_validate.ir import MODEL, Part, bindings, is_own, mark_origin, origin_mark, permute_axes

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 4, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.permute_dims(x, [0, 3, 1, 2]))  # ConvertLayout's
            m = bb.emit(relax.op.multiply(a, relax.const(2.0, "float32")))
            k = bb.emit(mark_origin(relax.op.permute_dims(m, [0, 1, 3, 2]),  # the model's
                                    origin_mark([Part(MODEL, "attn (permute)")])))
            r = bb.emit(relax.op.nn.relu(k))
            gv = bb.emit_output(relax.op.matmul(r, r))
        bb.emit_func_output(gv)
    after = SinkPermutes()(bb.get())
    left = [b.value for b in bindings(after["main"]) if permute_axes(b.value) is not None]
    assert len(left) == 1 and is_own(left[0]), after


@pytest.mark.compile
def test_f_unfold_imports() -> None:
    """``F.unfold`` exports as ``aten.im2col``, which the importer decomposes into the same
    adjacent-index gather: it failed the same way and imports now, exactly."""
    import torch
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map

    class Unfold(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.unfold(x, 3, stride=2)

    x = torch.randn(1, 2, 9, 9)
    mod = from_exported_program(torch.export.export(Unfold(), (x,)),
                                custom_convert_map=custom_convert_map())
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x.numpy()))[0].numpy()
    np.testing.assert_array_equal(out, Unfold()(x).numpy())


def test_batch_norm_after_the_models_permute_runs_on_the_stream() -> None:
    """MaxViT: an NHWC stage ends in the model's own permute back to NCHW, a BatchNorm2d
    (ConvertLayout's rule keeps it where its input is: NCHW) and a conv ConvertLayout made
    NHWC. The BatchNorm runs on the NHWC stream, axis renamed; only its data field is read
    through the layout, its statistics keep theirs."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4, g: C8, b: C8, m: C8, v: C8) -> T4:
            R.func_attr({"num_input": 1})
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                n = R.nn.batch_norm(a, g, b, m, v, axis=1)
                n0 = n[0]
                c = R.permute_dims(n0, axes=[0, 2, 3, 1])
                gv = R.nn.relu(c)
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: T4, g: C8, b: C8, m: C8, v: C8) -> T4:
            R.func_attr({"num_input": 1})
            with R.dataflow():
                n = R.nn.batch_norm(x, g, b, m, v, axis=3)
                n0 = n[0]
                gv = R.nn.relu(n0)
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_batch_norm_whose_statistics_are_read_is_left_alone() -> None:
    """A per-channel statistic is not in the data's layout: a region that would read it
    through the permutation is not converted."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: T4, g: C8, b: C8, m: C8, v: C8) -> R.Tuple(T4, C8):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                a = R.permute_dims(x, axes=[0, 3, 1, 2])
                n = R.nn.batch_norm(a, g, b, m, v, axis=1)
                n0 = n[0]
                n1 = n[1]
                c = R.permute_dims(n0, axes=[0, 2, 3, 1])
                gv = (c, n1)
                R.output(gv)
            return gv

    tvm.ir.assert_structural_equal(SinkPermutes()(Before), Before)


X4 = R.Tensor((1, 8, 4, 4), "float32")
W = R.Tensor((8, 3, 3, 8), "float32")  # OHWI


def test_a_norm_reads_the_transposed_copy_the_residual_reads() -> None:
    """diffusers' mid-block: the NCHW input is read by a GroupNorm (ConvertLayout's rule
    keeps it NCHW, a transpose behind it for the conv) and, transposed, by the residual add.
    The GroupNorm runs on that transposed copy: one transpose of the input, not two (the
    sum after the second conv keeps the add NHWC, so sinking alone cannot do it)."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: X4, g: C8, b: C8, w: W) -> X4:
            R.func_attr({"num_input": 1})
            with R.dataflow():
                n = R.nn.group_norm(x, g, b, num_groups=2, channel_axis=1, axes=[2, 3])
                s = R.nn.silu(n)
                a = R.permute_dims(s, axes=[0, 2, 3, 1])
                c = R.nn.conv2d(a, w, padding=[1, 1, 1, 1], data_layout="NHWC",
                                 kernel_layout="OHWI")
                t = R.permute_dims(x, axes=[0, 2, 3, 1])
                r = R.add(c, t)
                d = R.nn.conv2d(r, w, padding=[1, 1, 1, 1], data_layout="NHWC",
                                kernel_layout="OHWI")
                gv = R.permute_dims(d, axes=[0, 3, 1, 2])
                R.output(gv)
            return gv

    @I.ir_module
    class Expected:
        @R.function
        def main(x: X4, g: C8, b: C8, w: W) -> X4:
            R.func_attr({"num_input": 1})
            with R.dataflow():
                t = R.permute_dims(x, axes=[0, 2, 3, 1])
                n = R.nn.group_norm(t, g, b, num_groups=2, channel_axis=3, axes=[1, 2])
                s = R.nn.silu(n)
                c = R.nn.conv2d(s, w, padding=[1, 1, 1, 1], data_layout="NHWC",
                                 kernel_layout="OHWI")
                r = R.add(c, t)
                d = R.nn.conv2d(r, w, padding=[1, 1, 1, 1], data_layout="NHWC",
                                kernel_layout="OHWI")
                gv = R.permute_dims(d, axes=[0, 3, 1, 2])
                R.output(gv)
            return gv

    _check(Before, Expected)


def test_a_copy_is_not_used_where_it_gains_nothing() -> None:
    """A GroupNorm on the NCHW input whose result goes out NCHW: reading the transposed copy
    would need a transpose back; nothing changes."""

    @I.ir_module
    class Before:
        @R.function
        def main(x: X4, g: C8, b: C8) -> R.Tuple(X4, R.Tensor((1, 4, 4, 8), "float32")):
            R.func_attr({"num_input": 1})
            with R.dataflow():
                n = R.nn.group_norm(x, g, b, num_groups=2, channel_axis=1, axes=[2, 3])
                t = R.permute_dims(x, axes=[0, 2, 3, 1])
                c = R.nn.relu(t)
                gv = (n, c)
                R.output(gv)
            return gv

    tvm.ir.assert_structural_equal(SinkPermutes()(Before), Before)
