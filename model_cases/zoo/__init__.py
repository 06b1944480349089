"""Hand-written PyTorch model families for the channels-last (NHWC) case library.

Case files name a factory as ``model = "zoo.<family>:<factory>"`` (``model_cases/`` is on
``sys.path``). Every factory is callable with no arguments, returns an ``nn.Module`` in eval mode
and takes keyword-only size knobs so tests can build tiny versions. No factory seeds the RNG: the
caller (``cl_validate.compile.factory.build_model``) seeds torch before calling it.

Weights are random, but made *layout-observable*: BatchNorm running statistics are calibrated on
one random batch and every norm layer gets per-channel affine parameters (`zoo._common`), so a
norm or scale applied along the wrong axis after a layout rewrite changes the output instead of
hiding behind identity statistics, and activations keep a sane scale through deep stacks.

Families: forum, resnet, fcn, mobilenet, efficientnet, convnext, shufflenet, densenet, unet,
norms, mixed, wild (patterns from architectures in the wild: split attention, selective
kernels, global context, ECA, MobileViT, pooling with padding, scalar affine, VGG head,
positional encoding), deploy (patterns of the detection, diffusion and transformer models teams
deploy: GroupNorm after attention, the UNet mid-block on an NCHW input, DFL detect heads,
attention inside conv nets, unfold-style indexing), filters (FIR resampling and blurs that fold
the channels into the batch), conv_heads (BoTNet's heads cut from a conv's channels, CCNet's
criss-cross attention).
"""

from __future__ import annotations

FAMILIES: tuple[str, ...] = (
    "forum",
    "resnet",
    "fcn",
    "mobilenet",
    "efficientnet",
    "convnext",
    "shufflenet",
    "densenet",
    "unet",
    "norms",
    "mixed",
    "wild",
    "deploy",
    "filters",
    "conv_heads",
)

# Every factory, as case files name it (``model = "zoo.<entry>"``).
FACTORIES: tuple[str, ...] = (
    "forum:conv3x3_s2",
    "forum:two_conv_nhwc",
    "resnet:resnet18",
    "resnet:resnet50",
    "fcn:fcn_small",
    "mobilenet:mobilenet_v2",
    "mobilenet:mobilenet_v3_small",
    "efficientnet:efficientnet_b0_like",
    "convnext:convnext_stage",
    "shufflenet:shufflenet_v2",
    "densenet:densenet_small",
    "unet:unet_small",
    "unet:segnet_small",
    "norms:groupnorm_net",
    "norms:pixelshuffle_net",
    "mixed:mixed_layout_net",
    "wild:split_attention",
    "wild:selective_kernel",
    "wild:global_context",
    "wild:eca",
    "wild:mobilevit",
    "wild:pools",
    "wild:scalar_affine",
    "wild:vgg_head",
    "wild:positional",
    "deploy:norm_after_attention",
    "deploy:dfl_head",
    "deploy:conv_attention",
    "deploy:index_unfold",
    "deploy:mid_block",
    "filters:fir_resampler",
    "conv_heads:conv_heads",
)
