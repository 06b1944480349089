"""The ATen decompositions the export runs before the Relax import.

torch.export's core table, with two kinds of change:

* ``scaled_dot_product_attention`` is kept whole: as itself it becomes one attention op that
  reads the heads where the projections put them (`cl_validate.compile.converters`);
  decomposed, it is matmuls that need the heads ahead of the sequence, a transpose before
  and after every attention.
* ``F.unfold`` / ``F.fold`` (``im2col`` / ``col2im``) with *tiling* patches (stride equal to
  the kernel, no dilation: MobileViT's and MobileViTV2's patches, Swin-style windows made
  with unfold) are a reshape, a permute and a reshape. torch's own decomposition writes them
  as a gather (``index``) and a scatter-add into zeros (``index_put``), which no layout pass
  can see through: in NHWC each costs transposes on both sides. The view form is exact
  (every output element is one input element, or a zero where the patches do not reach);
  any other patch geometry keeps torch's decomposition.
* ``max_unpool2d`` / ``max_unpool3d`` (SegNet, ENet) are a ``scatter`` of each plane's values
  to their flat indices in that plane (``(N, C, H·W)``), where torch's decomposition adds
  each channel's plane offset to the indices and scatters into the whole tensor flattened: a
  flat NCHW position, which ties the scatter (and the pool whose indices it reads) to NCHW.
  The same writes, one plane at a time; a layout pass carries the scatter like its operands.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

aten = torch.ops.aten


def _ints(values: Sequence[Any]) -> list[int] | None:
    """`values` as plain ints, or None when one is symbolic (a dynamic extent)."""
    return [int(v) for v in values] if all(isinstance(v, int) for v in values) else None


def _tiling(kernel: Sequence[Any], dilation: Sequence[Any], padding: Sequence[Any],
            stride: Sequence[Any]) -> tuple[list[int], list[int]] | None:
    """(kernel, padding) when the patches tile the (padded) map: stride == kernel, no
    dilation, all of it static; else None."""
    k, d, p, s = _ints(kernel), _ints(dilation), _ints(padding), _ints(stride)
    if k is None or d is None or p is None or s is None or len(k) != 2:
        return None
    if d != [1, 1] or s != k or min(k) < 1 or min(p) < 0:
        return None
    return k, p


def _im2col(default: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def im2col(x: torch.Tensor, kernel_size: Sequence[Any], dilation: Sequence[Any],
               padding: Sequence[Any], stride: Sequence[Any]) -> torch.Tensor:
        tiling = _tiling(kernel_size, dilation, padding, stride)
        dims = _ints(x.shape)
        if tiling is None or dims is None or len(dims) not in (3, 4):
            return default(x, kernel_size, dilation, padding, stride)
        (kh, kw), (ph, pw) = tiling
        b, c, h, w = dims if len(dims) == 4 else [1, *dims]
        h, w = h + 2 * ph, w + 2 * pw  # the padded map the patches tile
        ho, wo = (h - kh) // kh + 1, (w - kw) // kw + 1
        if ho < 1 or wo < 1:
            return default(x, kernel_size, dilation, padding, stride)
        if len(dims) == 3:
            x = aten.unsqueeze.default(x, 0)
        if ph or pw:
            x = aten.constant_pad_nd.default(x, [pw, pw, ph, ph], 0.0)
        if ho * kh != h:  # the rows no patch reaches
            x = aten.slice.Tensor(x, 2, 0, ho * kh)
        if wo * kw != w:
            x = aten.slice.Tensor(x, 3, 0, wo * kw)
        # out[b, (c, i, j), (oh, ow)] = x[b, c, oh*kh + i, ow*kw + j]
        y = aten.reshape.default(x, [b, c, ho, kh, wo, kw])
        y = aten.permute.default(y, [0, 1, 3, 5, 2, 4])
        y = aten.reshape.default(y, [b, c * kh * kw, ho * wo])
        return y if len(dims) == 4 else aten.squeeze.dim(y, 0)

    return im2col


def _col2im(default: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def col2im(x: torch.Tensor, output_size: Sequence[Any], kernel_size: Sequence[Any],
               dilation: Sequence[Any], padding: Sequence[Any],
               stride: Sequence[Any]) -> torch.Tensor:
        tiling = _tiling(kernel_size, dilation, padding, stride)
        dims, size = _ints(x.shape), _ints(output_size)
        if tiling is None or dims is None or size is None or len(dims) not in (2, 3):
            return default(x, output_size, kernel_size, dilation, padding, stride)
        (kh, kw), (ph, pw) = tiling
        h, w = size[0] + 2 * ph, size[1] + 2 * pw  # the padded map the patches tile
        ho, wo = (h - kh) // kh + 1, (w - kw) // kw + 1
        b, ckk, n = dims if len(dims) == 3 else [1, *dims]
        if ho < 1 or wo < 1 or n != ho * wo or ckk % (kh * kw):
            return default(x, output_size, kernel_size, dilation, padding, stride)
        c = ckk // (kh * kw)
        # out[b, c, oh*kh + i, ow*kw + j] = x[b, (c, i, j), (oh, ow)]: each once, no sum
        y = aten.reshape.default(x, [b, c, kh, kw, ho, wo])
        y = aten.permute.default(y, [0, 1, 4, 2, 5, 3])
        y = aten.reshape.default(y, [b, c, ho * kh, wo * kw])
        if ho * kh != h or wo * kw != w:  # the rows and columns no patch reaches: zeros
            y = aten.constant_pad_nd.default(y, [0, w - wo * kw, 0, h - ho * kh], 0.0)
        if ph:
            y = aten.slice.Tensor(y, 2, ph, ph + size[0])
        if pw:
            y = aten.slice.Tensor(y, 3, pw, pw + size[1])
        return y if len(dims) == 3 else aten.squeeze.dim(y, 0)

    return col2im


def _max_unpool(default: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def unpool(x: torch.Tensor, indices: torch.Tensor, output_size: Sequence[Any],
               *rest: Any) -> torch.Tensor:
        dims, size = _ints(x.shape), _ints(output_size)
        if dims is None or size is None or _ints(indices.shape) != dims \
                or len(dims) not in (len(size) + 1, len(size) + 2):
            return default(x, indices, output_size, *rest)
        lead = dims[:len(dims) - len(size)]  # (N, C) or (C,): the planes
        plane = 1
        for d in size:
            plane *= d
        zeros = aten.full.default([*lead, plane], 0, dtype=x.dtype, device=x.device)
        y = aten.scatter.src(zeros, len(lead), aten.reshape.default(indices, [*lead, -1]),
                             aten.reshape.default(x, [*lead, -1]))
        return aten.reshape.default(y, [*lead, *size])

    return unpool


def decompositions() -> dict[Any, Any]:
    """torch.export's core ATen decompositions with the changes above."""
    table = torch.export.default_decompositions()
    for op in list(table):
        if "scaled_dot_product" in str(op):
            del table[op]
    for op, wrap in ((aten.im2col.default, _im2col), (aten.col2im.default, _col2im),
                     (aten.max_unpool2d.default, _max_unpool),
                     (aten.max_unpool3d.default, _max_unpool)):
        if op in table:
            table[op] = wrap(table[op])
    return table  # type: ignore[no-any-return]
