"""Detection heads, norms and mixers as deployed code writes them, small, random weights:
a LayerNorm over channels written out on an NCHW map (ConvNeXt's and SAM's ``LayerNorm2d``),
YOLOv5's Focus stem (four strided slices concatenated) and its Detect head (``view`` +
``permute`` to anchors last, an in-place sigmoid decode on slices), RetinaNet-style heads
(each level ``permute(0, 2, 3, 1).reshape(N, -1, K)``, concatenated), DETR-family query
selection (``topk`` of class scores, ``gather`` of the boxes), VOLO's outlook attention
(overlapping ``F.unfold``/``F.fold``), EfficientDet's BiFPN weighted fusion, and GELU
(tanh) and Mish activations. Their floors come from the exported graph (`graph_floor`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm2d(nn.Module):
    """``u = x.mean(1)``, ``s = (x - u)².mean(1)``, normalized, scaled per channel."""

    def __init__(self, c: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.bias, self.eps = nn.Parameter(torch.randn(c)), nn.Parameter(
            torch.randn(c)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class SamNeck(nn.Module):
    """SAM's image-encoder neck after a patch embed: 1×1 conv, LayerNorm2d, 3×3 conv,
    LayerNorm2d; GELU(tanh) and Mish in a small MLP beside it."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, 16, 4, 4)
        self.neck = nn.Sequential(nn.Conv2d(16, 16, 1, bias=False), LayerNorm2d(16),
                                  nn.Conv2d(16, 16, 3, padding=1, bias=False), LayerNorm2d(16))
        self.mlp = nn.Sequential(nn.Conv2d(16, 32, 1), nn.GELU(approximate="tanh"),
                                 nn.Conv2d(32, 16, 1), nn.Mish())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.neck(self.embed(x))
        return f + self.mlp(f)


class YOLOv5(nn.Module):
    """Focus stem, two strided convs, a Detect head on two levels: ``view(bs, na, no, ny,
    nx).permute(0, 1, 3, 4, 2)``, sigmoid, the xy and wh of each box decoded in place
    against a grid and anchors, flattened and concatenated."""

    def __init__(self, nc: int = 3, na: int = 2) -> None:
        super().__init__()
        self.na, self.no = na, nc + 5
        self.focus = nn.Sequential(nn.Conv2d(12, 16, 3, padding=1), nn.SiLU())
        self.c1 = nn.Sequential(nn.Conv2d(16, 32, 3, 2, 1), nn.SiLU())
        self.c2 = nn.Sequential(nn.Conv2d(32, 32, 3, 2, 1), nn.SiLU())
        self.m = nn.ModuleList(nn.Conv2d(32, na * self.no, 1) for _ in range(2))
        self.register_buffer("anchors", torch.tensor([[10.0, 13.0], [16.0, 30.0]]),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.focus(torch.cat([x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2],
                                  x[..., 1::2, 1::2]], 1))
        p3 = self.c1(x)
        p4 = self.c2(p3)
        outs = []
        for i, (feat, stride) in enumerate(((p3, 4.0), (p4, 8.0))):
            t = self.m[i](feat)
            bs, _, ny, nx = t.shape
            t = t.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            y = t.sigmoid()
            yv, xv = torch.meshgrid(torch.arange(ny, device=x.device),
                                    torch.arange(nx, device=x.device), indexing="ij")
            grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float()
            y[..., 0:2] = (y[..., 0:2] * 2 - 0.5 + grid) * stride
            y[..., 2:4] = (y[..., 2:4] * 2) ** 2 * self.anchors.view(1, self.na, 1, 1, 2)
            outs.append(y.view(bs, -1, self.no))
        return torch.cat(outs, 1)


class RetinaHead(nn.Module):
    """A two-level FPN; class and box subnets shared over levels, each output
    ``permute(0, 2, 3, 1).reshape(N, -1, K)``, levels concatenated; then DETR-style query
    selection: the top-k anchors by class score and their boxes by ``gather``."""

    def __init__(self, k: int = 4, topk: int = 10) -> None:
        super().__init__()
        self.k, self.topk = k, topk
        self.c1 = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU())
        self.c2 = nn.Sequential(nn.Conv2d(16, 16, 3, 2, 1), nn.ReLU())
        self.cls = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(16, k, 3, padding=1))
        self.box = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(16, 4, 3, padding=1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f1 = self.c1(x)
        feats = [f1, self.c2(f1)]
        n = x.shape[0]
        logits = torch.cat([self.cls(f).permute(0, 2, 3, 1).reshape(n, -1, self.k)
                            for f in feats], 1)
        boxes = torch.cat([self.box(f).permute(0, 2, 3, 1).reshape(n, -1, 4) for f in feats], 1)
        scores, idx = logits.max(-1).values.topk(self.topk, dim=1)
        picked = boxes.gather(1, idx.unsqueeze(-1).expand(-1, -1, 4))
        return scores.sigmoid(), picked


class Outlooker(nn.Module):
    """VOLO's outlook attention: values unfolded in overlapping 3×3 neighbourhoods, weights
    from an average-pooled Linear, softmax, folded back (overlap-add), channels last."""

    def __init__(self, dim: int = 16, heads: int = 2, k: int = 3) -> None:
        super().__init__()
        self.heads, self.k, self.hd = heads, k, dim // heads
        self.embed = nn.Conv2d(3, dim, 4, 4)
        self.v, self.attn, self.proj = nn.Linear(dim, dim), nn.Linear(dim, heads * k ** 4), \
            nn.Linear(dim, dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).permute(0, 2, 3, 1)
        b, h, w, c = t.shape
        kk = self.k * self.k
        v = self.v(t).permute(0, 3, 1, 2)
        v = F.unfold(v, self.k, padding=1).reshape(b, self.heads, self.hd, kk, h * w)
        v = v.permute(0, 1, 4, 3, 2)
        a = self.attn(t).reshape(b, h * w, self.heads, kk, kk).permute(0, 2, 1, 3, 4)
        a = (a * self.hd ** -0.5).softmax(dim=-1)
        out = (a @ v).permute(0, 1, 4, 3, 2).reshape(b, c * kk, h * w)
        out = F.fold(out, output_size=(h, w), kernel_size=self.k, padding=1)
        t = t + self.proj(out.permute(0, 2, 3, 1))
        return self.head(t.mean((1, 2)))


class BiFPN(nn.Module):
    """EfficientDet's fast normalized fusion: ``w = relu(w); w / (sum(w) + eps)``, weighted
    sum of an upsampled coarse level and a fine one, a depthwise-separable conv."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.SiLU())
        self.c2 = nn.Sequential(nn.Conv2d(16, 16, 3, 2, 1), nn.SiLU())
        self.w = nn.Parameter(torch.ones(2))
        self.conv = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16),
                                  nn.Conv2d(16, 16, 1), nn.BatchNorm2d(16))
        self.head = nn.Conv2d(16, 5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.c1(x)
        p4 = self.c2(p3)
        w = F.relu(self.w)
        w = w / (w.sum(0) + 1e-4)
        fused = self.conv(F.silu(w[0] * p3 + w[1] * F.interpolate(p4, scale_factor=2.0,
                                                                     mode="nearest")))
        return self.head(fused)


MODELS = {
    "sam_neck_layernorm2d": lambda: SamNeck(),
    "yolov5_focus_detect": lambda: YOLOv5(),
    "retina_topk_gather": lambda: RetinaHead(),
    "volo_outlooker": lambda: Outlooker(),
    "efficientdet_bifpn": lambda: BiFPN(),
}
