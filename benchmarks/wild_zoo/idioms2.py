"""Idioms of an eighth held-out set, written as their reference code writes them (timm, the
papers' repositories), small, random weights, each fed the zoo's 64×64 image: GFNet (the
paper's repository: a global filter, ``torch.fft.rfft2`` of the (B, a, b, C) token grid with
``norm="ortho"``, times ``torch.view_as_complex`` of a real parameter, ``torch.fft.irfft2``
back with ``s=(a, b)``), StyleGAN2 (rosinality's code: modulated convs with per-sample
weights, ``rsqrt`` demodulation, the batch folded into the groups of ``F.conv2d`` and of a
stride-2 ``F.conv_transpose2d`` on a ``view(1, B·C, H, W)`` input, the pure-PyTorch
``upfirdn2d`` (zero insertion by ``F.pad`` of a 6-d view, a flipped-kernel conv on one
channel), ``EqualLinear`` with ``weight * scale``, fused leaky ReLU × √2, a constant input
``repeat``-ed over the batch, ToRGB skips; fed by a small encoder to the latent, as pSp-style
encoders are), the CycleGAN ResNet generator (junyanz's code: ``ReflectionPad2d``,
``InstanceNorm2d`` without affine, stride-2 ``ConvTranspose2d`` with ``output_padding=1``,
``Tanh``), CenterNet (the paper's repository: a ResNet with ``ConvTranspose2d`` upsampling,
the decode's peak NMS as ``(F.max_pool2d(heat, 3, 1, 1) == heat).float()``, two
``torch.topk``-s, indices split by ``/ width`` and ``% width`` with ``.int().float()``,
``gather`` of ``permute(0, 2, 3, 1)``-ed head maps), FasterNet (the paper's repository:
partial convolution, by ``torch.split`` + ``cat`` in one stage and by the inference path's
``x.clone()`` with ``x[:, :c] = conv(x[:, :c])`` in the others), ShiftViT (the SPACH
repository: channel groups shifted by one pixel each way by slice assignment into
``torch.zeros_like``), CSWin (the paper's repository: cross-shaped stripe windows, half the
heads on horizontal stripes and half on vertical, by 6-d ``view``/``permute`` partitions,
LePE by a depthwise conv on the stripe-partitioned values), ResNeSt (the paper's repository:
split attention, ``torch.split`` over the radix, Python ``sum``, radix softmax by
``view(B, card, radix, -1).transpose(1, 2)``, a deep stem, average-pool downsamples),
RedNet (the involution repository: kernels generated per pixel, ``nn.Unfold``, a broadcast
product summed over the kernel axis), DPN (timm: dual paths passed as a tuple, ``cat`` of the
tuple at each block, the 1×1 output sliced into a residual part and a dense part),
TResNet (the paper's repository: space-to-depth by a 6-d ``view``/``permute``, anti-aliased
downsampling by ``F.pad(mode="reflect")`` + a fixed depthwise blur at stride 2, a
``view(N, C, -1).mean(-1)`` global pool), RAFT-small (the paper's repository: one encoder on
both frames ``cat``-ed along the batch and ``torch.split`` back, an all-pairs correlation
``matmul`` over the feature dim, an ``F.avg_pool2d`` pyramid of it, the lookup by
``F.grid_sample`` on ``torch.meshgrid`` + ``torch.linspace`` offsets, a ConvGRU, two
unrolled iterations, ``8 * F.interpolate(align_corners=True)``; the second frame is the input
``torch.roll``-ed by (1, 2) pixels), RetNet (torchscale: parallel retention on patch tokens, a
decay mask from ``torch.arange``, ``torch.tril``, ``masked_fill`` with ``inf``, ``exp``,
``nan_to_num``, ``sqrt`` of row sums, xpos-style rotation by ``stack((-x2, x1)).flatten``,
normalisation by ``detach().abs().sum().clamp``, RMS group norm and a swish gate), and Vision
Mamba (Vim with mamba's ``selective_scan_ref``: ``weight @ x.t()`` projections, a causal
depthwise ``Conv1d`` sliced to the sequence, softplus of ``dt``, ``exp`` of an ``einsum``, a
three-operand ``einsum``, the scan unrolled over 16 tokens, ``torch.stack``; bidirectional
by ``flip(-1)``).
Zero-initialised gains and biases are random here so every branch counts; norm affines are
randomized and BatchNorm calibrated on one batch (`finalize`); the floors come from the
exported graph (`graph_floor`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from zoo._common import finalize

from wild_zoo.families import Mlp, _ls  # the layer scale and Mlp the seventh set writes

CALIB = (2, 3, 64, 64)


# --------------------------------------------------------------------------------------------
# raoyongming/GFNet: global filter by rfft2 / irfft2
# --------------------------------------------------------------------------------------------
class GlobalFilter(nn.Module):
    def __init__(self, dim: int, h: int, w: int) -> None:
        super().__init__()
        self.complex_weight = nn.Parameter(torch.randn(h, w, dim, 2, dtype=torch.float32) * 0.02)
        self.h, self.w = h, w

    def forward(self, x: torch.Tensor, spatial_size: tuple[int, int] | None = None
                ) -> torch.Tensor:
        B, N, C = x.shape
        if spatial_size is None:
            a = b = int(math.sqrt(N))
        else:
            a, b = spatial_size
        x = x.view(B, a, b, C)
        x = x.to(torch.float32)
        x = torch.fft.rfft2(x, dim=(1, 2), norm="ortho")
        weight = torch.view_as_complex(self.complex_weight)
        x = x * weight
        x = torch.fft.irfft2(x, s=(a, b), dim=(1, 2), norm="ortho")
        return x.reshape(B, N, C)


class GFBlock(nn.Module):
    def __init__(self, dim: int, h: int, w: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.filter = GlobalFilter(dim, h=h, w=w)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm2(self.filter(self.norm1(x))))


class GFNet(nn.Module):
    """Rao et al.'s GFNet (the isotropic model): an 8×8/8 patch embedding, a learned position
    embedding, blocks of LayerNorm → global filter → LayerNorm → MLP with one residual, a
    LayerNorm and a token mean. The filter's size is fixed at construction (64×64 input)."""

    def __init__(self, img_size: int = 64, patch_size: int = 8, embed_dim: int = 32,
                 depth: int = 3, num_classes: int = 10) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, embed_dim, patch_size, patch_size)
        h = img_size // patch_size
        w = h // 2 + 1
        self.pos_embed = nn.Parameter(torch.randn(1, h * h, embed_dim) * 0.02)
        self.blocks = nn.Sequential(*[GFBlock(embed_dim, h, w) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = x + self.pos_embed
        x = self.blocks(x)
        x = self.norm(x).mean(1)
        return self.head(x)


# --------------------------------------------------------------------------------------------
# rosinality/stylegan2-pytorch: modulated convolution, upfirdn2d (native), ToRGB skips
# --------------------------------------------------------------------------------------------
def make_kernel(k: list[float]) -> torch.Tensor:
    kernel = torch.tensor(k, dtype=torch.float32)
    if kernel.ndim == 1:
        kernel = kernel[None, :] * kernel[:, None]
    return kernel / kernel.sum()


def upfirdn2d_native(x: torch.Tensor, kernel: torch.Tensor, up: int = 1, down: int = 1,
                     pad: tuple[int, int] = (0, 0)) -> torch.Tensor:
    """Upsample by zero insertion, pad, FIR-filter, downsample, in plain PyTorch (the same
    factors and pads on both axes)."""
    pad0, pad1 = pad
    _, channel, in_h, in_w = x.shape
    x = x.reshape(-1, in_h, in_w, 1)
    _, in_h, in_w, minor = x.shape
    kernel_h, kernel_w = kernel.shape
    out = x.view(-1, in_h, 1, in_w, 1, minor)
    out = F.pad(out, [0, 0, 0, up - 1, 0, 0, 0, up - 1])
    out = out.view(-1, in_h * up, in_w * up, minor)
    out = F.pad(out, [0, 0, max(pad0, 0), max(pad1, 0), max(pad0, 0), max(pad1, 0)])
    out = out[:, max(-pad0, 0):out.shape[1] - max(-pad1, 0),
              max(-pad0, 0):out.shape[2] - max(-pad1, 0), :]
    out = out.permute(0, 3, 1, 2)
    out = out.reshape([-1, 1, in_h * up + pad0 + pad1, in_w * up + pad0 + pad1])
    w = torch.flip(kernel, [0, 1]).view(1, 1, kernel_h, kernel_w)
    out = F.conv2d(out, w)
    out = out.reshape(-1, minor, in_h * up + pad0 + pad1 - kernel_h + 1,
                      in_w * up + pad0 + pad1 - kernel_w + 1)
    out = out.permute(0, 2, 3, 1)
    out = out[:, ::down, ::down, :]
    out_h = (in_h * up + pad0 + pad1 - kernel_h) // down + 1
    out_w = (in_w * up + pad0 + pad1 - kernel_w) // down + 1
    return out.view(-1, channel, out_h, out_w)


def fused_leaky_relu(x: torch.Tensor, bias: torch.Tensor, negative_slope: float = 0.2,
                     scale: float = 2 ** 0.5) -> torch.Tensor:
    rest_dim = [1] * (x.ndim - bias.ndim - 1)
    return F.leaky_relu(x + bias.view(1, bias.shape[0], *rest_dim),
                        negative_slope=negative_slope) * scale


class FusedLeakyReLU(nn.Module):
    def __init__(self, channel: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.randn(channel) * 0.1)  # zeros in the reference

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_leaky_relu(x, self.bias)


class PixelNorm(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-8)


class Upsample(nn.Module):
    def __init__(self, kernel: list[float], factor: int = 2) -> None:
        super().__init__()
        self.factor = factor
        k = make_kernel(kernel) * (factor ** 2)
        self.register_buffer("kernel", k)
        p = k.shape[0] - factor
        self.pad = ((p + 1) // 2 + factor - 1, p // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return upfirdn2d_native(x, self.kernel, up=self.factor, down=1, pad=self.pad)


class Blur(nn.Module):
    def __init__(self, kernel: list[float], pad: tuple[int, int], upsample_factor: int = 1
                 ) -> None:
        super().__init__()
        k = make_kernel(kernel)
        if upsample_factor > 1:
            k = k * (upsample_factor ** 2)
        self.register_buffer("kernel", k)
        self.pad = pad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return upfirdn2d_native(x, self.kernel, pad=self.pad)


class EqualLinear(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, bias_init: float = 0.0, lr_mul: float = 1.0,
                 activation: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_dim, in_dim).div_(lr_mul))
        self.bias = nn.Parameter(torch.full((out_dim,), float(bias_init)))
        self.activation = activation
        self.scale = (1 / math.sqrt(in_dim)) * lr_mul
        self.lr_mul = lr_mul

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.activation:
            out = F.linear(x, self.weight * self.scale)
            return fused_leaky_relu(out, self.bias * self.lr_mul)
        return F.linear(x, self.weight * self.scale, bias=self.bias * self.lr_mul)


class ModulatedConv2d(nn.Module):
    def __init__(self, in_channel: int, out_channel: int, kernel_size: int, style_dim: int,
                 demodulate: bool = True, upsample: bool = False,
                 blur_kernel: tuple[float, ...] = (1, 3, 3, 1)) -> None:
        super().__init__()
        self.eps = 1e-8
        self.kernel_size, self.in_channel, self.out_channel = kernel_size, in_channel, out_channel
        self.upsample = upsample
        if upsample:
            factor = 2
            p = (len(blur_kernel) - factor) - (kernel_size - 1)
            pad0 = (p + 1) // 2 + factor - 1
            pad1 = p // 2 + 1
            self.blur = Blur(list(blur_kernel), pad=(pad0, pad1), upsample_factor=factor)
        fan_in = in_channel * kernel_size ** 2
        self.scale = 1 / math.sqrt(fan_in)
        self.padding = kernel_size // 2
        self.weight = nn.Parameter(torch.randn(1, out_channel, in_channel, kernel_size,
                                               kernel_size))
        self.modulation = EqualLinear(style_dim, in_channel, bias_init=1)
        self.demodulate = demodulate

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        batch, in_channel, height, width = x.shape
        style = self.modulation(style).view(batch, 1, in_channel, 1, 1)
        weight = self.scale * self.weight * style
        if self.demodulate:
            demod = torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)
            weight = weight * demod.view(batch, self.out_channel, 1, 1, 1)
        weight = weight.view(batch * self.out_channel, in_channel, self.kernel_size,
                             self.kernel_size)
        if self.upsample:
            x = x.view(1, batch * in_channel, height, width)
            weight = weight.view(batch, self.out_channel, in_channel, self.kernel_size,
                                 self.kernel_size)
            weight = weight.transpose(1, 2).reshape(batch * in_channel, self.out_channel,
                                                    self.kernel_size, self.kernel_size)
            out = F.conv_transpose2d(x, weight, padding=0, stride=2, groups=batch)
            _, _, height, width = out.shape
            out = out.view(batch, self.out_channel, height, width)
            return self.blur(out)
        x = x.view(1, batch * in_channel, height, width)
        out = F.conv2d(x, weight, padding=self.padding, groups=batch)
        _, _, height, width = out.shape
        return out.view(batch, self.out_channel, height, width)


class NoiseInjection(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(1) * 0.5 + 0.1)  # zeros in the reference

    def forward(self, image: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return image + self.weight * noise


class ConstantInput(nn.Module):
    def __init__(self, channel: int, size: int = 4) -> None:
        super().__init__()
        self.input = nn.Parameter(torch.randn(1, channel, size, size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch = x.shape[0]
        return self.input.repeat(batch, 1, 1, 1)


class StyledConv(nn.Module):
    def __init__(self, in_channel: int, out_channel: int, kernel_size: int, style_dim: int,
                 upsample: bool = False) -> None:
        super().__init__()
        self.conv = ModulatedConv2d(in_channel, out_channel, kernel_size, style_dim,
                                    upsample=upsample)
        self.noise = NoiseInjection()
        self.activate = FusedLeakyReLU(out_channel)

    def forward(self, x: torch.Tensor, style: torch.Tensor, noise: torch.Tensor
                ) -> torch.Tensor:
        out = self.conv(x, style)
        out = self.noise(out, noise=noise)
        return self.activate(out)


class ToRGB(nn.Module):
    def __init__(self, in_channel: int, style_dim: int, upsample: bool = True) -> None:
        super().__init__()
        if upsample:
            self.upsample = Upsample([1, 3, 3, 1])
        self.conv = ModulatedConv2d(in_channel, 3, 1, style_dim, demodulate=False)
        self.bias = nn.Parameter(torch.randn(1, 3, 1, 1) * 0.1)  # zeros in the reference

    def forward(self, x: torch.Tensor, style: torch.Tensor, skip: torch.Tensor | None = None
                ) -> torch.Tensor:
        out = self.conv(x, style)
        out = out + self.bias
        if skip is not None:
            skip = self.upsample(skip)
            out = out + skip
        return out


class StyleGAN2(nn.Module):
    """Karras et al.'s StyleGAN2 generator as rosinality writes it (4×4 constant to 16×16,
    32 channels, style dim 32, two mapping layers with lr_mul 0.01, fixed noise buffers: the
    ``randomize_noise=False`` path), fed a latent from a small conv encoder of the image
    (strided convs, leaky ReLU, a spatial mean, an ``EqualLinear``), as pSp-style encoders
    feed it; the latent is broadcast over the layers by ``unsqueeze(1).repeat``."""

    def __init__(self, size: int = 16, style_dim: int = 32, n_mlp: int = 2,
                 channel: int = 32) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1), nn.LeakyReLU(0.2), nn.Conv2d(16, 32, 3, 2, 1),
            nn.LeakyReLU(0.2), nn.Conv2d(32, 32, 3, 2, 1), nn.LeakyReLU(0.2))
        self.to_latent = EqualLinear(32, style_dim)
        self.style = nn.Sequential(PixelNorm(), *[
            EqualLinear(style_dim, style_dim, lr_mul=0.01, activation=True)
            for _ in range(n_mlp)])
        self.input = ConstantInput(channel)
        self.conv1 = StyledConv(channel, channel, 3, style_dim)
        self.to_rgb1 = ToRGB(channel, style_dim, upsample=False)
        self.log_size = int(math.log(size, 2))
        self.num_layers = (self.log_size - 2) * 2 + 1
        self.convs = nn.ModuleList()
        self.to_rgbs = nn.ModuleList()
        for layer_idx in range(self.num_layers):
            res = (layer_idx + 5) // 2
            self.register_buffer(f"noise_{layer_idx}", torch.randn(1, 1, 2 ** res, 2 ** res))
        for _ in range(3, self.log_size + 1):
            self.convs.append(StyledConv(channel, channel, 3, style_dim, upsample=True))
            self.convs.append(StyledConv(channel, channel, 3, style_dim))
            self.to_rgbs.append(ToRGB(channel, style_dim))
        self.n_latent = self.log_size * 2 - 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.to_latent(self.encoder(x).mean((2, 3)))
        styles = [self.style(z)]
        noise = [getattr(self, f"noise_{i}") for i in range(self.num_layers)]
        latent = styles[0].unsqueeze(1).repeat(1, self.n_latent, 1)
        out = self.input(latent)
        out = self.conv1(out, latent[:, 0], noise=noise[0])
        skip = self.to_rgb1(out, latent[:, 1])
        i = 1
        for conv1, conv2, noise1, noise2, to_rgb in zip(
                self.convs[::2], self.convs[1::2], noise[1::2], noise[2::2], self.to_rgbs,
                strict=True):
            out = conv1(out, latent[:, i], noise=noise1)
            out = conv2(out, latent[:, i + 1], noise=noise2)
            skip = to_rgb(out, latent[:, i + 2], skip)
            i += 2
        return skip


# --------------------------------------------------------------------------------------------
# junyanz/pytorch-CycleGAN-and-pix2pix: ResnetGenerator (reflection pads, InstanceNorm)
# --------------------------------------------------------------------------------------------
class ResnetBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv_block = nn.Sequential(
            nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, kernel_size=3, padding=0, bias=True),
            nn.InstanceNorm2d(dim), nn.ReLU(True),
            nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, kernel_size=3, padding=0, bias=True),
            nn.InstanceNorm2d(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv_block(x)


class CycleGANGenerator(nn.Module):
    """Zhu et al.'s CycleGAN ResnetGenerator: ``ReflectionPad2d(3)`` + 7×7 conv,
    ``InstanceNorm2d`` (affine=False, no running stats, so convs keep their bias), two
    stride-2 convs, reflection-padded residual blocks (3 here, 9 in the reference),
    two ``ConvTranspose2d(3, stride=2, padding=1, output_padding=1)``, a reflection-padded 7×7
    conv to RGB and ``Tanh``."""

    def __init__(self, input_nc: int = 3, output_nc: int = 3, ngf: int = 8,
                 n_blocks: int = 3) -> None:
        super().__init__()
        model: list[nn.Module] = [nn.ReflectionPad2d(3),
                                  nn.Conv2d(input_nc, ngf, kernel_size=7, padding=0, bias=True),
                                  nn.InstanceNorm2d(ngf), nn.ReLU(True)]
        n_downsampling = 2
        for i in range(n_downsampling):
            mult = 2 ** i
            model += [nn.Conv2d(ngf * mult, ngf * mult * 2, kernel_size=3, stride=2, padding=1,
                                bias=True),
                      nn.InstanceNorm2d(ngf * mult * 2), nn.ReLU(True)]
        mult = 2 ** n_downsampling
        model += [ResnetBlock(ngf * mult) for _ in range(n_blocks)]
        for i in range(n_downsampling):
            mult = 2 ** (n_downsampling - i)
            model += [nn.ConvTranspose2d(ngf * mult, int(ngf * mult / 2), kernel_size=3,
                                         stride=2, padding=1, output_padding=1, bias=True),
                      nn.InstanceNorm2d(int(ngf * mult / 2)), nn.ReLU(True)]
        model += [nn.ReflectionPad2d(3), nn.Conv2d(ngf, output_nc, kernel_size=7, padding=0),
                  nn.Tanh()]
        self.model = nn.Sequential(*model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


# --------------------------------------------------------------------------------------------
# xingyizhou/CenterNet: msra_resnet + ctdet_decode (max-pool peak NMS, topk, gather)
# --------------------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1,
                 downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            residual = self.downsample(x)
        out += residual
        return self.relu(out)


def _nms(heat: torch.Tensor, kernel: int = 3) -> torch.Tensor:
    pad = (kernel - 1) // 2
    hmax = F.max_pool2d(heat, (kernel, kernel), stride=1, padding=pad)
    keep = (hmax == heat).float()
    return heat * keep


def _gather_feat(feat: torch.Tensor, ind: torch.Tensor) -> torch.Tensor:
    dim = feat.size(2)
    ind = ind.unsqueeze(2).expand(ind.size(0), ind.size(1), dim)
    return feat.gather(1, ind)


def _transpose_and_gather_feat(feat: torch.Tensor, ind: torch.Tensor) -> torch.Tensor:
    feat = feat.permute(0, 2, 3, 1).contiguous()
    feat = feat.view(feat.size(0), -1, feat.size(3))
    return _gather_feat(feat, ind)


def _topk(scores: torch.Tensor, K: int) -> tuple[torch.Tensor, ...]:
    batch, cat, height, width = scores.size()
    topk_scores, topk_inds = torch.topk(scores.view(batch, cat, -1), K)
    topk_inds = topk_inds % (height * width)
    topk_ys = (topk_inds / width).int().float()
    topk_xs = (topk_inds % width).int().float()
    topk_score, topk_ind = torch.topk(topk_scores.view(batch, -1), K)
    topk_clses = (topk_ind / K).int()
    topk_inds = _gather_feat(topk_inds.view(batch, -1, 1), topk_ind).view(batch, K)
    topk_ys = _gather_feat(topk_ys.view(batch, -1, 1), topk_ind).view(batch, K)
    topk_xs = _gather_feat(topk_xs.view(batch, -1, 1), topk_ind).view(batch, K)
    return topk_score, topk_inds, topk_clses, topk_ys, topk_xs


def ctdet_decode(heat: torch.Tensor, wh: torch.Tensor, reg: torch.Tensor, K: int
                 ) -> torch.Tensor:
    batch = heat.size(0)
    heat = _nms(heat)
    scores, inds, clses, ys, xs = _topk(heat, K=K)
    reg = _transpose_and_gather_feat(reg, inds).view(batch, K, 2)
    xs = xs.view(batch, K, 1) + reg[:, :, 0:1]
    ys = ys.view(batch, K, 1) + reg[:, :, 1:2]
    wh = _transpose_and_gather_feat(wh, inds).view(batch, K, 2)
    clses = clses.view(batch, K, 1).float()
    scores = scores.view(batch, K, 1)
    bboxes = torch.cat([xs - wh[..., 0:1] / 2, ys - wh[..., 1:2] / 2,
                        xs + wh[..., 0:1] / 2, ys + wh[..., 1:2] / 2], dim=2)
    return torch.cat([bboxes, scores, clses], dim=2)


class CenterNet(nn.Module):
    """Zhou et al.'s CenterNet (ctdet): msra_resnet (a 7×7/2 stem, max pool, BasicBlock
    stages, three→two ``ConvTranspose2d(4, 2, 1)``-BN-ReLU upsamplings to stride 4), heads
    of 3×3 conv-ReLU-1×1 conv (heatmap bias −2.19, ``sigmoid_``), then ``ctdet_decode``:
    peaks kept by ``(F.max_pool2d(heat, 3, 1, 1) == heat).float()``, per-class then overall
    ``torch.topk`` (K = 10), ys/xs by ``(inds / width).int().float()`` and ``% width``, size
    and offset ``gather``-ed from ``permute(0, 2, 3, 1)``-ed maps, boxes ``cat``-ed with score
    and class."""

    def __init__(self, num_classes: int = 3, head_conv: int = 32, K: int = 10) -> None:
        super().__init__()
        self.K = K
        self.inplanes = 16
        self.conv1 = nn.Conv2d(3, 16, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(16, 1)
        self.layer2 = self._make_layer(32, 1, stride=2)
        self.layer3 = self._make_layer(64, 1, stride=2)
        layers: list[nn.Module] = []
        for planes in (32, 32):
            layers += [nn.ConvTranspose2d(self.inplanes, planes, kernel_size=4, stride=2,
                                          padding=1, output_padding=0, bias=False),
                       nn.BatchNorm2d(planes), nn.ReLU(inplace=True)]
            self.inplanes = planes
        self.deconv_layers = nn.Sequential(*layers)
        self.heads = {"hm": num_classes, "wh": 2, "reg": 2}
        for head, classes in self.heads.items():
            fc = nn.Sequential(nn.Conv2d(32, head_conv, kernel_size=3, padding=1, bias=True),
                               nn.ReLU(inplace=True),
                               nn.Conv2d(head_conv, classes, kernel_size=1, stride=1, padding=0))
            if "hm" in head:
                fc[-1].bias.data.fill_(-2.19)
            self.__setattr__(head, fc)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.deconv_layers(self.layer3(self.layer2(self.layer1(x))))
        ret = {head: self.__getattr__(head)(x) for head in self.heads}
        hm = ret["hm"].sigmoid_()
        return ctdet_decode(hm, ret["wh"], ret["reg"], K=self.K)


# --------------------------------------------------------------------------------------------
# JierunChen/FasterNet: partial convolution (split_cat and slicing forwards)
# --------------------------------------------------------------------------------------------
class PartialConv3(nn.Module):
    def __init__(self, dim: int, n_div: int, forward: str) -> None:
        super().__init__()
        self.dim_conv3 = dim // n_div
        self.dim_untouched = dim - self.dim_conv3
        self.partial_conv3 = nn.Conv2d(self.dim_conv3, self.dim_conv3, 3, 1, 1, bias=False)
        self.mode = forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "slicing":  # the reference's inference path
            x = x.clone()  # keep the input intact for the residual
            x[:, :self.dim_conv3, :, :] = self.partial_conv3(x[:, :self.dim_conv3, :, :])
            return x
        x1, x2 = torch.split(x, [self.dim_conv3, self.dim_untouched], dim=1)
        x1 = self.partial_conv3(x1)
        return torch.cat((x1, x2), 1)


class FasterMLPBlock(nn.Module):
    def __init__(self, dim: int, n_div: int, mlp_ratio: float, pconv_fw_type: str) -> None:
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.spatial_mixing = PartialConv3(dim, n_div, pconv_fw_type)
        self.mlp = nn.Sequential(nn.Conv2d(dim, hidden, 1, bias=False), nn.BatchNorm2d(hidden),
                                 nn.GELU(), nn.Conv2d(hidden, dim, 1, bias=False))
        self.layer_scale = _ls(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.spatial_mixing(x)
        return shortcut + self.layer_scale.unsqueeze(-1).unsqueeze(-1) * self.mlp(x)


class FasterNet(nn.Module):
    """Chen et al.'s FasterNet (T0-like): a 4×4/4 conv-BN patch embedding, stages of PConv
    (a 3×3 conv on the first quarter of the channels) + 1×1 conv-BN-GELU-1×1 MLP with a
    layer scale (the ``forward_layer_scale`` path), 2×2/2 conv-BN patch merging; the first
    stage's PConv by ``torch.split`` + ``cat`` (training path), the others by ``x.clone()``
    and slice assignment (the reference's inference path); a pooled 1×1 conv + GELU head,
    ``flatten`` and a Linear."""

    def __init__(self, embed_dim: int = 16, depths: tuple[int, ...] = (1, 2, 1),
                 n_div: int = 4, num_classes: int = 10, feature_dim: int = 128) -> None:
        super().__init__()
        self.patch_embed = nn.Sequential(nn.Conv2d(3, embed_dim, 4, 4, bias=False),
                                         nn.BatchNorm2d(embed_dim))
        stages: list[nn.Module] = []
        for i, depth in enumerate(depths):
            dim = embed_dim * 2 ** i
            mode = "split_cat" if i == 0 else "slicing"
            stages += [FasterMLPBlock(dim, n_div, 2.0, mode) for _ in range(depth)]
            if i < len(depths) - 1:
                stages.append(nn.Sequential(nn.Conv2d(dim, 2 * dim, 2, 2, bias=False),
                                            nn.BatchNorm2d(2 * dim)))
        self.stages = nn.Sequential(*stages)
        num_features = embed_dim * 2 ** (len(depths) - 1)
        self.avgpool_pre_head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Conv2d(num_features, feature_dim, 1, bias=False),
            nn.GELU())
        self.head = nn.Linear(feature_dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.patch_embed(x))
        x = self.avgpool_pre_head(x)
        return self.head(torch.flatten(x, 1))


# --------------------------------------------------------------------------------------------
# microsoft/SPACH: ShiftViT (zero-padded channel-group shifts by slice assignment)
# --------------------------------------------------------------------------------------------
class ShiftViTBlock(nn.Module):
    def __init__(self, dim: int, n_div: int = 12, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.n_div = n_div
        hidden = int(dim * mlp_ratio)
        self.norm2 = nn.BatchNorm2d(dim)
        self.mlp = nn.Sequential(nn.Conv2d(dim, hidden, 1), nn.GELU(), nn.Conv2d(hidden, dim, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.shift_feat(x, self.n_div)
        shortcut = x
        return shortcut + self.mlp(self.norm2(x))

    @staticmethod
    def shift_feat(x: torch.Tensor, n_div: int) -> torch.Tensor:
        C = x.shape[1]
        g = C // n_div
        out = torch.zeros_like(x)
        out[:, g * 0:g * 1, :, :-1] = x[:, g * 0:g * 1, :, 1:]  # left
        out[:, g * 1:g * 2, :, 1:] = x[:, g * 1:g * 2, :, :-1]  # right
        out[:, g * 2:g * 3, :-1, :] = x[:, g * 2:g * 3, 1:, :]  # up
        out[:, g * 3:g * 4, 1:, :] = x[:, g * 3:g * 4, :-1, :]  # down
        out[:, g * 4:, :, :] = x[:, g * 4:, :, :]  # no shift
        return out


class ShiftViT(nn.Module):
    """Wang et al.'s ShiftViT: a 4×4/4 conv-BN patch embedding, blocks whose attention is a
    parameter-free shift of four channel groups (1/12 each) by one pixel, written as slice
    assignments into ``torch.zeros_like``, then BN + 1×1 conv MLP residual; BN + 2×2/2 conv
    patch merging; BN, pool, Linear."""

    def __init__(self, embed_dim: int = 24, depths: tuple[int, ...] = (1, 2, 1),
                 num_classes: int = 10) -> None:
        super().__init__()
        self.patch_embed = nn.Sequential(nn.Conv2d(3, embed_dim, 4, 4), nn.BatchNorm2d(embed_dim))
        layers: list[nn.Module] = []
        for i, depth in enumerate(depths):
            dim = embed_dim * 2 ** i
            layers += [ShiftViTBlock(dim) for _ in range(depth)]
            if i < len(depths) - 1:
                layers += [nn.BatchNorm2d(dim), nn.Conv2d(dim, 2 * dim, 2, 2, bias=False)]
        self.layers = nn.Sequential(*layers)
        num_features = embed_dim * 2 ** (len(depths) - 1)
        self.norm = nn.BatchNorm2d(num_features)
        self.head = nn.Linear(num_features, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.layers(self.patch_embed(x)))
        x = F.adaptive_avg_pool2d(x, 1)
        return self.head(torch.flatten(x, 1))


# --------------------------------------------------------------------------------------------
# microsoft/CSWin-Transformer: cross-shaped stripe window attention with LePE
# --------------------------------------------------------------------------------------------
def img2windows(img: torch.Tensor, H_sp: int, W_sp: int) -> torch.Tensor:
    B, C, H, W = img.shape
    img_reshape = img.view(B, C, H // H_sp, H_sp, W // W_sp, W_sp)
    return img_reshape.permute(0, 2, 4, 3, 5, 1).contiguous().reshape(-1, H_sp * W_sp, C)


def windows2img(img_splits_hw: torch.Tensor, H_sp: int, W_sp: int, H: int, W: int
                ) -> torch.Tensor:
    B = int(img_splits_hw.shape[0] / (H * W / H_sp / W_sp))
    img = img_splits_hw.view(B, H // H_sp, W // W_sp, H_sp, W_sp, -1)
    return img.permute(0, 1, 3, 2, 4, 5).contiguous().view(B, H, W, -1)


class LePEAttention(nn.Module):
    def __init__(self, dim: int, resolution: int, idx: int, split_size: int,
                 num_heads: int) -> None:
        super().__init__()
        self.dim, self.resolution, self.num_heads = dim, resolution, num_heads
        self.scale = (dim // num_heads) ** -0.5
        if idx == -1:
            H_sp, W_sp = resolution, resolution
        elif idx == 0:
            H_sp, W_sp = resolution, split_size
        else:
            W_sp, H_sp = resolution, split_size
        self.H_sp, self.W_sp = H_sp, W_sp
        self.get_v = nn.Conv2d(dim, dim, kernel_size=3, stride=1, padding=1, groups=dim)

    def im2cswin(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        H = W = int(math.sqrt(N))
        x = x.transpose(-2, -1).contiguous().view(B, C, H, W)
        x = img2windows(x, self.H_sp, self.W_sp)
        return x.reshape(-1, self.H_sp * self.W_sp, self.num_heads, C // self.num_heads
                         ).permute(0, 2, 1, 3).contiguous()

    def get_lepe(self, x: torch.Tensor, func: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        B, N, C = x.shape
        H = W = int(math.sqrt(N))
        x = x.transpose(-2, -1).contiguous().view(B, C, H, W)
        H_sp, W_sp = self.H_sp, self.W_sp
        x = x.view(B, C, H // H_sp, H_sp, W // W_sp, W_sp)
        x = x.permute(0, 2, 4, 1, 3, 5).contiguous().reshape(-1, C, H_sp, W_sp)
        lepe = func(x)
        lepe = lepe.reshape(-1, self.num_heads, C // self.num_heads, H_sp * W_sp
                            ).permute(0, 1, 3, 2).contiguous()
        x = x.reshape(-1, self.num_heads, C // self.num_heads, H_sp * W_sp
                      ).permute(0, 1, 3, 2).contiguous()
        return x, lepe

    def forward(self, qkv: torch.Tensor) -> torch.Tensor:
        q, k, v = qkv[0], qkv[1], qkv[2]
        H = W = self.resolution
        B, _, C = q.shape
        q = self.im2cswin(q)
        k = self.im2cswin(k)
        v, lepe = self.get_lepe(v, self.get_v)
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        attn = F.softmax(attn, dim=-1, dtype=attn.dtype)
        x = (attn @ v) + lepe
        x = x.transpose(1, 2).reshape(-1, self.H_sp * self.W_sp, C)
        return windows2img(x, self.H_sp, self.W_sp, H, W).view(B, -1, C)


class CSWinBlock(nn.Module):
    def __init__(self, dim: int, reso: int, num_heads: int, split_size: int,
                 last_stage: bool = False) -> None:
        super().__init__()
        self.dim, self.patches_resolution = dim, reso
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.norm1 = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, dim)
        self.branch_num = 1 if last_stage or reso == split_size else 2
        if self.branch_num == 1:
            self.attns = nn.ModuleList([LePEAttention(dim, reso, -1, split_size, num_heads)])
        else:
            self.attns = nn.ModuleList([LePEAttention(dim // 2, reso, i, split_size,
                                                      num_heads // 2) for i in range(2)])
        self.mlp = Mlp(dim, 4 * dim)
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, _, C = x.shape
        img = self.norm1(x)
        qkv = self.qkv(img).reshape(B, -1, 3, C).permute(2, 0, 1, 3)
        if self.branch_num == 2:
            x1 = self.attns[0](qkv[:, :, :, :C // 2])
            x2 = self.attns[1](qkv[:, :, :, C // 2:])
            attened_x = torch.cat([x1, x2], dim=2)
        else:
            attened_x = self.attns[0](qkv)
        x = x + self.proj(attened_x)
        return x + self.mlp(self.norm2(x))


class MergeBlock(nn.Module):
    def __init__(self, dim: int, dim_out: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(dim, dim_out, 3, 2, 1)
        self.norm = nn.LayerNorm(dim_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, new_HW, C = x.shape
        H = W = int(math.sqrt(new_HW))
        x = x.transpose(-2, -1).contiguous().view(B, C, H, W)
        x = self.conv(x)
        B, C = x.shape[:2]
        x = x.view(B, C, -1).transpose(-2, -1).contiguous()
        return self.norm(x)


class CSWin(nn.Module):
    """Dong et al.'s CSWin Transformer: a 7×7/4 conv embedding, tokens by
    ``view``/``transpose`` (the reference's einops Rearrange) and LayerNorm, blocks whose
    qkv is split by channels into horizontal-stripe and vertical-stripe heads (stripe width
    2 on 16×16, 4 on 8×8, the whole map in the last stage), LePE from a depthwise 3×3 conv on
    the partitioned values, 3×3/2 conv merges, LayerNorm, token mean, Linear. The map size
    is fixed at construction (64×64 input)."""

    def __init__(self, img_size: int = 64, dims: tuple[int, ...] = (16, 32, 64),
                 heads: tuple[int, ...] = (2, 4, 8), splits: tuple[int, ...] = (2, 4, 4),
                 num_classes: int = 10) -> None:
        super().__init__()
        self.stem_conv = nn.Conv2d(3, dims[0], 7, 4, 2)
        self.stem_norm = nn.LayerNorm(dims[0])
        reso = img_size // 4
        self.stages = nn.ModuleList()
        for i, (d, h, s) in enumerate(zip(dims, heads, splits, strict=True)):
            blocks: list[nn.Module] = []
            if i > 0:
                blocks.append(MergeBlock(dims[i - 1], d))
                reso //= 2
            blocks.append(CSWinBlock(d, reso, h, s, last_stage=i == len(dims) - 1))
            self.stages.append(nn.Sequential(*blocks))
        self.norm = nn.LayerNorm(dims[-1])
        self.head = nn.Linear(dims[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem_conv(x)
        B, C, H, W = x.shape
        x = self.stem_norm(x.view(B, C, H * W).transpose(1, 2))
        for stage in self.stages:
            x = stage(x)
        x = self.norm(x)
        return self.head(torch.mean(x, dim=1))


# --------------------------------------------------------------------------------------------
# zhanghang1989/ResNeSt: split attention (radix softmax)
# --------------------------------------------------------------------------------------------
class RSoftMax(nn.Module):
    def __init__(self, radix: int, cardinality: int) -> None:
        super().__init__()
        self.radix, self.cardinality = radix, cardinality

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch = x.size(0)
        if self.radix > 1:
            x = x.view(batch, self.cardinality, self.radix, -1).transpose(1, 2)
            x = F.softmax(x, dim=1)
            return x.reshape(batch, -1)
        return torch.sigmoid(x)


class SplAtConv2d(nn.Module):
    def __init__(self, in_channels: int, channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0, groups: int = 1, radix: int = 2,
                 reduction_factor: int = 4) -> None:
        super().__init__()
        inter_channels = max(in_channels * radix // reduction_factor, 32)
        self.radix, self.cardinality, self.channels = radix, groups, channels
        self.conv = nn.Conv2d(in_channels, channels * radix, kernel_size, stride, padding,
                              groups=groups * radix, bias=False)
        self.bn0 = nn.BatchNorm2d(channels * radix)
        self.relu = nn.ReLU(inplace=True)
        self.fc1 = nn.Conv2d(channels, inter_channels, 1, groups=self.cardinality)
        self.bn1 = nn.BatchNorm2d(inter_channels)
        self.fc2 = nn.Conv2d(inter_channels, channels * radix, 1, groups=self.cardinality)
        self.rsoftmax = RSoftMax(radix, groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn0(self.conv(x)))
        batch, rchannel = x.shape[:2]
        if self.radix > 1:
            splited = torch.split(x, rchannel // self.radix, dim=1)
            gap = sum(splited)
        else:
            gap = x
        gap = F.adaptive_avg_pool2d(gap, 1)
        gap = self.relu(self.bn1(self.fc1(gap)))
        atten = self.fc2(gap)
        atten = self.rsoftmax(atten).view(batch, -1, 1, 1)
        if self.radix > 1:
            attens = torch.split(atten, rchannel // self.radix, dim=1)
            out = sum([att * split for (att, split) in zip(attens, splited, strict=True)])
        else:
            out = atten * x
        return out.contiguous()


class ResNeStBottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1,
                 downsample: nn.Module | None = None, radix: int = 2, cardinality: int = 2,
                 bottleneck_width: int = 32) -> None:
        super().__init__()
        group_width = int(planes * (bottleneck_width / 64.0)) * cardinality
        self.conv1 = nn.Conv2d(inplanes, group_width, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(group_width)
        self.avd = stride > 1
        if self.avd:
            self.avd_layer = nn.AvgPool2d(3, stride, padding=1)
        self.conv2 = SplAtConv2d(group_width, group_width, kernel_size=3, stride=1, padding=1,
                                 groups=cardinality, radix=radix)
        self.conv3 = nn.Conv2d(group_width, planes * 4, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.conv2(out)
        if self.avd:
            out = self.avd_layer(out)
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            residual = self.downsample(x)
        out += residual
        return self.relu(out)


class ResNeSt(nn.Module):
    """Zhang et al.'s ResNeSt (the 2s2x config: radix 2, cardinality 2): a deep stem of three
    3×3 convs, max pool, bottlenecks whose 3×3 is split attention (a grouped conv to
    radix × channels, ``torch.split`` over the radix and Python ``sum``, pool, grouped 1×1s,
    the radix softmax by ``view(B, card, radix, -1).transpose(1, 2)``, ``split`` of the
    attention and ``sum`` of products), average-pool "avd" after it when strided,
    ``avg_down`` shortcuts (``AvgPool2d(ceil_mode=True, count_include_pad=False)`` + 1×1),
    pool, Linear."""

    def __init__(self, stem_width: int = 8, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Sequential(
            nn.Conv2d(3, stem_width, 3, 2, 1, bias=False), nn.BatchNorm2d(stem_width),
            nn.ReLU(inplace=True),
            nn.Conv2d(stem_width, stem_width, 3, 1, 1, bias=False), nn.BatchNorm2d(stem_width),
            nn.ReLU(inplace=True),
            nn.Conv2d(stem_width, stem_width * 2, 3, 1, 1, bias=False))
        self.bn1 = nn.BatchNorm2d(stem_width * 2)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.inplanes = stem_width * 2
        self.layer1 = self._make_layer(8, 1, stride=1)
        self.layer2 = self._make_layer(16, 2, stride=2)
        self.fc = nn.Linear(self.inplanes, num_classes)

    def _make_layer(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * 4:
            down: list[nn.Module] = []
            if stride != 1:
                down.append(nn.AvgPool2d(kernel_size=stride, stride=stride, ceil_mode=True,
                                         count_include_pad=False))
            down += [nn.Conv2d(self.inplanes, planes * 4, kernel_size=1, stride=1, bias=False),
                     nn.BatchNorm2d(planes * 4)]
            downsample = nn.Sequential(*down)
        layers = [ResNeStBottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * 4
        layers += [ResNeStBottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


# --------------------------------------------------------------------------------------------
# d-li14/involution: RedNet (per-pixel generated kernels over nn.Unfold patches)
# --------------------------------------------------------------------------------------------
class Involution(nn.Module):
    def __init__(self, channels: int, kernel_size: int, stride: int) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.channels = kernel_size, stride, channels
        reduction_ratio = 4
        self.group_channels = 8
        self.groups = channels // self.group_channels
        self.conv1 = nn.Sequential(
            nn.Conv2d(channels, channels // reduction_ratio, 1, bias=False),
            nn.BatchNorm2d(channels // reduction_ratio), nn.ReLU(inplace=True))
        self.conv2 = nn.Conv2d(channels // reduction_ratio, kernel_size ** 2 * self.groups, 1)
        if stride > 1:
            self.avgpool = nn.AvgPool2d(stride, stride)
        self.unfold = nn.Unfold(kernel_size, 1, (kernel_size - 1) // 2, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.conv2(self.conv1(x if self.stride == 1 else self.avgpool(x)))
        b, _, h, w = weight.shape
        weight = weight.view(b, self.groups, self.kernel_size ** 2, h, w).unsqueeze(2)
        out = self.unfold(x).view(b, self.groups, self.group_channels, self.kernel_size ** 2,
                                  h, w)
        return (weight * out).sum(dim=3).view(b, self.channels, h, w)


class RedNetBottleneck(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        mid = out_channels // 4
        self.conv1 = nn.Conv2d(in_channels, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = Involution(mid, 7, stride)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False),
                nn.BatchNorm2d(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class RedNet(nn.Module):
    """Li et al.'s RedNet: a stem of a 3×3/2 conv-BN-ReLU, a 3×3 involution, BN-ReLU, a
    1×1 conv-BN-ReLU and max pool, bottlenecks whose 3×3 is a 7×7 involution (kernels from
    1×1 conv-BN-ReLU-1×1 on the (average-pooled when strided) input, ``view``-ed per group
    and ``unsqueeze``-d, times ``nn.Unfold(7, 1, 3, stride)`` patches ``view``-ed to 6-d,
    ``sum(dim=3)``), pool, Linear; 8 channels per involution group (16 in the reference)."""

    def __init__(self, stem: int = 16, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, stem // 2, 3, 2, 1, bias=False), nn.BatchNorm2d(stem // 2),
            nn.ReLU(inplace=True), Involution(stem // 2, 3, 1), nn.BatchNorm2d(stem // 2),
            nn.ReLU(inplace=True), nn.Conv2d(stem // 2, stem, 1, bias=False),
            nn.BatchNorm2d(stem), nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layers = nn.Sequential(RedNetBottleneck(stem, 64), RedNetBottleneck(64, 64),
                                    RedNetBottleneck(64, 128, stride=2))
        self.fc = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.maxpool(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# --------------------------------------------------------------------------------------------
# timm: DPN (dual path blocks passing a (residual, dense) tuple)
# --------------------------------------------------------------------------------------------
class CatBnAct(nn.Module):
    def __init__(self, in_chs: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(in_chs, eps=0.001)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        if isinstance(x, tuple):
            x = torch.cat(x, dim=1)
        return self.act(self.bn(x))


class BnActConv2d(nn.Module):
    def __init__(self, in_chs: int, out_chs: int, kernel_size: int, stride: int,
                 groups: int = 1) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(in_chs, eps=0.001)
        self.act = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(in_chs, out_chs, kernel_size, stride, kernel_size // 2,
                              groups=groups, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.act(self.bn(x)))


class DualPathBlock(nn.Module):
    def __init__(self, in_chs: int, num_1x1_a: int, num_3x3_b: int, num_1x1_c: int, inc: int,
                 groups: int, block_type: str = "normal", b: bool = False) -> None:
        super().__init__()
        self.num_1x1_c, self.inc, self.b = num_1x1_c, inc, b
        if block_type == "proj":
            self.key_stride, self.has_proj = 1, True
        elif block_type == "down":
            self.key_stride, self.has_proj = 2, True
        else:
            self.key_stride, self.has_proj = 1, False
        self.c1x1_w_s1: nn.Module | None = None
        self.c1x1_w_s2: nn.Module | None = None
        if self.has_proj:
            if self.key_stride == 2:
                self.c1x1_w_s2 = BnActConv2d(in_chs, num_1x1_c + 2 * inc, 1, 2)
            else:
                self.c1x1_w_s1 = BnActConv2d(in_chs, num_1x1_c + 2 * inc, 1, 1)
        self.c1x1_a = BnActConv2d(in_chs, num_1x1_a, 1, 1)
        self.c3x3_b = BnActConv2d(num_1x1_a, num_3x3_b, 3, self.key_stride, groups=groups)
        if b:
            self.c1x1_c = CatBnAct(num_3x3_b)
            self.c1x1_c1 = nn.Conv2d(num_3x3_b, num_1x1_c, 1, bias=False)
            self.c1x1_c2 = nn.Conv2d(num_3x3_b, inc, 1, bias=False)
        else:
            self.c1x1_c = BnActConv2d(num_3x3_b, num_1x1_c + inc, 1, 1)

    def forward(self, x: torch.Tensor | tuple[torch.Tensor, torch.Tensor]
                ) -> tuple[torch.Tensor, torch.Tensor]:
        x_in = torch.cat(x, dim=1) if isinstance(x, tuple) else x
        if self.c1x1_w_s1 is None and self.c1x1_w_s2 is None:
            x_s1, x_s2 = x[0], x[1]
        else:
            if self.c1x1_w_s1 is not None:
                x_s = self.c1x1_w_s1(x_in)
            else:
                x_s = self.c1x1_w_s2(x_in)
            x_s1 = x_s[:, :self.num_1x1_c, :, :]
            x_s2 = x_s[:, self.num_1x1_c:, :, :]
        x_in = self.c1x1_a(x_in)
        x_in = self.c3x3_b(x_in)
        if self.b:
            x_in = self.c1x1_c(x_in)
            out1 = self.c1x1_c1(x_in)
            out2 = self.c1x1_c2(x_in)
        else:
            x_in = self.c1x1_c(x_in)
            out1 = x_in[:, :self.num_1x1_c, :, :]
            out2 = x_in[:, self.num_1x1_c:, :, :]
        resid = x_s1 + out1
        dense = torch.cat([x_s2, out2], dim=1)
        return resid, dense


class DPN(nn.Module):
    """Chen et al.'s DPN (timm, DPN-68-like, b=True in the last stage): a 3×3/2 conv-BN-ReLU
    stem and max pool, dual path blocks taking and returning a (residual, dense) tuple
    (``cat`` of the tuple in, a projection 1×1 sliced ``[:, :c]`` / ``[:, c:]`` on the first
    block of a stage, pre-activation BN-ReLU-conv 1×1 → grouped 3×3 → 1×1 whose output is
    sliced into the residual ``+`` and the dense ``cat``), a ``CatBnAct`` exit, pool, a 1×1
    conv classifier, ``flatten``."""

    def __init__(self, num_init_features: int = 16, k_r: int = 16, groups: int = 4,
                 num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, num_init_features, 3, 2, 1, bias=False),
                                  nn.BatchNorm2d(num_init_features, eps=0.001),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        blocks: list[nn.Module] = []
        in_chs = num_init_features
        for i, (bw, inc, n) in enumerate(((32, 8, 2), (64, 16, 2))):
            r = k_r * (i + 1)
            b = i == 1
            blocks.append(DualPathBlock(in_chs, r, r, bw, inc, groups,
                                        "proj" if i == 0 else "down", b))
            in_chs = bw + 3 * inc
            for _ in range(2, n + 1):
                blocks.append(DualPathBlock(in_chs, r, r, bw, inc, groups, "normal", b))
                in_chs += inc
        self.blocks = nn.Sequential(*blocks)
        self.conv5_bn_ac = CatBnAct(in_chs)
        self.classifier = nn.Conv2d(in_chs, num_classes, kernel_size=1, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv5_bn_ac(self.blocks(self.stem(x)))
        x = F.adaptive_avg_pool2d(x, 1)
        return self.classifier(x).flatten(1)


# --------------------------------------------------------------------------------------------
# Alibaba-MIIL/TResNet: space-to-depth stem, anti-aliased (blur) downsampling
# --------------------------------------------------------------------------------------------
class SpaceToDepth(nn.Module):
    def __init__(self, block_size: int = 4) -> None:
        super().__init__()
        self.bs = block_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N, C, H, W = x.size()
        x = x.view(N, C, H // self.bs, self.bs, W // self.bs, self.bs)
        x = x.permute(0, 3, 5, 1, 2, 4).contiguous()
        return x.view(N, C * (self.bs ** 2), H // self.bs, W // self.bs)


class AntiAliasDownsample(nn.Module):
    def __init__(self, channels: int, filt_size: int = 3, stride: int = 2) -> None:
        super().__init__()
        self.stride = stride
        a = torch.tensor([1.0, 2.0, 1.0])
        filt = a[:, None] * a[None, :]
        filt = filt / torch.sum(filt)
        self.register_buffer("filt", filt[None, None, :, :].repeat((channels, 1, 1, 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        input_pad = F.pad(x, (1, 1, 1, 1), "reflect")
        return F.conv2d(input_pad, self.filt, stride=self.stride, padding=0, groups=x.shape[1])


class FastAvgPool2d(nn.Module):
    def __init__(self, flatten: bool = False) -> None:
        super().__init__()
        self.flatten = flatten

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        in_size = x.size()
        if self.flatten:
            return x.view((in_size[0], in_size[1], -1)).mean(dim=2)
        return x.view(x.size(0), x.size(1), -1).mean(-1).view(x.size(0), x.size(1), 1, 1)


class TResNetSE(nn.Module):
    def __init__(self, channels: int, reduction_channels: int) -> None:
        super().__init__()
        self.avg_pool = FastAvgPool2d()
        self.fc1 = nn.Conv2d(channels, reduction_channels, kernel_size=1, padding=0, bias=True)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(reduction_channels, channels, kernel_size=1, padding=0, bias=True)
        self.activation = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_se = self.avg_pool(x)
        x_se2 = self.fc2(self.relu(self.fc1(x_se)))
        return x * self.activation(x_se2)


def conv2d_abn(ni: int, nf: int, stride: int, activation: str = "leaky_relu",
               kernel_size: int = 3, act_param: float = 1e-2, groups: int = 1
               ) -> nn.Sequential:
    """``InPlaceABN`` as timm writes it without the CUDA extension: BatchNorm2d + activation."""
    act: nn.Module = (nn.LeakyReLU(act_param) if activation == "leaky_relu" else
                      nn.ReLU() if activation == "relu" else nn.Identity())
    return nn.Sequential(nn.Conv2d(ni, nf, kernel_size=kernel_size, stride=stride,
                                   padding=kernel_size // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(nf), act)


class TResNetBasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1,
                 downsample: nn.Module | None = None, use_se: bool = True) -> None:
        super().__init__()
        if stride == 1:
            self.conv1 = conv2d_abn(inplanes, planes, stride=1, act_param=1e-3)
        else:
            self.conv1 = nn.Sequential(conv2d_abn(inplanes, planes, stride=1, act_param=1e-3),
                                       AntiAliasDownsample(planes, filt_size=3, stride=2))
        self.conv2 = conv2d_abn(planes, planes, stride=1, activation="identity")
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        reduce_layer_planes = max(planes * self.expansion // 4, 64)
        self.se = TResNetSE(planes * self.expansion, reduce_layer_planes) if use_se else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = self.downsample(x) if self.downsample is not None else x
        out = self.conv2(self.conv1(x))
        if self.se is not None:
            out = self.se(out)
        out += residual
        return self.relu(out)


class TResNetBottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1,
                 downsample: nn.Module | None = None, use_se: bool = True) -> None:
        super().__init__()
        self.conv1 = conv2d_abn(inplanes, planes, kernel_size=1, stride=1, act_param=1e-3)
        if stride == 1:
            self.conv2 = conv2d_abn(planes, planes, kernel_size=3, stride=1, act_param=1e-3)
        else:
            self.conv2 = nn.Sequential(
                conv2d_abn(planes, planes, kernel_size=3, stride=1, act_param=1e-3),
                AntiAliasDownsample(planes, filt_size=3, stride=2))
        reduce_layer_planes = max(planes * self.expansion // 8, 64)
        self.se = TResNetSE(planes, reduce_layer_planes) if use_se else None
        self.conv3 = conv2d_abn(planes, planes * self.expansion, kernel_size=1, stride=1,
                                activation="identity")
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = self.downsample(x) if self.downsample is not None else x
        out = self.conv2(self.conv1(x))
        if self.se is not None:
            out = self.se(out)
        out = self.conv3(out)
        out = out + residual
        return self.relu(out)


class TResNet(nn.Module):
    """Ridnik et al.'s TResNet: ``SpaceToDepth`` (a 6-d ``view``,
    ``permute(0, 3, 5, 1, 2, 4)``, ``view`` to 48 channels at /4) then a 3×3 conv,
    BasicBlock and Bottleneck stages with SE (a ``view(N, C, -1).mean(-1)`` pool), strided
    convs replaced by a stride-1 conv + anti-alias blur (``F.pad(mode="reflect")`` + a
    fixed 3×3 depthwise ``F.conv2d`` at stride 2), ``AvgPool2d(ceil_mode=True,
    count_include_pad=False)`` + 1×1 shortcuts, InPlaceABN as BN + LeakyReLU(1e-3), a
    flattening fast pool and a Linear."""

    def __init__(self, width: int = 16, num_classes: int = 10) -> None:
        super().__init__()
        self.inplanes = width
        self.planes = width
        self.body = nn.Sequential(
            SpaceToDepth(), conv2d_abn(3 * 16, width, stride=1, kernel_size=3),
            self._make_layer(TResNetBasicBlock, width, 1, stride=1),
            self._make_layer(TResNetBasicBlock, width * 2, 1, stride=2),
            self._make_layer(TResNetBottleneck, width * 2, 1, stride=2))
        self.global_pool = FastAvgPool2d(flatten=True)
        self.fc = nn.Linear(self.inplanes, num_classes)

    def _make_layer(self, block: type, planes: int, blocks: int, stride: int = 1,
                    use_se: bool = True) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            layers: list[nn.Module] = []
            if stride == 2:
                layers.append(nn.AvgPool2d(kernel_size=2, stride=2, ceil_mode=True,
                                           count_include_pad=False))
            layers.append(conv2d_abn(self.inplanes, planes * block.expansion, kernel_size=1,
                                     stride=1, activation="identity"))
            downsample = nn.Sequential(*layers)
        out = [block(self.inplanes, planes, stride=stride, downsample=downsample,
                     use_se=use_se)]
        self.inplanes = planes * block.expansion
        out += [block(self.inplanes, planes, use_se=use_se) for _ in range(1, blocks)]
        return nn.Sequential(*out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.global_pool(self.body(x)))


# --------------------------------------------------------------------------------------------
# princeton-vl/RAFT: RAFT-small (all-pairs correlation, grid_sample lookup, ConvGRU)
# --------------------------------------------------------------------------------------------
def bilinear_sampler(img: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
    H, W = img.shape[-2:]
    xgrid, ygrid = coords.split([1, 1], dim=-1)
    xgrid = 2 * xgrid / (W - 1) - 1
    ygrid = 2 * ygrid / (H - 1) - 1
    grid = torch.cat([xgrid, ygrid], dim=-1)
    return F.grid_sample(img, grid, align_corners=True)


def coords_grid(batch: int, ht: int, wd: int, device: torch.device) -> torch.Tensor:
    coords = torch.meshgrid(torch.arange(ht, device=device), torch.arange(wd, device=device),
                            indexing="ij")
    coords = torch.stack(coords[::-1], dim=0).float()
    return coords[None].repeat(batch, 1, 1, 1)


def upflow8(flow: torch.Tensor, mode: str = "bilinear") -> torch.Tensor:
    new_size = (8 * flow.shape[2], 8 * flow.shape[3])
    return 8 * F.interpolate(flow, size=new_size, mode=mode, align_corners=True)


class CorrBlock:
    def __init__(self, fmap1: torch.Tensor, fmap2: torch.Tensor, num_levels: int = 3,
                 radius: int = 3) -> None:
        self.num_levels, self.radius = num_levels, radius
        self.corr_pyramid = []
        corr = CorrBlock.corr(fmap1, fmap2)
        batch, h1, w1, dim, h2, w2 = corr.shape
        corr = corr.reshape(batch * h1 * w1, dim, h2, w2)
        self.corr_pyramid.append(corr)
        for _ in range(self.num_levels - 1):
            corr = F.avg_pool2d(corr, 2, stride=2)
            self.corr_pyramid.append(corr)

    def __call__(self, coords: torch.Tensor) -> torch.Tensor:
        r = self.radius
        coords = coords.permute(0, 2, 3, 1)
        batch, h1, w1, _ = coords.shape
        out_pyramid = []
        for i in range(self.num_levels):
            corr = self.corr_pyramid[i]
            dx = torch.linspace(-r, r, 2 * r + 1, device=coords.device)
            dy = torch.linspace(-r, r, 2 * r + 1, device=coords.device)
            delta = torch.stack(torch.meshgrid(dy, dx, indexing="ij"), dim=-1)
            centroid_lvl = coords.reshape(batch * h1 * w1, 1, 1, 2) / 2 ** i
            delta_lvl = delta.view(1, 2 * r + 1, 2 * r + 1, 2)
            coords_lvl = centroid_lvl + delta_lvl
            corr = bilinear_sampler(corr, coords_lvl)
            corr = corr.view(batch, h1, w1, -1)
            out_pyramid.append(corr)
        out = torch.cat(out_pyramid, dim=-1)
        return out.permute(0, 3, 1, 2).contiguous().float()

    @staticmethod
    def corr(fmap1: torch.Tensor, fmap2: torch.Tensor) -> torch.Tensor:
        batch, dim, ht, wd = fmap1.shape
        fmap1 = fmap1.view(batch, dim, ht * wd)
        fmap2 = fmap2.view(batch, dim, ht * wd)
        corr = torch.matmul(fmap1.transpose(1, 2), fmap2)
        corr = corr.view(batch, ht, wd, 1, ht, wd)
        return corr / torch.sqrt(torch.tensor(dim).float())


class RAFTBottleneck(nn.Module):
    def __init__(self, in_planes: int, planes: int, norm_fn: str, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes // 4, kernel_size=1, padding=0)
        self.conv2 = nn.Conv2d(planes // 4, planes // 4, kernel_size=3, padding=1, stride=stride)
        self.conv3 = nn.Conv2d(planes // 4, planes, kernel_size=1, padding=0)
        self.relu = nn.ReLU(inplace=True)

        def norm(c: int) -> nn.Module:
            return nn.InstanceNorm2d(c) if norm_fn == "instance" else nn.Sequential()

        self.norm1, self.norm2, self.norm3 = norm(planes // 4), norm(planes // 4), norm(planes)
        self.downsample = None
        if stride != 1:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride), norm(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.norm1(self.conv1(x)))
        y = self.relu(self.norm2(self.conv2(y)))
        y = self.relu(self.norm3(self.conv3(y)))
        if self.downsample is not None:
            x = self.downsample(x)
        return self.relu(x + y)


class SmallEncoder(nn.Module):
    def __init__(self, output_dim: int, norm_fn: str) -> None:
        super().__init__()
        self.norm_fn = norm_fn
        self.conv1 = nn.Conv2d(3, 16, kernel_size=7, stride=2, padding=3)
        self.norm1 = nn.InstanceNorm2d(16) if norm_fn == "instance" else nn.Sequential()
        self.relu1 = nn.ReLU(inplace=True)
        self.in_planes = 16
        self.layer1 = self._make_layer(16, stride=1)
        self.layer2 = self._make_layer(32, stride=2)
        self.layer3 = self._make_layer(48, stride=2)
        self.conv2 = nn.Conv2d(48, output_dim, kernel_size=1)

    def _make_layer(self, dim: int, stride: int = 1) -> nn.Sequential:
        layer1 = RAFTBottleneck(self.in_planes, dim, self.norm_fn, stride=stride)
        layer2 = RAFTBottleneck(dim, dim, self.norm_fn, stride=1)
        self.in_planes = dim
        return nn.Sequential(layer1, layer2)

    def forward(self, x: torch.Tensor | list[torch.Tensor]
                ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        is_list = isinstance(x, (tuple, list))
        if is_list:
            batch_dim = x[0].shape[0]
            x = torch.cat(x, dim=0)
        x = self.relu1(self.norm1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        x = self.conv2(x)
        if is_list:
            x = torch.split(x, [batch_dim, batch_dim], dim=0)
        return x


class SmallMotionEncoder(nn.Module):
    def __init__(self, cor_planes: int) -> None:
        super().__init__()
        self.convc1 = nn.Conv2d(cor_planes, 48, 1, padding=0)
        self.convf1 = nn.Conv2d(2, 32, 7, padding=3)
        self.convf2 = nn.Conv2d(32, 16, 3, padding=1)
        self.conv = nn.Conv2d(64, 40, 3, padding=1)

    def forward(self, flow: torch.Tensor, corr: torch.Tensor) -> torch.Tensor:
        cor = F.relu(self.convc1(corr))
        flo = F.relu(self.convf1(flow))
        flo = F.relu(self.convf2(flo))
        cor_flo = torch.cat([cor, flo], dim=1)
        out = F.relu(self.conv(cor_flo))
        return torch.cat([out, flow], dim=1)


class ConvGRU(nn.Module):
    def __init__(self, hidden_dim: int, input_dim: int) -> None:
        super().__init__()
        self.convz = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)
        self.convr = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)
        self.convq = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)

    def forward(self, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        hx = torch.cat([h, x], dim=1)
        z = torch.sigmoid(self.convz(hx))
        r = torch.sigmoid(self.convr(hx))
        q = torch.tanh(self.convq(torch.cat([r * h, x], dim=1)))
        return (1 - z) * h + z * q


class FlowHead(nn.Module):
    def __init__(self, input_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(input_dim, hidden_dim, 3, padding=1)
        self.conv2 = nn.Conv2d(hidden_dim, 2, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.relu(self.conv1(x)))


class SmallUpdateBlock(nn.Module):
    def __init__(self, cor_planes: int, context_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.encoder = SmallMotionEncoder(cor_planes)
        self.gru = ConvGRU(hidden_dim=hidden_dim, input_dim=42 + context_dim)
        self.flow_head = FlowHead(hidden_dim, hidden_dim=64)

    def forward(self, net: torch.Tensor, inp: torch.Tensor, corr: torch.Tensor,
                flow: torch.Tensor) -> tuple[torch.Tensor, None, torch.Tensor]:
        motion_features = self.encoder(flow, corr)
        inp = torch.cat([inp, motion_features], dim=1)
        net = self.gru(net, inp)
        delta_flow = self.flow_head(net)
        return net, None, delta_flow


class RAFTSmall(nn.Module):
    """Teed & Deng's RAFT-small: one encoder (InstanceNorm bottlenecks) on both frames
    ``cat``-ed along the batch and ``torch.split`` back, a context encoder (no norm) split
    into a ``tanh`` hidden state and a ``relu`` input, ``coords_grid`` from
    ``torch.meshgrid``, the all-pairs correlation (``matmul`` of ``transpose``-d features,
    ``/ sqrt(dim)``) reshaped per pixel and ``F.avg_pool2d``-ed to 3 levels, a radius-3
    lookup by ``F.grid_sample(align_corners=True)`` on ``linspace``/``meshgrid`` offsets,
    a motion encoder, ConvGRU and flow head, two unrolled iterations with
    ``coords1.detach()``, ``upflow8``. The second frame is the input ``torch.roll``-ed by
    (1, 2) pixels; the ``2 * (image / 255) - 1`` input scaling is left out (the zoo's input
    is already standardized). Needs a 64×64 input (three pyramid levels of an 8×8 map)."""

    def __init__(self, iters: int = 2, corr_levels: int = 3, corr_radius: int = 3) -> None:
        super().__init__()
        self.hidden_dim = hdim = 32
        self.context_dim = cdim = 32
        self.iters, self.corr_levels, self.corr_radius = iters, corr_levels, corr_radius
        self.fnet = SmallEncoder(output_dim=64, norm_fn="instance")
        self.cnet = SmallEncoder(output_dim=hdim + cdim, norm_fn="none")
        cor_planes = corr_levels * (2 * corr_radius + 1) ** 2
        self.update_block = SmallUpdateBlock(cor_planes, cdim, hidden_dim=hdim)

    def initialize_flow(self, img: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        N, _, H, W = img.shape
        coords0 = coords_grid(N, H // 8, W // 8, device=img.device)
        coords1 = coords_grid(N, H // 8, W // 8, device=img.device)
        return coords0, coords1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        image1 = x.contiguous()
        image2 = torch.roll(x, shifts=(1, 2), dims=(2, 3)).contiguous()
        hdim, cdim = self.hidden_dim, self.context_dim
        fmap1, fmap2 = self.fnet([image1, image2])
        fmap1, fmap2 = fmap1.float(), fmap2.float()
        corr_fn = CorrBlock(fmap1, fmap2, num_levels=self.corr_levels, radius=self.corr_radius)
        cnet = self.cnet(image1)
        net, inp = torch.split(cnet, [hdim, cdim], dim=1)
        net = torch.tanh(net)
        inp = torch.relu(inp)
        coords0, coords1 = self.initialize_flow(image1)
        flow_up = coords1
        for _ in range(self.iters):
            coords1 = coords1.detach()
            corr = corr_fn(coords1)
            flow = coords1 - coords0
            net, _, delta_flow = self.update_block(net, inp, corr, flow)
            coords1 = coords1 + delta_flow
            flow_up = upflow8(coords1 - coords0)
        return flow_up


# --------------------------------------------------------------------------------------------
# microsoft/torchscale: RetNet parallel retention (decay mask, xpos-style rotation)
# --------------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(dim) + 0.5) if elementwise_affine else None

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output = self._norm(x.float()).type_as(x)
        if self.weight is not None:
            output = output * self.weight
        return output


class RetNetRelPos(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        angle = 1.0 / (10000 ** torch.linspace(0, 1, embed_dim // num_heads // 2))
        angle = angle.unsqueeze(-1).repeat(1, 2).flatten()
        decay = torch.log(1 - 2 ** (-5 - torch.arange(num_heads, dtype=torch.float)))
        self.register_buffer("angle", angle)
        self.register_buffer("decay", decay)

    def forward(self, slen: int) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        index = torch.arange(slen).to(self.decay)
        sin = torch.sin(index[:, None] * self.angle[None, :])
        cos = torch.cos(index[:, None] * self.angle[None, :])
        mask = torch.tril(torch.ones(slen, slen).to(self.decay))
        mask = torch.masked_fill(index[:, None] - index[None, :], ~mask.bool(), float("inf"))
        mask = torch.exp(mask * self.decay[:, None, None])
        mask = torch.nan_to_num(mask)
        mask = mask / mask.sum(dim=-1, keepdim=True).sqrt()
        return (sin, cos), mask


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


def theta_shift(x: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    return (x * cos) + (rotate_every_two(x) * sin)


class MultiScaleRetention(nn.Module):
    def __init__(self, embed_dim: int, value_dim: int, num_heads: int) -> None:
        super().__init__()
        self.embed_dim, self.value_dim, self.num_heads = embed_dim, value_dim, num_heads
        self.head_dim = value_dim // num_heads
        self.key_dim = embed_dim // num_heads
        self.scaling = self.key_dim ** -0.5
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, value_dim, bias=False)
        self.g_proj = nn.Linear(embed_dim, value_dim, bias=False)
        self.out_proj = nn.Linear(value_dim, embed_dim, bias=False)
        self.group_norm = RMSNorm(self.head_dim, eps=1e-6, elementwise_affine=False)

    def parallel_forward(self, qr: torch.Tensor, kr: torch.Tensor, v: torch.Tensor,
                         mask: torch.Tensor) -> torch.Tensor:
        bsz, tgt_len, _ = v.size()
        vr = v.view(bsz, tgt_len, self.num_heads, self.head_dim).transpose(1, 2)
        qk_mat = qr @ kr.transpose(-1, -2)
        qk_mat = qk_mat * mask
        qk_mat = qk_mat / qk_mat.detach().abs().sum(dim=-1, keepdim=True).clamp(min=1, max=5e4)
        output = torch.matmul(qk_mat, vr)
        return output.transpose(1, 2)

    def forward(self, x: torch.Tensor, rel_pos: tuple[tuple[torch.Tensor, torch.Tensor],
                                                      torch.Tensor]) -> torch.Tensor:
        bsz, tgt_len, _ = x.size()
        (sin, cos), inner_mask = rel_pos
        q = self.q_proj(x)
        k = self.k_proj(x)
        v = self.v_proj(x)
        g = self.g_proj(x)
        k *= self.scaling
        q = q.view(bsz, tgt_len, self.num_heads, self.key_dim).transpose(1, 2)
        k = k.view(bsz, tgt_len, self.num_heads, self.key_dim).transpose(1, 2)
        qr = theta_shift(q, sin, cos)
        kr = theta_shift(k, sin, cos)
        output = self.parallel_forward(qr, kr, v, inner_mask)
        output = self.group_norm(output).reshape(bsz, tgt_len, self.head_dim * self.num_heads)
        output = F.silu(g) * output
        return self.out_proj(output)


class GLU(nn.Module):
    def __init__(self, embed_dim: int, ffn_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(embed_dim, ffn_dim, bias=False)
        self.fc2 = nn.Linear(ffn_dim, embed_dim, bias=False)
        self.gate = nn.Linear(embed_dim, ffn_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_shape = x.shape
        x = x.reshape(-1, x.size(-1))
        g = self.gate(x)
        x = self.fc1(x)
        x = F.gelu(x.float()).type_as(x) * g
        x = self.fc2(x)
        return x.view(x_shape)


class RetNetLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.retention = MultiScaleRetention(dim, 2 * dim, heads)
        self.retention_layer_norm = RMSNorm(dim)
        self.ffn = GLU(dim, 2 * dim)
        self.final_layer_norm = RMSNorm(dim)

    def forward(self, x: torch.Tensor, retention_rel_pos: tuple) -> torch.Tensor:
        residual = x
        x = self.retention(self.retention_layer_norm(x), rel_pos=retention_rel_pos)
        x = x + residual
        residual = x
        x = self.ffn(self.final_layer_norm(x))
        return x + residual


class RetNetPatches(nn.Module):
    """Sun et al.'s RetNet decoder (torchscale) on the raster-ordered 8×8/8 patch tokens:
    ``RetNetRelPos`` computes sin/cos and the causal decay mask in forward (``arange``,
    ``tril``, ``masked_fill(~mask.bool(), inf)``, ``exp(mask * decay)``, ``nan_to_num``,
    rows divided by the ``sqrt`` of their sums), parallel retention (q/k rotated by
    ``stack((-x2, x1), dim=-1).flatten(-2)``, ``k *= scaling`` in place, scores times the
    mask, divided by ``detach().abs().sum(-1).clamp(1, 5e4)``, value dim 2×, RMS group norm
    without affine, ``silu(g)`` gate), RMSNorm pre-norms, a gated GELU FFN, a final
    RMSNorm, token mean, Linear."""

    def __init__(self, dim: int = 32, heads: int = 2, depth: int = 2, num_classes: int = 10
                 ) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, 8, 8)
        self.retnet_rel_pos = RetNetRelPos(dim, heads)
        self.layers = nn.ModuleList(RetNetLayer(dim, heads) for _ in range(depth))
        self.layer_norm = RMSNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        rel_pos = self.retnet_rel_pos(x.size(1))
        for layer in self.layers:
            x = layer(x, retention_rel_pos=rel_pos)
        x = self.layer_norm(x)
        return self.head(x.mean(1))


# --------------------------------------------------------------------------------------------
# hustvl/Vim + state-spaces/mamba: bidirectional Mamba with the reference selective scan
# --------------------------------------------------------------------------------------------
def selective_scan_ref(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                       C: torch.Tensor, D: torch.Tensor | None = None,
                       z: torch.Tensor | None = None, delta_bias: torch.Tensor | None = None,
                       delta_softplus: bool = False) -> torch.Tensor:
    """u, delta, z: (b, d, l); A: (d, n); B, C: (b, n, l); D: (d,)."""
    dtype_in = u.dtype
    u = u.float()
    delta = delta.float()
    if delta_bias is not None:
        delta = delta + delta_bias[..., None].float()
    if delta_softplus:
        delta = F.softplus(delta)
    batch, dim, dstate = u.shape[0], A.shape[0], A.shape[1]
    B = B.float()
    C = C.float()
    x = A.new_zeros((batch, dim, dstate))
    ys = []
    deltaA = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    deltaB_u = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    for i in range(u.shape[2]):
        x = deltaA[:, :, i] * x + deltaB_u[:, :, i]
        y = torch.einsum("bdn,bn->bd", x, C[:, :, i])
        ys.append(y)
    y = torch.stack(ys, dim=2)
    out = y if D is None else y + u * D[:, None]
    if z is not None:
        out = out * F.silu(z)
    return out.to(dtype=dtype_in)


class SSMBranch(nn.Module):
    """One scan direction's parameters (mamba's ``conv1d``, ``x_proj``, ``dt_proj``,
    ``A_log``, ``D``; Vim's ``*_b`` copies for the backward direction)."""

    def __init__(self, d_inner: int, d_state: int, d_conv: int, dt_rank: int,
                 dt_min: float = 0.001, dt_max: float = 0.1, dt_init_floor: float = 1e-4
                 ) -> None:
        super().__init__()
        self.d_inner, self.d_state, self.dt_rank = d_inner, d_state, dt_rank
        self.conv1d = nn.Conv1d(d_inner, d_inner, bias=True, kernel_size=d_conv,
                                groups=d_inner, padding=d_conv - 1)
        self.x_proj = nn.Linear(d_inner, dt_rank + d_state * 2, bias=False)
        self.dt_proj = nn.Linear(dt_rank, d_inner, bias=True)
        dt_init_std = dt_rank ** -0.5
        with torch.no_grad():
            nn.init.uniform_(self.dt_proj.weight, -dt_init_std, dt_init_std)
            dt = torch.exp(torch.rand(d_inner) * (math.log(dt_max) - math.log(dt_min))
                           + math.log(dt_min)).clamp(min=dt_init_floor)
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))
        A = torch.arange(1, d_state + 1, dtype=torch.float32)[None, :].repeat(d_inner, 1)
        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.rand(d_inner) + 0.5)  # ones in the reference

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        seqlen = x.shape[-1]
        A = -torch.exp(self.A_log.float())
        x = F.silu(self.conv1d(x)[..., :seqlen])
        x_dbl = self.x_proj(x.transpose(1, 2).reshape(-1, self.d_inner))  # (b l) d
        dt, B, C = torch.split(x_dbl, [self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = self.dt_proj.weight @ dt.t()
        dt = dt.view(self.d_inner, -1, seqlen).permute(1, 0, 2)  # d (b l) -> b d l
        B = B.view(-1, seqlen, self.d_state).transpose(1, 2).contiguous()  # (b l) n -> b n l
        C = C.view(-1, seqlen, self.d_state).transpose(1, 2).contiguous()
        return selective_scan_ref(x, dt, A, B, C, self.D.float(), z=z,
                                  delta_bias=self.dt_proj.bias.float(), delta_softplus=True)


class BiMamba(nn.Module):
    def __init__(self, d_model: int, d_state: int = 8, d_conv: int = 4, expand: int = 2
                 ) -> None:
        super().__init__()
        self.d_inner = expand * d_model
        dt_rank = math.ceil(d_model / 16)
        self.in_proj = nn.Linear(d_model, self.d_inner * 2, bias=False)
        self.fwd = SSMBranch(self.d_inner, d_state, d_conv, dt_rank)
        self.bwd = SSMBranch(self.d_inner, d_state, d_conv, dt_rank)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        batch, seqlen, dim = hidden_states.shape
        xz = self.in_proj.weight @ hidden_states.reshape(-1, dim).t()  # d (b l)
        xz = xz.view(-1, batch, seqlen).permute(1, 0, 2)  # b d l
        x, z = xz.chunk(2, dim=1)
        out = self.fwd(x, z)
        out_b = self.bwd(x.flip(-1), z.flip(-1))
        out = (out + out_b.flip(-1)) / 2  # if_devide_out
        return self.out_proj(out.transpose(1, 2))


class VimBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.mixer = BiMamba(dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        residual = (hidden_states + residual) if residual is not None else hidden_states
        hidden_states = self.mixer(self.norm(residual))
        return hidden_states, residual


class VisionMamba(nn.Module):
    """Zhu et al.'s Vision Mamba (Vim, mean-pooled, no cls token): a 16×16/16 patch embedding
    and position embedding, add-then-norm residual blocks of a bidirectional Mamba mixer
    (``in_proj.weight @ x.t()``, ``chunk`` into x and z; per direction a causal depthwise
    ``Conv1d`` sliced ``[..., :L]``, SiLU, ``x_proj`` ``split`` into dt, B, C,
    ``dt_proj.weight @ dt.t()``, ``selective_scan_ref``: softplus, ``exp(einsum)``, a
    three-operand ``einsum``, a Python loop over the 16 tokens, ``torch.stack``, ``+ u·D``,
    ``× silu(z)``; the backward direction on ``flip(-1)``, flipped back and averaged),
    ``out_proj``, a final add + LayerNorm, token mean, Linear."""

    def __init__(self, img_size: int = 64, patch: int = 16, dim: int = 32, depth: int = 2,
                 num_classes: int = 10) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.pos_embed = nn.Parameter(torch.randn(1, (img_size // patch) ** 2, dim) * 0.02)
        self.layers = nn.ModuleList(VimBlock(dim) for _ in range(depth))
        self.norm_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        hidden_states = x + self.pos_embed
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(hidden_states, residual)
        residual = hidden_states + residual
        hidden_states = self.norm_f(residual)
        return self.head(hidden_states.mean(dim=1))


def _built(cls: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    return lambda: finalize(cls(), CALIB)


MODELS: dict[str, Callable[[], nn.Module]] = {
    "gfnet_global_filter": _built(GFNet),
    "stylegan2_modconv": _built(StyleGAN2),
    "cyclegan_resnet_gen": _built(CycleGANGenerator),
    "centernet_decode": _built(CenterNet),
    "fasternet_pconv": _built(FasterNet),
    "shiftvit_shift": _built(ShiftViT),
    "cswin_stripes": _built(CSWin),
    "resnest_splat": _built(ResNeSt),
    "rednet_involution": _built(RedNet),
    "dpn_dual_path": _built(DPN),
    "tresnet_s2d_blur": _built(TResNet),
    "raft_small_corr": _built(RAFTSmall),
    "retnet_retention": _built(RetNetPatches),
    "vim_selective_scan": _built(VisionMamba),
}

#: Input sizes other than quant_zoo's 32×32 (the reference fixes the map size at construction,
#: or the model needs the larger map)
SIZES: dict[str, int] = {"gfnet_global_filter": 64, "cswin_stripes": 64, "raft_small_corr": 64,
                         "centernet_decode": 64, "vim_selective_scan": 64}
