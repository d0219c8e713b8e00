"""An EmoNet-style network on opendnn, run the way the seed benchmarks EmoNet: fixed
256x256 inputs, ``opendnn.backends.benchmark`` off, then on (the first call with it on
finds the fastest plan per layer and keeps it; later calls reuse it).

    PYTHONPATH=src python examples/emonet.py                 # GPU: N=32 (and N=1), 256x256
    PYTHONPATH=src python examples/emonet.py --size 32       # CPU: small, a few calls

The network follows EmoNet's layers (face-analysis/emonet, as the seed quotes them): a
7x7 stride-2 convolution 3 -> 64 (padding 3), InstanceNorm2d(64), ReLU, EmoNet's
ConvBlocks (pre-activation BN-ReLU-3x3 convolutions at widths out/2, out/4, out/4,
concatenated, plus a BN-ReLU-1x1 shortcut when the width changes), 2x2 max pools down to
4x4, a 4x4 average pool and the emotion head (Linear, BatchNorm1d, ReLU, Linear) giving
``n_expression`` logits plus valence and arousal. FAN's hourglass stack (EmoNet's
landmark backbone) is left out: it repeats the same ConvBlocks.

Shapes for a (N, 3, S, S) input, S = 256: stem (N, 64, S/2, S/2); ConvBlock 64->128, max
pool -> (N, 128, S/4, S/4); ConvBlocks 128->128->256; then max pool + ConvBlock 256->256
while the side is above 4 (64 -> 32 -> 16 -> 8 -> 4); average pool 4 -> (N, 256);
head -> (N, n_expression + 2). ``width`` scales every channel count (64 by default).
"""
from __future__ import annotations

import argparse
import copy
import time
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["ConvBlock", "EmoNet", "main"]


def conv3x3(in_planes: int, out_planes: int) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=1, padding=1, bias=False)


class ConvBlock(nn.Module):
    """EmoNet's (FAN's) ConvBlock: three pre-activated 3x3 convolutions of widths out/2,
    out/4, out/4 whose outputs are concatenated (to ``out_planes``) and added to the
    input (through BN-ReLU-1x1 when the widths differ). (N, in, H, W) -> (N, out, H, W)."""

    def __init__(self, in_planes: int, out_planes: int):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = conv3x3(in_planes, out_planes // 2)
        self.bn2 = nn.BatchNorm2d(out_planes // 2)
        self.conv2 = conv3x3(out_planes // 2, out_planes // 4)
        self.bn3 = nn.BatchNorm2d(out_planes // 4)
        self.conv3 = conv3x3(out_planes // 4, out_planes - out_planes // 2 - out_planes // 4)
        self.downsample = None
        if in_planes != out_planes:
            self.downsample = nn.Sequential(
                nn.BatchNorm2d(in_planes), nn.ReLU(True),
                nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=1, bias=False))
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out1 = self.conv1(self.relu(self.bn1(x)))
        out2 = self.conv2(self.relu(self.bn2(out1)))
        out3 = self.conv3(self.relu(self.bn3(out2)))
        out = torch.cat((out1, out2, out3), 1)
        residual = x if self.downsample is None else self.downsample(x)
        return out + residual


class EmoNet(nn.Module):
    """EmoNet-style emotion network for fixed ``input_size`` x ``input_size`` faces (a
    power of two, at least 32). (N, 3, S, S) -> (N, n_expression + n_reg)."""

    def __init__(self, n_expression: int = 8, n_reg: int = 2, width: int = 64,
                 input_size: int = 256):
        super().__init__()
        if input_size < 16 or input_size & (input_size - 1):
            raise ValueError(f"input_size must be a power of two >= 16, got {input_size}")
        w = width
        self.input_size = input_size
        self.conv1 = nn.Conv2d(3, w, kernel_size=7, stride=2, padding=3)
        self.bn1 = nn.InstanceNorm2d(w)
        self.conv2 = ConvBlock(w, 2 * w)
        self.conv3 = ConvBlock(2 * w, 2 * w)
        self.conv4 = ConvBlock(2 * w, 4 * w)
        stages = (input_size // 4).bit_length() - 3       # S/4 halved down to 4
        self.emo_convs = nn.ModuleList(ConvBlock(4 * w, 4 * w) for _ in range(stages))
        self.avg_pool_2 = nn.AvgPool2d(4)
        self.emo_fc_2 = nn.Sequential(nn.Linear(4 * w, 2 * w), nn.BatchNorm1d(2 * w),
                                      nn.ReLU(inplace=True),
                                      nn.Linear(2 * w, n_expression + n_reg))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)), True)
        x = F.max_pool2d(self.conv2(x), 2, stride=2)
        x = self.conv4(self.conv3(x))
        for block in self.emo_convs:
            x = block(F.max_pool2d(x, 2, stride=2))
        x = self.avg_pool_2(x).flatten(1)
        return self.emo_fc_2(x)


# ---------------------------------------------------------------- the seed's benchmark

def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_calls(model: nn.Module, x: torch.Tensor, iters: int) -> tuple[float, float]:
    """(first call's seconds, later calls' mean seconds) of ``model(x)`` under no_grad,
    wall clock around synchronized calls, as the seed times EmoNet."""
    device = x.device.type
    with torch.no_grad():
        _sync(device)
        t0 = time.perf_counter()
        model(x)
        _sync(device)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(iters):
            model(x)
        _sync(device)
    return first, (time.perf_counter() - t0) / iters


def main(argv: Sequence[str] | None = None) -> None:
    from opendnn import backends
    import opendnn.torch as odt

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, nargs="*", default=None)
    p.add_argument("--size", type=int, default=None, help="input side (power of two)")
    p.add_argument("--iters", type=int, default=None)
    p.add_argument("--dtype", default="bfloat16" if torch.cuda.is_available() else "float32")
    args = p.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    size = args.size or (256 if cuda else 32)
    batches = args.batch or ([32, 1] if cuda else [2])
    iters = args.iters or (100 if cuda else 2)
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    width = 64 if cuda else 8
    base = EmoNet(n_expression=8, width=width, input_size=size).to(device, dtype).eval()
    base = base.to(memory_format=torch.channels_last)
    model = odt.convert(copy.deepcopy(base))
    print(f"EmoNet-style network on {device}, {size}x{size}, {dtype}, channels_last, eval")
    modes = (False, True) if cuda else (False,)   # on the CPU a find runs the interpreter
    for n in batches:
        x = torch.randn(n, 3, size, size, device=device, dtype=dtype)
        x = x.to(memory_format=torch.channels_last)
        for on in modes:
            torch.backends.cudnn.benchmark = on
            first, later = time_calls(base, x, iters)
            print(f"  N={n:<3d} PyTorch benchmark={'on ' if on else 'off'}: first call "
                  f"{first * 1e3:9.1f} ms, later calls {later * 1e3:8.2f} ms")
        torch.backends.cudnn.benchmark = False
        off = None
        for on in modes:
            backends.benchmark = on
            first, later = time_calls(model, x, iters)
            off = off or later
            print(f"  N={n:<3d} opendnn benchmark={'on ' if on else 'off'}: first call "
                  f"{first * 1e3:9.1f} ms, later calls {later * 1e3:8.2f} ms "
                  f"(x{off / later:.2f} vs off)")
        backends.benchmark = False
        with torch.no_grad():
            ref = base(x).float()
            err = (model(x).float() - ref).norm() / ref.norm()
        print(f"  N={n:<3d} relative difference to PyTorch: {err.item():.2e}")
    print("  opendnn fallbacks to PyTorch:", odt.fallbacks() or "none")


if __name__ == "__main__":
    main()
