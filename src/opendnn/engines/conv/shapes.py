"""Convolution shapes shared by the tests and the benchmark runner, tagged by size.

- ``GPU``: the device tests' problems, ``(N, C, H (=W), K, R (=S), stride, pad)``;
  ``GPU_TMA`` / ``GPU_DGRAD_TMA`` the NHWC fast path's forward and backward-data problems
  (same format), ``GPU_FLAT`` its 1x1 flat-row problems ``(N, C, H, K, R, pad)``,
  ``GPU_DEPTHWISE`` the depthwise engine's (format beside it).
- ``BENCH``: ResNet-50's convolution layers at ``BENCH_N`` images,
  ``(name, C, K, H (=W), R (=S), stride, pad)``.
- ``BENCH_SETS``: the benchmark's layer sets by name (``python -m opendnn.bench conv --set``),
  each a list of ``Layer``: ResNet-50 (the layers above), the depthwise and pointwise
  layers of MobileNetV3-Large and EfficientNet-B0, ConvNeXt-T's 7x7 depthwise layers (with
  its stem and downsampling), ResNeXt-50 32x4d's grouped 3x3 layers, a 3-D UNet-style set
  (3x3x3) and 1-D convolutions (kernels 3 and 4, causal padding as speech and Mamba-style
  models use, dense and depthwise). ``BENCH_VARIANTS`` the layouts and data types each set
  runs in.

The CPU tests (``tests/conv/``) run their own small odd-sized cases through the
interpreter; each engine's test module lists those beside the rule it checks.
"""

from __future__ import annotations

import dataclasses
import math

GPU = [
    (8, 64, 28, 64, 3, 1, 1),
    (4, 3, 56, 32, 7, 2, 3),
    (8, 128, 14, 256, 1, 1, 0),
    (2, 32, 15, 48, 3, 1, 1),
]
GPU_TMA = [(8, 64, 28, 64, 3, 1, 1), (4, 128, 14, 96, 3, 2, 1), (8, 64, 13, 128, 1, 1, 0)]
GPU_DGRAD_TMA = [(8, 64, 28, 64, 3, 1, 1), (4, 64, 15, 128, 3, 2, 1), (2, 3, 56, 64, 7, 2, 3)]
# depthwise problems (N, C, H (=W), multiplier, R (=S), stride, pad): MobileNet / ConvNeXt
# layers at small N, an odd size, multiplier 2, a 1-D causal layer as (N, C, L, 1, K, 1, -1)
GPU_DEPTHWISE = [
    (4, 96, 56, 1, 7, 1, 3),
    (4, 72, 56, 1, 5, 2, 2),
    (8, 480, 14, 1, 3, 1, 1),
    (2, 37, 19, 2, 3, 1, 1),
    (4, 768, 1000, 1, 4, 1, -1),
]
GPU_FLAT = [
    (8, 64, 14, 128, 1, 0),
    (4, 128, 7, 256, 1, 0),
    (3, 64, 9, 64, 1, 0),
    (32, 512, 7, 2048, 1, 0),
    (32, 1024, 14, 256, 1, 0),
]

BENCH_N = 32
BENCH = [
    ("conv1_7x7s2", 3, 64, 224, 7, 2, 3),
    ("l1_1x1_64_64", 64, 64, 56, 1, 1, 0),
    ("l1_3x3_64", 64, 64, 56, 3, 1, 1),
    ("l1_1x1_64_256", 64, 256, 56, 1, 1, 0),
    ("l2_3x3_128s2", 128, 128, 56, 3, 2, 1),
    ("l2_3x3_128", 128, 128, 28, 3, 1, 1),
    ("l3_3x3_256", 256, 256, 14, 3, 1, 1),
    ("l3_1x1_1024_256", 1024, 256, 14, 1, 1, 0),
    ("l4_3x3_512", 512, 512, 7, 3, 1, 1),
    ("l4_1x1_512_2048", 512, 2048, 7, 1, 1, 0),
]


@dataclasses.dataclass(frozen=True)
class Layer:
    """One convolution of a benchmark set: x [N, C, *spatial], w [K, C / groups, *filt],
    padding ``pre`` before and ``post`` after each spatial axis (``post`` < ``pre`` is the
    causal padding of 1-D sequence models)."""

    name: str
    n: int
    c: int
    k: int
    spatial: tuple
    filt: tuple
    stride: tuple
    pre: tuple
    post: tuple
    groups: int = 1

    @property
    def out(self) -> tuple:
        return tuple(
            (i + a + b - f) // s + 1
            for i, f, s, a, b in zip(self.spatial, self.filt, self.stride, self.pre, self.post)
        )

    @property
    def depthwise(self) -> bool:
        return self.groups == self.c == self.k and self.groups > 1

    @property
    def flops(self) -> float:
        """2 x multiply-adds of the forward (the backward passes do the same number)."""
        return (
            2.0
            * self.n
            * self.k
            * math.prod(self.out)
            * self.c
            // self.groups
            * math.prod(self.filt)
        )


def _layer(name, n, c, k, size, f, s=1, p=None, groups=1, dims=2, post=None) -> Layer:
    """A square (cubic) layer: ``size`` and the filter ``f`` on every spatial axis;
    padding ``p`` (default f // 2) before and ``post`` (default ``p``) after."""
    p = f // 2 if p is None else p
    post = p if post is None else post
    return Layer(
        name, n, c, k, (size,) * dims, (f,) * dims, (s,) * dims, (p,) * dims, (post,) * dims, groups
    )


def _dw(name, n, c, size, f, s=1) -> Layer:
    return _layer(name, n, c, c, size, f, s, groups=c)


BENCH_SETS = {
    "resnet50": [_layer(nm, BENCH_N, c, k, h, f, s, p) for nm, c, k, h, f, s, p in BENCH],
    # MobileNetV3-Large at 224x224: every depthwise shape (expanded width, kernel, stride)
    # and pointwise expand / project layers of several stages
    "mobilenetv3": [
        _dw("dw3_16_112", 32, 16, 112, 3),
        _dw("dw3_64_112s2", 32, 64, 112, 3, 2),
        _dw("dw3_72_56", 32, 72, 56, 3),
        _dw("dw5_72_56s2", 32, 72, 56, 5, 2),
        _dw("dw5_120_28", 32, 120, 28, 5),
        _dw("dw3_240_28s2", 32, 240, 28, 3, 2),
        _dw("dw3_200_14", 32, 200, 14, 3),
        _dw("dw3_480_14", 32, 480, 14, 3),
        _dw("dw5_672_14", 32, 672, 14, 5),
        _dw("dw5_672_14s2", 32, 672, 14, 5, 2),
        _dw("dw5_960_7", 32, 960, 7, 5),
        _layer("pw_24_72_56", 32, 24, 72, 56, 1),
        _layer("pw_120_40_28", 32, 120, 40, 28, 1),
        _layer("pw_80_480_14", 32, 80, 480, 14, 1),
        _layer("pw_960_160_7", 32, 960, 160, 7, 1),
    ],
    # EfficientNet-B0 at 224x224: MBConv depthwise layers and their 1x1 expand / project
    "efficientnet_b0": [
        _dw("dw3_32_112", 32, 32, 112, 3),
        _dw("dw3_96_112s2", 32, 96, 112, 3, 2),
        _dw("dw3_144_56", 32, 144, 56, 3),
        _dw("dw5_144_56s2", 32, 144, 56, 5, 2),
        _dw("dw5_240_28", 32, 240, 28, 5),
        _dw("dw3_480_14", 32, 480, 14, 3),
        _dw("dw5_672_14", 32, 672, 14, 5),
        _dw("dw5_1152_7", 32, 1152, 7, 5),
        _layer("pw_16_96_112", 32, 16, 96, 112, 1),
        _layer("pw_240_40_28", 32, 240, 40, 28, 1),
        _layer("pw_192_1152_7", 32, 192, 1152, 7, 1),
    ],
    # ConvNeXt-T: the 7x7 depthwise layer of every stage, the 4x4/4 stem, a 2x2/2 downsample
    "convnext_t": [
        _dw("dw7_96_56", 32, 96, 56, 7),
        _dw("dw7_192_28", 32, 192, 28, 7),
        _dw("dw7_384_14", 32, 384, 14, 7),
        _dw("dw7_768_7", 32, 768, 7, 7),
        _layer("stem_4x4s4", 32, 3, 96, 224, 4, 4, 0),
        _layer("down_2x2s2_96_192", 32, 96, 192, 56, 2, 2, 0),
    ],
    # ResNeXt-50 32x4d: the grouped 3x3 layers (32 groups of 4..32 channels)
    "resnext50": [
        _layer("g32_3x3_128", 32, 128, 128, 56, 3, groups=32),
        _layer("g32_3x3_256s2", 32, 256, 256, 56, 3, 2, groups=32),
        _layer("g32_3x3_256", 32, 256, 256, 28, 3, groups=32),
        _layer("g32_3x3_512", 32, 512, 512, 14, 3, groups=32),
        _layer("g32_3x3_1024s2", 32, 1024, 1024, 14, 3, 2, groups=32),
        _layer("g32_3x3_1024", 32, 1024, 1024, 7, 3, groups=32),
    ],
    # a 3-D UNet-style encoder: 3x3x3 at four resolutions, one stride-2 downsample
    "unet3d": [
        _layer("c3_32_64", 2, 32, 32, 64, 3, dims=3),
        _layer("c3_32_64_64s2", 2, 32, 64, 64, 3, 2, dims=3),
        _layer("c3_64_32", 2, 64, 64, 32, 3, dims=3),
        _layer("c3_128_16", 2, 128, 128, 16, 3, dims=3),
        _layer("c3_256_8", 2, 256, 256, 8, 3, dims=3),
    ],
    # 1-D: a speech-style kernel-3 layer, causal kernel-4 (dense and depthwise, as Mamba's
    # short convolution), a causal depthwise kernel 3
    "conv1d": [
        _layer("k3_512_4096", 8, 512, 512, 4096, 3, dims=1),
        _layer("k4_causal_1024_2048", 8, 1024, 1024, 2048, 4, p=3, post=0, dims=1),
        _layer("dw4_causal_2048_2048", 8, 2048, 2048, 2048, 4, p=3, post=0, groups=2048, dims=1),
        _layer("dw3_causal_768_4096", 8, 768, 768, 4096, 3, p=2, post=0, groups=768, dims=1),
    ],
}

# (layout, data type, TF32 allowed): NHWC bf16 (the tensor-core layout), PyTorch's
# default NCHW float32 with TF32 allowed for cuDNN, NCHW float16
BENCH_VARIANTS = {
    "nhwc-bf16": ("channels_last", "bfloat16", False),
    "nchw-tf32": ("contiguous", "float32", True),
    "nchw-fp16": ("contiguous", "float16", False),
}
