"""Deployed detection / generation / segmentation architectures for `benchmarks/zoo_floor.py`.

Written from the public configs of the libraries teams deploy from, at reduced width (random
weights): a YOLOv8-n style detector (C2f, SPPF, PAN neck, DFL-decoding head, channel-major
output), a YOLO11 style detector with C2PSA attention and an anchor-major (transposed) output,
a diffusers UNet2D (ResnetBlock2D with a timestep embedding, self-attention and Transformer2D
blocks, GroupNorm after each), a diffusers VAE (encoder and decoder, mid-block attention,
nearest upsampling), a timm ViT (conv patch embed, class token), a T2T-style ViT whose soft
split gathers patches by advanced indexing, and DeepLabV3 (ASPP) and FPN segmentation heads.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F
from zoo._common import ConvNormAct, finalize
from zoo.deploy import (
    C2PSA,
    SPPF,
    AttnBlock,
    C2f,
    ConvSiLU,
    Detect,
    IndexPatchEmbed,
    ResnetBlock2D,
    Transformer2D,
    timestep_embedding,
)
from zoo.wild import Attention

CALIB = (2, 3, 64, 64)


class YOLO(nn.Module):
    """Backbone P3–P5 (C2f, SPPF, optionally C2PSA), PAN neck, three-level detect head."""

    def __init__(self, w: int = 8, psa: bool = False, transpose_out: bool = False) -> None:
        super().__init__()
        self.stem = nn.Sequential(ConvSiLU(3, w, 3, 2), ConvSiLU(w, 2 * w, 3, 2),
                                  C2f(2 * w, 2 * w))
        self.b3 = nn.Sequential(ConvSiLU(2 * w, 4 * w, 3, 2), C2f(4 * w, 4 * w, 2))
        self.b4 = nn.Sequential(ConvSiLU(4 * w, 8 * w, 3, 2), C2f(8 * w, 8 * w, 2))
        b5: list[nn.Module] = [ConvSiLU(8 * w, 8 * w, 3, 2), C2f(8 * w, 8 * w), SPPF(8 * w, 8 * w)]
        if psa:
            b5.append(C2PSA(8 * w))
        self.b5 = nn.Sequential(*b5)
        self.up4, self.up3 = C2f(16 * w, 8 * w, shortcut=False), C2f(12 * w, 4 * w, shortcut=False)
        self.down3, self.n4 = ConvSiLU(4 * w, 4 * w, 3, 2), C2f(12 * w, 8 * w, shortcut=False)
        self.down4, self.n5 = ConvSiLU(8 * w, 8 * w, 3, 2), C2f(16 * w, 8 * w, shortcut=False)
        self.head = Detect((4 * w, 8 * w, 8 * w), (8, 16, 32), nc=8, reg_max=16,
                           transpose_out=transpose_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.b3(self.stem(x))
        p4 = self.b4(p3)
        p5 = self.b5(p4)
        h4 = self.up4(torch.cat((F.interpolate(p5, scale_factor=2.0, mode="nearest"), p4), 1))
        h3 = self.up3(torch.cat((F.interpolate(h4, scale_factor=2.0, mode="nearest"), p3), 1))
        n4 = self.n4(torch.cat((self.down3(h3), h4), 1))
        n5 = self.n5(torch.cat((self.down4(n4), p5), 1))
        return self.head([h3, n4, n5])


class UNet2D(nn.Module):
    """diffusers UNet2DModel / UNet2DConditionModel (self-attention only) at reduced width:
    down blocks of ResnetBlock2D (+ attention), a mid block (resnet, attention, resnet),
    up blocks concatenating the skips, GroupNorm → SiLU → conv out. The timestep is fixed."""

    def __init__(self, w: int = 16, temb: int = 32) -> None:
        super().__init__()
        self.register_buffer("t", torch.tensor([500.0]))
        self.temb_dim = w
        self.time = nn.Sequential(nn.Linear(w, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.conv_in = nn.Conv2d(3, w, 3, 1, 1)
        self.d1 = ResnetBlock2D(w, w, temb)
        self.down1 = nn.Conv2d(w, w, 3, 2, 1)
        self.d2, self.d2a = ResnetBlock2D(w, 2 * w, temb), Transformer2D(2 * w)
        self.down2 = nn.Conv2d(2 * w, 2 * w, 3, 2, 1)
        self.m1, self.ma = ResnetBlock2D(2 * w, 2 * w, temb), AttnBlock(2 * w)
        self.m2 = ResnetBlock2D(2 * w, 2 * w, temb)
        self.u2, self.u2a = ResnetBlock2D(4 * w, 2 * w, temb), Transformer2D(2 * w)
        self.up2 = nn.Conv2d(2 * w, 2 * w, 3, 1, 1)
        self.u1 = ResnetBlock2D(3 * w, w, temb)
        self.up1 = nn.Conv2d(2 * w, 2 * w, 3, 1, 1)
        self.u0 = ResnetBlock2D(2 * w, w, temb)
        self.norm, self.conv_out = nn.GroupNorm(4, w), nn.Conv2d(w, 3, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        emb = self.time(timestep_embedding(self.t.expand(x.shape[0]), self.temb_dim))
        h0 = self.conv_in(x)
        h1 = self.d1(h0, emb)
        h2 = self.d2a(self.d2(self.down1(h1), emb))
        h = self.m2(self.ma(self.m1(self.down2(h2), emb)), emb)
        h = self.up2(F.interpolate(h, scale_factor=2.0, mode="nearest"))
        h = self.u2a(self.u2(torch.cat((h, h2), 1), emb))
        h = self.up1(F.interpolate(h, scale_factor=2.0, mode="nearest"))
        h = self.u1(torch.cat((h, h1[:, :, :, :]), 1), emb)
        h = self.u0(torch.cat((h, h0), 1), emb)
        return self.conv_out(F.silu(self.norm(h)))


class VAE(nn.Module):
    """diffusers AutoencoderKL, encode → latent mean → decode: down blocks with asymmetric
    pad + stride-2 conv, mid blocks (resnet, attention, resnet), up blocks with nearest
    upsampling + conv, GroupNorm → SiLU → conv at both ends."""

    def __init__(self, w: int = 16, latent: int = 4) -> None:
        super().__init__()
        self.latent = latent
        self.e_in = nn.Conv2d(3, w, 3, 1, 1)
        self.e_blocks = nn.ModuleList([ResnetBlock2D(w, w), ResnetBlock2D(w, 2 * w)])
        self.e_down = nn.ModuleList([nn.Conv2d(w, w, 3, 2), nn.Conv2d(2 * w, 2 * w, 3, 2)])
        self.e_mid = nn.Sequential(ResnetBlock2D(2 * w, 2 * w), AttnBlock(2 * w),
                                   ResnetBlock2D(2 * w, 2 * w))
        self.e_norm, self.e_out = nn.GroupNorm(4, 2 * w), nn.Conv2d(2 * w, 2 * latent, 3, 1, 1)
        self.quant = nn.Conv2d(2 * latent, 2 * latent, 1)
        self.post_quant = nn.Conv2d(latent, latent, 1)
        self.d_in = nn.Conv2d(latent, 2 * w, 3, 1, 1)
        self.d_mid = nn.Sequential(ResnetBlock2D(2 * w, 2 * w), AttnBlock(2 * w),
                                   ResnetBlock2D(2 * w, 2 * w))
        self.d_blocks = nn.ModuleList([ResnetBlock2D(2 * w, 2 * w), ResnetBlock2D(2 * w, w)])
        self.d_up = nn.ModuleList([nn.Conv2d(2 * w, 2 * w, 3, 1, 1), nn.Conv2d(w, w, 3, 1, 1)])
        self.d_norm, self.d_out = nn.GroupNorm(4, w), nn.Conv2d(w, 3, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.e_in(x)
        for block, down in zip(self.e_blocks, self.e_down, strict=True):
            h = down(F.pad(block(h), (0, 1, 0, 1)))
        h = self.e_out(F.silu(self.e_norm(self.e_mid(h))))
        mean = self.quant(h)[:, :self.latent]
        h = self.d_mid(self.d_in(self.post_quant(mean)))
        for block, up in zip(self.d_blocks, self.d_up, strict=True):
            h = up(F.interpolate(block(h), scale_factor=2.0, mode="nearest"))
        return self.d_out(F.silu(self.d_norm(h)))


class ViT(nn.Module):
    """timm VisionTransformer: conv patch embed, class token, learned positions, pre-norm
    blocks, class-token head. ``index_embed``: a T2T-style soft split (overlapping patches
    gathered by advanced indexing) before the patch embed instead of a conv."""

    def __init__(self, dim: int = 32, depth: int = 2, patch: int = 8,
                 index_embed: bool = False, size: int = 64) -> None:
        super().__init__()
        self.index_embed = index_embed
        if index_embed:
            self.stem = nn.Sequential(ConvNormAct(3, 8, 3, 2), ConvNormAct(8, 8, 3, 2))
            self.embed: nn.Module = IndexPatchEmbed(8, dim, k=3, s=2)
            n = ((size // 4 - 3) // 2 + 1) ** 2
        else:
            self.embed = nn.Conv2d(3, dim, patch, patch)
            n = (size // patch) ** 2
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(nn.ModuleList([nn.LayerNorm(dim), Attention(dim),
                                                   nn.LayerNorm(dim), nn.Linear(dim, 2 * dim),
                                                   nn.Linear(2 * dim, dim)])
                                    for _ in range(depth))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.index_embed:
            t = self.embed(self.stem(x))
        else:
            t = self.embed(x).flatten(2).transpose(1, 2)
        t = torch.cat((self.cls.expand(t.shape[0], -1, -1), t), 1) + self.pos
        for n1, attn, n2, fc1, fc2 in self.blocks:  # type: ignore[misc]
            t = t + attn(n1(t))
            t = t + fc2(F.gelu(fc1(n2(t))))
        return self.head(self.norm(t)[:, 0])


class DeepLabV3(nn.Module):
    """A strided backbone, ASPP (1×1, three dilated 3×3, image pooling upsampled back),
    concatenated, projected, bilinear upsampling to the input size."""

    def __init__(self, w: int = 16, classes: int = 5) -> None:
        super().__init__()
        self.backbone = nn.Sequential(ConvNormAct(3, w, 3, 2), ConvNormAct(w, 2 * w, 3, 2),
                                      ConvNormAct(2 * w, 4 * w, 3, 2),
                                      ConvNormAct(4 * w, 4 * w, 3))
        c = 4 * w
        self.aspp = nn.ModuleList([ConvNormAct(c, w, 1)] + [
            nn.Sequential(nn.Conv2d(c, w, 3, padding=d, dilation=d, bias=False),
                          nn.BatchNorm2d(w), nn.ReLU()) for d in (2, 4, 6)])
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, w, 1, bias=False),
                                  nn.ReLU())
        self.project = ConvNormAct(5 * w, w, 1)
        self.cls = nn.Conv2d(w, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.backbone(x)
        parts = [m(f) for m in self.aspp]
        parts.append(F.interpolate(self.pool(f), size=f.shape[-2:], mode="bilinear",
                                   align_corners=False))
        y = self.cls(self.project(torch.cat(parts, 1)))
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


class FPNSeg(nn.Module):
    """UPerNet/FPN-style: lateral 1×1 convs, top-down nearest upsampling and adds, 3×3
    smoothing, all levels upsampled bilinearly and concatenated, a fuse conv, classes."""

    def __init__(self, w: int = 8, classes: int = 5) -> None:
        super().__init__()
        chans = (2 * w, 4 * w, 8 * w)
        self.stem = ConvNormAct(3, w, 3, 2)
        self.stages = nn.ModuleList([ConvNormAct(w, chans[0], 3, 2),
                                     ConvNormAct(chans[0], chans[1], 3, 2),
                                     ConvNormAct(chans[1], chans[2], 3, 2)])
        self.lateral = nn.ModuleList(nn.Conv2d(c, 2 * w, 1) for c in chans)
        self.smooth = nn.ModuleList(ConvNormAct(2 * w, 2 * w, 3) for _ in chans)
        self.fuse, self.cls = ConvNormAct(6 * w, 2 * w, 3), nn.Conv2d(2 * w, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats, h = [], self.stem(x)
        for stage in self.stages:
            h = stage(h)
            feats.append(h)
        lat = [m(f) for m, f in zip(self.lateral, feats, strict=True)]
        for i in range(len(lat) - 1, 0, -1):
            lat[i - 1] = lat[i - 1] + F.interpolate(lat[i], size=lat[i - 1].shape[-2:],
                                                    mode="nearest")
        outs = [m(f) for m, f in zip(self.smooth, lat, strict=True)]
        size = outs[0].shape[-2:]
        outs = [outs[0]] + [F.interpolate(o, size=size, mode="bilinear", align_corners=False)
                            for o in outs[1:]]
        return self.cls(self.fuse(torch.cat(outs, 1)))


MODELS: dict[str, Callable[[], nn.Module]] = {
    "yolov8n": lambda: finalize(YOLO(), CALIB),
    "yolo11n_psa": lambda: finalize(YOLO(psa=True, transpose_out=True), CALIB),
    "diffusers_unet": lambda: finalize(UNet2D()),
    "diffusers_vae": lambda: finalize(VAE()),
    "vit_tiny": lambda: finalize(ViT()),
    "t2t_vit_index": lambda: finalize(ViT(index_embed=True), CALIB),
    "deeplabv3": lambda: finalize(DeepLabV3(), CALIB),
    "fpn_seg": lambda: finalize(FPNSeg(), CALIB),
}
