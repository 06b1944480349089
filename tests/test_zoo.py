"""The model zoo (``model_cases/zoo``): tiny version of every factory, eager vs torch.export vs
the TVM Relax importer. Full-size configurations are checked outside the test suite."""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

MODEL_CASES = Path(__file__).parent.parent / "model_cases"
if str(MODEL_CASES) not in sys.path:
    sys.path.insert(0, str(MODEL_CASES))

import zoo  # noqa: E402

# factory ("family:name") → (tiny keyword arguments, input shape, expected output shape)
TINY: dict[str, tuple[dict[str, Any], tuple[int, ...], tuple[int, ...]]] = {
    "forum:conv3x3_s2": ({}, (1, 3, 32, 32), (1, 32, 16, 16)),
    "forum:two_conv_nhwc": ({"channels": 8}, (1, 16, 16, 8), (1, 16, 16, 8)),
    "resnet:resnet18": ({"num_classes": 10, "width": 8}, (1, 3, 32, 32), (1, 10)),
    "resnet:resnet50": ({"num_classes": 10, "width": 8}, (1, 3, 32, 32), (1, 10)),
    "fcn:fcn_small": ({"num_classes": 4, "width": 8}, (1, 3, 32, 32), (1, 4, 32, 32)),
    "mobilenet:mobilenet_v2": ({"width_mult": 0.25, "num_classes": 10}, (1, 3, 32, 32), (1, 10)),
    "mobilenet:mobilenet_v3_small": (
        {"num_classes": 10, "width_mult": 0.25, "last_channel": 32}, (1, 3, 32, 32), (1, 10)
    ),
    "efficientnet:efficientnet_b0_like": (
        {"num_classes": 10, "width_mult": 0.25, "depth_mult": 0.5}, (1, 3, 32, 32), (1, 10)
    ),
    "convnext:convnext_stage": (
        {"num_classes": 10, "depths": (1, 1, 2, 1), "dims": (8, 16, 32, 64)},
        (1, 3, 32, 32), (1, 10),
    ),
    "shufflenet:shufflenet_v2": (
        {"num_classes": 10, "repeats": (2, 2, 2), "channels": (8, 16, 32, 64, 128)},
        (1, 3, 32, 32), (1, 10),
    ),
    "densenet:densenet_small": (
        {"growth_rate": 4, "block_config": (2, 2, 2), "num_init_features": 8, "bn_size": 2,
         "num_classes": 10},
        (1, 3, 32, 32), (1, 10),
    ),
    "unet:unet_small": ({"base": 4, "num_classes": 2}, (1, 3, 32, 32), (1, 2, 32, 32)),
    "norms:groupnorm_net": (
        {"channels": 8, "groups": 4, "blocks_per_stage": 1}, (1, 3, 32, 32), (1, 3, 16, 16)
    ),
    "norms:pixelshuffle_net": ({"channels": 8}, (1, 3, 32, 32), (1, 3, 64, 64)),
    "mixed:mixed_layout_net": ({"channels": 8}, (1, 3, 32, 32), (1, 8, 16, 16)),
    "wild:split_attention": ({"width": 8}, (1, 3, 32, 32), (1, 10)),
    "wild:selective_kernel": ({"width": 8}, (1, 3, 32, 32), (1, 10)),
    "wild:global_context": ({"width": 8}, (1, 3, 32, 32), (1, 10)),
    "wild:eca": ({"width": 8}, (1, 3, 32, 32), (1, 10)),
    "wild:pools": ({"width": 8}, (1, 3, 32, 32), (1, 10)),
    "wild:scalar_affine": ({"width": 8}, (1, 3, 32, 32), (1, 10)),
    "wild:positional": ({"width": 8}, (1, 3, 32, 32), (1, 10)),
    "wild:mobilevit": ({"width": 8, "dim": 8}, (1, 3, 32, 32), (1, 10)),
    "wild:vgg_head": ({"width": 8}, (1, 3, 32, 32), (1, 10)),
    "deploy:norm_after_attention": ({"dim": 8}, (1, 3, 16, 16), (1, 3, 16, 16)),
    "deploy:dfl_head": ({}, (1, 3, 32, 32), (1, 7, 320)),
    "deploy:conv_attention": ({"dim": 8}, (1, 3, 32, 32), (1, 8, 16, 16)),
    "deploy:index_unfold": ({"dim": 8}, (1, 3, 32, 32), (1, 10)),
    "deploy:mid_block": ({"dim": 8}, (1, 8, 8, 8), (1, 8, 8, 8)),
    "conv_heads:conv_heads": ({"size": 16, "dim": 8, "heads": 2}, (1, 3, 16, 16),
                              (1, 8, 8, 8)),
    "filters:fir_resampler": ({"width": 4}, (1, 3, 16, 16), (1, 3, 15, 15)),
    "unet:segnet_small": ({"base": 4, "depth": 2}, (1, 3, 8, 8), (1, 5, 11, 11)),
}
NAMES = sorted(TINY)


def _factory(name: str) -> Callable[..., nn.Module]:
    family, attr = name.split(":")
    fn: Callable[..., nn.Module] = getattr(importlib.import_module(f"zoo.{family}"), attr)
    return fn


@functools.cache
def _built(name: str) -> tuple[nn.Module, torch.Tensor]:
    kwargs, in_shape, _ = TINY[name]
    torch.manual_seed(0)
    model = _factory(name)(**kwargs)
    return model, torch.rand(*in_shape)


@functools.cache
def _exported(name: str) -> torch.export.ExportedProgram:
    model, x = _built(name)
    return torch.export.export(model, (x,))


def test_every_factory_has_a_tiny_config() -> None:
    assert set(TINY) == set(zoo.FACTORIES)


@pytest.mark.parametrize("name", NAMES)
def test_factory_is_zero_argument_callable(name: str) -> None:
    params = inspect.signature(_factory(name)).parameters.values()
    assert all(p.default is not inspect.Parameter.empty for p in params)


@pytest.mark.parametrize("name", NAMES)
def test_factory_returns_eval_module(name: str) -> None:
    model, x = _built(name)
    assert isinstance(model, nn.Module)
    assert not any(m.training for m in model.modules())
    with torch.no_grad():
        y = model(x)
    assert tuple(y.shape) == TINY[name][2]
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("name", NAMES)
def test_export_matches_eager(name: str) -> None:
    model, x = _built(name)
    ep = _exported(name)
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_tvm_imports(name: str) -> None:
    import tvm
    from tvm.relax.frontend.torch import from_exported_program

    from cl_validate.compile.converters import custom_convert_map

    # with cl_validate's converters, as the pipeline imports (wild:positional needs them)
    mod = from_exported_program(_exported(name), keep_params_as_input=True,
                                unwrap_unit_return_tuple=True,
                                custom_convert_map=custom_convert_map())
    assert isinstance(mod, tvm.IRModule)
    assert "main" in [gv.name_hint for gv in mod.get_global_vars()]
