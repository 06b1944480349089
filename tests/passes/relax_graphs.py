"""A Hypothesis strategy for Relax functions in mixed layouts, for property tests of the passes.

Each function starts from one NHWC-shaped input and applies a random chain of the ops the
cleanup passes reason about: permutes (NCHW↔NHWC and arbitrary), views (channel split,
spatial merge, flatten, squeeze/expand), elementwise ops with broadcast constants, clip,
concat, take, strided_slice, reductions, softmax, pooling in either layout (with padding and
ceil mode), nn.pad,
convolutions in either layout with constant weights, broadcast_to and matmul. Every op is
built through a BlockBuilder, so shapes are inferred by TVM and every graph is well formed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st
from tvm import relax
from tvm.relax import op as R

from cl_validate.ir import known_shape

Draw = Callable[..., object]


@dataclass
class _Graph:
    draw: Draw
    bb: relax.BlockBuilder
    values: list[relax.Expr] = field(default_factory=list)
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))

    def pick(self) -> relax.Expr:
        """Usually the latest value (chains), sometimes an earlier one (branches)."""
        if self.draw(st.booleans()):
            return self.values[-1]
        return self.values[self.draw(st.integers(0, len(self.values) - 1))]

    def choice(self, options: list[str]) -> str:
        """Op kinds are chosen uniformly by the example's own generator: Hypothesis favours
        the first of a ``sampled_from``, which would leave later op kinds untested."""
        return str(options[int(self.rng.integers(len(options)))])

    def const(self, shape: tuple[int, ...]) -> relax.Expr:
        return relax.const(self.rng.uniform(-1, 1, size=shape).astype("float32"))

    def emit(self, expr: relax.Expr) -> None:
        var = self.bb.emit(expr)
        shape = known_shape(var)
        if shape and 0 < int(np.prod(shape)) <= 4096:  # no scalars: every op wants an axis
            self.values.append(var)


def _permute(g: _Graph, x: relax.Expr, shape: tuple[int, ...]) -> relax.Expr | None:
    if len(shape) == 4 and g.draw(st.booleans()):
        return R.permute_dims(x, list(g.draw(st.sampled_from([(0, 3, 1, 2), (0, 2, 3, 1)]))))
    return R.permute_dims(x, list(g.draw(st.permutations(range(len(shape))))))


def _view(g: _Graph, x: relax.Expr, shape: tuple[int, ...]) -> relax.Expr | None:
    kind = g.choice(["split", "merge", "flatten", "expand", "squeeze"])
    dims = list(shape)
    if kind == "split":
        axes = [i for i, d in enumerate(dims) if d % 2 == 0 and d > 2]
        if not axes:
            return None
        i = g.draw(st.sampled_from(axes))
        dims[i:i + 1] = [2, dims[i] // 2] if g.draw(st.booleans()) else [dims[i] // 2, 2]
    elif kind == "merge" and len(dims) > 1:
        i = g.draw(st.integers(0, len(dims) - 2))
        dims[i:i + 2] = [dims[i] * dims[i + 1]]
    elif kind == "flatten" and len(dims) > 2:
        dims = [dims[0], int(np.prod(dims[1:]))]
    elif kind == "expand":
        return R.expand_dims(x, [g.draw(st.integers(0, len(dims)))])
    elif kind == "squeeze" and 1 in dims[1:]:
        return R.squeeze(x, [1 + dims[1:].index(1)])
    else:
        return None
    return R.reshape(x, dims)


def _elementwise(g: _Graph, x: relax.Expr, shape: tuple[int, ...]) -> relax.Expr | None:
    kind = g.choice(["relu", "clip", "sigmoid", "add", "multiply", "where"])
    if kind == "relu":
        return R.nn.relu(x)
    if kind == "clip":
        return R.clip(x, -0.5, 0.5)
    if kind == "sigmoid":
        return R.sigmoid(x)
    # a scalar, a vector along the last axis, or one along axis 1 (NCHW's channels)
    options: list[tuple[int, ...]] = [(), (shape[-1],)]
    if len(shape) >= 3:
        options.append((1, shape[1]) + (1,) * (len(shape) - 2))
    same = [v for v in g.values if known_shape(v) == shape and v is not x]
    other = same[-1] if same and g.draw(st.booleans()) else g.const(
        g.draw(st.sampled_from(options)))
    if kind == "where":
        return R.where(R.greater(x, relax.const(0.0, "float32")), x, other)
    return (R.add if kind == "add" else R.multiply)(x, other)


def _reduce(g: _Graph, x: relax.Expr, shape: tuple[int, ...]) -> relax.Expr | None:
    if len(shape) < 2:
        return None
    axes = g.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=2,
                           unique=True))
    kind = g.choice(["sum", "mean", "max", "softmax"])
    if kind == "softmax":
        return R.nn.softmax(x, axis=axes[0])
    keep = g.draw(st.booleans())
    return getattr(R, kind)(x, axis=axes, keepdims=keep)


def _concat(g: _Graph, x: relax.Expr, shape: tuple[int, ...]) -> relax.Expr | None:
    same = [v for v in g.values if known_shape(v) == shape]
    return R.concat([x, g.draw(st.sampled_from(same))], axis=g.draw(
        st.integers(0, len(shape) - 1)))


def _spatial(g: _Graph, x: relax.Expr, shape: tuple[int, ...]) -> relax.Expr | None:
    """Pooling, nn.pad or conv2d on a 4-D value, read as NCHW or as NHWC."""
    if len(shape) != 4:
        return None
    layout = g.choice(["NCHW", "NHWC"])
    h, w = (shape[2], shape[3]) if layout == "NCHW" else (shape[1], shape[2])
    c = shape[1] if layout == "NCHW" else shape[3]
    kind = g.choice(["max_pool2d", "avg_pool2d", "pad", "conv2d"])
    if kind == "pad":
        widths = [g.draw(st.integers(0, 1)) for _ in range(8)]
        return R.nn.pad(x, widths)
    if kind == "conv2d":
        k = g.draw(st.sampled_from([1, 3]))
        out = g.draw(st.sampled_from([4, 8]))
        weight = g.const((out, c, k, k) if layout == "NCHW" else (out, k, k, c))
        return R.nn.conv2d(x, weight, padding=[k // 2] * 4, data_layout=layout,
                           kernel_layout="OIHW" if layout == "NCHW" else "OHWI")
    size = g.draw(st.sampled_from([2, 3]))
    pad = g.draw(st.integers(0, size // 2))
    if min(h, w) + 2 * pad < size:
        return None
    pool = R.nn.max_pool2d if kind == "max_pool2d" else R.nn.avg_pool2d
    return pool(x, pool_size=[size, size], strides=[g.draw(st.sampled_from([1, 2]))] * 2,
                padding=[pad] * 4, ceil_mode=g.draw(st.booleans()), layout=layout)


def _index(g: _Graph, x: relax.Expr, shape: tuple[int, ...]) -> relax.Expr | None:
    """take of one index (the axis goes), strided_slice, per-channel parts concatenated
    back (Inception-v3's transform_input), or overlapping windows of two along the axis
    (``Tensor.unfold``'s 2-D index) with the windows merged back into one axis."""
    axis = g.draw(st.integers(0, len(shape) - 1))
    kind = g.choice(["take", "slice", "parts", "windows"])
    if kind == "take" and len(shape) > 1:
        return R.take(x, relax.const(g.draw(st.integers(0, shape[axis] - 1)), "int64"), axis)
    if kind == "windows" and shape[axis] > 2:
        n = shape[axis] - 1
        index = np.arange(n)[:, None] + np.arange(2)[None, :]
        windows = g.bb.emit(R.take(x, relax.const(index.astype("int64")), axis))
        return R.reshape(windows, [*shape[:axis], 2 * n, *shape[axis + 1:]])
    if kind == "slice" and shape[axis] > 1:
        return R.strided_slice(x, axes=[axis], begin=[1], end=[shape[axis]])
    if kind == "parts" and 1 < shape[axis] <= 4:
        parts = [R.expand_dims(R.take(x, relax.const(i, "int64"), axis), [axis])
                 for i in range(shape[axis])]
        return R.concat([g.bb.emit(R.multiply(p, relax.const(0.5, "float32"))) for p in parts],
                        axis=axis)
    return None


def _broadcast(g: _Graph, x: relax.Expr, shape: tuple[int, ...]) -> relax.Expr | None:
    """Size-1 axes broadcast to 4; without any, a mean over one axis broadcast back (an SE
    or ECA gate ``expand_as`` the map)."""
    if 1 not in shape[1:]:
        if len(shape) < 2:
            return None
        axis = g.draw(st.integers(1, len(shape) - 1))
        return R.broadcast_to(g.bb.emit(R.mean(x, axis=[axis], keepdims=True)), list(shape))
    return R.broadcast_to(x, [shape[0], *(d if d != 1 else 4 for d in shape[1:])])


def _matmul(g: _Graph, x: relax.Expr, shape: tuple[int, ...]) -> relax.Expr | None:
    if len(shape) < 2:
        return None
    if g.draw(st.booleans()):  # x @ xᵀ over the last two axes
        swap = [*range(len(shape) - 2), len(shape) - 1, len(shape) - 2]
        return R.matmul(x, R.permute_dims(x, swap))
    return R.matmul(x, g.const((shape[-1], g.draw(st.sampled_from([1, 4])))))


OPS = {"permute": _permute, "view": _view, "elementwise": _elementwise, "reduce": _reduce,
       "concat": _concat, "spatial": _spatial, "broadcast": _broadcast, "matmul": _matmul,
       "index": _index}


@st.composite
def relax_functions(draw: Draw, max_ops: int = 8) -> relax.Function:
    """A function ``main(x: (1, H, W, C))`` returning its last value and one other."""
    h = draw(st.sampled_from([4, 6]))
    c = draw(st.sampled_from([4, 8]))
    x = relax.Var("x", relax.TensorType((1, h, h, c), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            g = _Graph(draw, bb, [x], np.random.default_rng(draw(st.integers(0, 2**16))))
            for _ in range(draw(st.integers(2, max_ops))):
                src = g.pick()
                shape = known_shape(src)
                assert shape is not None
                expr = OPS[g.choice(sorted(OPS))](g, src, shape)
                if expr is not None:
                    g.emit(expr)
            outs = [g.values[-1], g.values[draw(st.integers(0, len(g.values) - 1))]]
            gv = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(gv)
    return bb.get()["main"]
