"""What our converters share: TVM's own converter for an op (for a converter that wraps it:
complex pairs, half precision, a case it computes wrong), the importer's map built once per
importer; an FX node's argument by position or keyword; operands read in float32 for one
call of a converter."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from tvm import relax

#: The half-precision dtypes (the ones PyTorch accumulates in float32).
HALF = ("float16", "bfloat16")


def dtype_name(dtype: Any) -> str:
    """A torch dtype's name as TVM spells it (``torch.int8`` → ``int8``)."""
    return str(dtype).replace("torch.", "")


def default_converter(importer: Any, name: str) -> Callable[[Any], Any]:
    """The importer's converter for `name` (it takes the FX node alone)."""
    defaults = getattr(importer, "_cl_validate_defaults", None)
    if defaults is None:
        defaults = importer.create_convert_map()
        importer._cl_validate_defaults = defaults
    if name not in defaults:
        raise ValueError(f"no converter for {name}")
    return defaults[name]  # type: ignore[no-any-return]


def node_arg(node: Any, i: int, name: str, default: Any = None) -> Any:
    """`node`'s argument `i`, given positionally or as keyword `name`."""
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def in_float32(bb: Any, x: Any) -> Any:
    """`x` cast to float32 if it is a half-precision tensor (exact), else `x`."""
    if str(getattr(x.ty, "dtype", "")) in HALF:
        return bb.emit(relax.op.astype(x, "float32"))
    return x


@contextmanager
def read_in_float32(importer: Any, args: Iterable[Any]) -> Iterator[None]:
    """While it lasts, each of `args` whose value is a half-precision tensor reads as that
    tensor cast to float32 (what the converter called inside sees); restored after."""
    with read_as(importer, args, "float32", HALF):
        yield


@contextmanager
def read_as(importer: Any, args: Iterable[Any], dtype: str,
            only: Iterable[str] | None = None) -> Iterator[None]:
    """While it lasts, each of `args` whose value is a tensor of another dtype than `dtype`
    (of one of `only`, when given) reads as that tensor cast to `dtype`; restored after."""
    saved = {}
    for a in args:
        value = importer.env.get(a) if a in importer.env else None
        have = str(getattr(getattr(value, "ty", None), "dtype", ""))
        if isinstance(value, relax.Expr) and have and have != dtype and (
                only is None or have in only):
            saved[a] = value
            importer.env[a] = importer.block_builder.emit(relax.op.astype(value, dtype))
    try:
        yield
    finally:
        importer.env.update(saved)


__all__ = ["HALF", "default_converter", "dtype_name", "node_arg", "read_in_float32"]
