"""What a model's forward returns, as the flat list of named tensors numerics compares.

A forward may return a tensor, or any nesting of tuples, lists, named tuples, dicts (a
Hugging Face ``ModelOutput`` is one), dataclasses and None. The leaves are taken in
``torch.export``'s order — the order of the exported program's outputs, so TVM's outputs line
up with PyTorch's — and each is named by its path: ``logits``, ``pred_boxes``, ``1.k`` (a
lone tensor: ""). A None is no output (as the program returns nothing for it).

``torch.export`` flattens only the container types it knows: a dict subclass or a dataclass of
the model's own (a ``ModelOutput`` written without transformers) is registered with it here,
in the case's process, as a dict of its entries or a record of its fields. Anything else in
the result (a number, a string, an object) is `OutputTypeError`, naming the type and where it
is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from torch.utils import _pytree as pytree

_ALLOWED = ("outputs are tensors, or tuples, lists, dicts, dataclasses (a ModelOutput) and "
            "None holding them")


class OutputTypeError(TypeError):
    """A forward returned something numerics cannot compare (not a tensor, container or
    None)."""


def named_outputs(out: Any) -> list[tuple[str, torch.Tensor]]:
    """The tensors of `out`, in ``torch.export``'s order, each with its path."""
    try:
        _register_containers(out, set())
        leaves, _ = pytree.tree_flatten_with_path(out)
    except RecursionError:
        raise OutputTypeError(f"the model's forward returned {_type_name(out)} nested deeper "
                              f"than Python can walk: {_ALLOWED}") from None
    named = []
    for path, leaf in leaves:
        name = ".".join(_key_text(k) for k in path)
        if leaf is None:
            continue
        if not isinstance(leaf, torch.Tensor):
            where = f" at {name!r}" if name else ""
            raise OutputTypeError(f"the model's forward returned {_type_name(leaf)}{where}: "
                                  f"{_ALLOWED}")
        named.append((name, leaf))
    if not named:
        raise OutputTypeError(f"the model's forward returned no tensor ({_type_name(out)}): "
                              f"{_ALLOWED}")
    return named


def is_flat(out: Any) -> bool:
    """Whether `out` is a tensor or a tuple or list of tensors: what ``torch.export`` returns
    as it is; anything else is exported through a wrapper that returns `named_outputs`."""
    return isinstance(out, torch.Tensor) or (
        isinstance(out, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in out))


def _key_text(key: Any) -> str:
    for attr in ("key", "idx", "name"):  # MappingKey, SequenceKey, GetAttrKey
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _type_name(value: Any) -> str:
    """``an int``, ``None``, ``a nets.Boxes``, ``an empty tuple``."""
    if value is None:
        return "None"
    kind = type(value)
    name = kind.__qualname__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"
    if isinstance(value, (tuple, list, dict)) and not value:
        name = f"empty {name}"
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _register_containers(out: Any, seen: set[int]) -> None:
    """Registers with pytree every dict subclass and dataclass type in `out` it does not
    know, so export and `named_outputs` flatten them alike."""
    if id(out) in seen or isinstance(out, torch.Tensor) or out is None:
        return
    seen.add(id(out))
    kind = type(out)
    known = kind in pytree.SUPPORTED_NODES or pytree.is_namedtuple_class(kind)
    if not known and isinstance(out, Mapping):
        _register_mapping(kind)
    elif not known and dataclasses.is_dataclass(out) and not isinstance(out, type):
        _register_dataclass(kind)
    if isinstance(out, Mapping):
        children: Any = list(out.values())
    elif isinstance(out, (tuple, list)):
        children = list(out)
    elif dataclasses.is_dataclass(out) and not isinstance(out, type):
        children = [getattr(out, f.name) for f in dataclasses.fields(out)]
    else:
        return
    for child in children:
        _register_containers(child, seen)


def _register_mapping(kind: type) -> None:
    def flatten(d: Mapping[Any, Any]) -> tuple[list[Any], Any]:
        return list(d.values()), list(d.keys())

    def flatten_with_keys(d: Mapping[Any, Any]) -> tuple[list[Any], Any]:
        return [(pytree.MappingKey(k), v) for k, v in d.items()], list(d.keys())

    def unflatten(values: Any, keys: Any) -> Any:
        return kind(zip(keys, values, strict=True))

    pytree.register_pytree_node(kind, flatten, unflatten, flatten_with_keys_fn=flatten_with_keys,
                                serialized_type_name=f"{kind.__module__}.{kind.__qualname__}")


def _register_dataclass(kind: type) -> None:
    names = [f.name for f in dataclasses.fields(kind)]

    def flatten(d: Any) -> tuple[list[Any], Any]:
        return [getattr(d, n) for n in names], names

    def flatten_with_keys(d: Any) -> tuple[list[Any], Any]:
        return [(pytree.GetAttrKey(n), getattr(d, n)) for n in names], names

    def unflatten(values: Any, keys: Any) -> Any:
        return kind(**dict(zip(keys, values, strict=True)))

    pytree.register_pytree_node(kind, flatten, unflatten, flatten_with_keys_fn=flatten_with_keys,
                                serialized_type_name=f"{kind.__module__}.{kind.__qualname__}")
