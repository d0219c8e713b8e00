"""ResNet on opendnn: torchvision's ResNet (same classes, module names and state_dict
layout as ``torchvision.models.resnet``, so ``load_state_dict`` works both ways), converted
to opendnn with ``opendnn.torch.convert``, for inference and training on synthetic data.

    PYTHONPATH=src python examples/resnet.py            # GPU: ResNet-50, N=64, bf16
    PYTHONPATH=src python examples/resnet.py --steps 3  # CPU: tiny_resnet, 16x16 inputs

On a GPU it prints ResNet-50 images/s for opendnn (converted) and PyTorch (cuDNN), bf16
autocast, channels_last, inference (eval, no_grad) and SGD training; on the CPU (Triton
interpreter: correct, not fast) it runs ``tiny_resnet`` and prints the same lines.

``tiny_resnet()``: the same classes at widths 8/16/32/64 and one BasicBlock per stage,
for CPU tests. ``ResNet(..., widths=...)`` is this file's only addition to torchvision's
constructor (its default is torchvision's 64/128/256/512).
"""
from __future__ import annotations

import argparse
import copy
import time
from typing import Callable, Sequence

import torch
import torch.nn as nn

__all__ = ["BasicBlock", "Bottleneck", "ResNet", "resnet18", "resnet34", "resnet50",
           "tiny_resnet", "main"]


def conv3x3(in_planes: int, out_planes: int, stride: int = 1, groups: int = 1,
            dilation: int = 1) -> nn.Conv2d:
    """3x3 convolution with padding"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=dilation,
                     groups=groups, bias=False, dilation=dilation)


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    """1x1 convolution"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm, ReLU and the identity (or 1x1 downsample)
    added before the last ReLU. (N, inplanes, H, W) -> (N, planes, H/stride, W/stride)."""
    expansion: int = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1,
                 downsample: nn.Module | None = None, groups: int = 1, base_width: int = 64,
                 dilation: int = 1, norm_layer: Callable[..., nn.Module] | None = None):
        super().__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock only supports groups=1 and base_width=64")
        if dilation > 1:
            raise NotImplementedError("Dilation > 1 not supported in BasicBlock")
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    """1x1 (reduce) -> 3x3 (stride) -> 1x1 (expand x4) with batch norms and ReLUs, the
    identity added before the last ReLU (torchvision's V1.5: the stride on the 3x3)."""
    expansion: int = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1,
                 downsample: nn.Module | None = None, groups: int = 1, base_width: int = 64,
                 dilation: int = 1, norm_layer: Callable[..., nn.Module] | None = None):
        super().__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = norm_layer(width)
        self.conv2 = conv3x3(width, width, stride, groups, dilation)
        self.bn2 = norm_layer(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    """torchvision's ResNet: stem (7x7/2 conv, BN, ReLU, 3x3/2 max pool), four stages of
    ``block`` (``layers[i]`` blocks, ``widths[i]`` planes, strides 1, 2, 2, 2), global
    average pool and a linear classifier. (N, 3, H, W) -> (N, num_classes)."""

    def __init__(self, block: type, layers: Sequence[int], num_classes: int = 1000,
                 zero_init_residual: bool = False, groups: int = 1, width_per_group: int = 64,
                 replace_stride_with_dilation: Sequence[bool] | None = None,
                 norm_layer: Callable[..., nn.Module] | None = None,
                 widths: Sequence[int] = (64, 128, 256, 512)):
        super().__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        self._norm_layer = norm_layer
        self.inplanes = widths[0]
        self.dilation = 1
        if replace_stride_with_dilation is None:
            replace_stride_with_dilation = [False, False, False]
        if len(replace_stride_with_dilation) != 3:
            raise ValueError("replace_stride_with_dilation should be None or a 3-element "
                             f"tuple, got {replace_stride_with_dilation}")
        self.groups = groups
        self.base_width = width_per_group
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3,
                               bias=False)
        self.bn1 = norm_layer(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, widths[0], layers[0])
        self.layer2 = self._make_layer(block, widths[1], layers[1], stride=2,
                                       dilate=replace_stride_with_dilation[0])
        self.layer3 = self._make_layer(block, widths[2], layers[2], stride=2,
                                       dilate=replace_stride_with_dilation[1])
        self.layer4 = self._make_layer(block, widths[3], layers[3], stride=2,
                                       dilate=replace_stride_with_dilation[2])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[3] * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, Bottleneck) and m.bn3.weight is not None:
                    nn.init.constant_(m.bn3.weight, 0)
                elif isinstance(m, BasicBlock) and m.bn2.weight is not None:
                    nn.init.constant_(m.bn2.weight, 0)

    def _make_layer(self, block: type, planes: int, blocks: int, stride: int = 1,
                    dilate: bool = False) -> nn.Sequential:
        norm_layer = self._norm_layer
        downsample = None
        previous_dilation = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
                                       norm_layer(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample, self.groups, self.base_width,
                        previous_dilation, norm_layer)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, groups=self.groups,
                                base_width=self.base_width, dilation=self.dilation,
                                norm_layer=norm_layer))
        return nn.Sequential(*layers)

    def _forward_impl(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._forward_impl(x)


def _resnet(block: type, layers: Sequence[int], weights, **kwargs) -> ResNet:
    if weights is not None:
        raise ValueError("pretrained weights are not downloaded here: load a state_dict "
                         "(torchvision's loads as is) into the model instead")
    return ResNet(block, layers, **kwargs)


def resnet18(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """ResNet-18 (BasicBlock, 2-2-2-2), torchvision's layout."""
    return _resnet(BasicBlock, [2, 2, 2, 2], weights, **kwargs)


def resnet34(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """ResNet-34 (BasicBlock, 3-4-6-3), torchvision's layout."""
    return _resnet(BasicBlock, [3, 4, 6, 3], weights, **kwargs)


def resnet50(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """ResNet-50 (Bottleneck, 3-4-6-3), torchvision's layout."""
    return _resnet(Bottleneck, [3, 4, 6, 3], weights, **kwargs)


def tiny_resnet(num_classes: int = 10, block: type = BasicBlock,
                widths: Sequence[int] = (8, 16, 32, 64), layers: Sequence[int] = (1, 1, 1, 1),
                **kwargs) -> ResNet:
    """The same classes, narrow and shallow, for CPU runs (the Triton interpreter)."""
    return ResNet(block, layers, num_classes=num_classes, widths=widths, **kwargs)


# ---------------------------------------------------------------- the demo

def _timed(fn: Callable[[], object], iters: int, device: str) -> float:
    """Seconds per call of ``fn`` (CUDA events on a GPU, wall clock on the CPU)."""
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def _train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
                target: torch.Tensor, autocast: torch.dtype | None) -> torch.Tensor:
    """One SGD step of cross-entropy training; returns the loss (not synchronized)."""
    with torch.autocast(x.device.type, dtype=autocast or torch.float32,
                        enabled=autocast is not None):
        loss = nn.functional.cross_entropy(model(x), target)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


def main(argv: Sequence[str] | None = None) -> None:
    import opendnn.torch as odt

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--steps", type=int, default=None, help="timed iterations")
    p.add_argument("--size", type=int, default=None, help="input height and width")
    args = p.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    batch = args.batch or (64 if cuda else 2)
    size = args.size or (224 if cuda else 16)
    steps = args.steps or (20 if cuda else 2)
    autocast = torch.bfloat16 if cuda else None
    torch.manual_seed(0)
    base = (resnet50() if cuda else tiny_resnet()).to(device)
    base = base.to(memory_format=torch.channels_last)
    classes = base.fc.out_features
    x = torch.randn(batch, 3, size, size, device=device).to(memory_format=torch.channels_last)
    target = torch.randint(0, classes, (batch,), device=device)
    print(f"{'ResNet-50' if cuda else 'tiny ResNet'} on {device}: N={batch}, {size}x{size}, "
          f"{'bf16 autocast' if autocast else 'fp32'}, channels_last")
    for name in ("pytorch", "opendnn"):
        model = copy.deepcopy(base)
        if name == "opendnn":
            odt.convert(model)
        model.eval()

        def infer():
            with torch.no_grad(), torch.autocast(device, dtype=autocast or torch.float32,
                                                 enabled=autocast is not None):
                return model(x)
        t0 = time.perf_counter()
        infer()                                       # first call: kernels compile
        if cuda:
            torch.cuda.synchronize()
        warm = time.perf_counter() - t0
        sec = _timed(infer, steps, device)
        print(f"  {name:8s} inference {batch / sec:9.1f} images/s  "
              f"(first call {warm:.1f} s)")
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        t0 = time.perf_counter()
        loss0 = _train_step(model, opt, x, target, autocast).item()
        warm = time.perf_counter() - t0
        sec = _timed(lambda: _train_step(model, opt, x, target, autocast), steps, device)
        loss = _train_step(model, opt, x, target, autocast).item()
        print(f"  {name:8s} training  {batch / sec:9.1f} images/s  "
              f"(first step {warm:.1f} s; loss {loss0:.3f} -> {loss:.3f})")
    fell_back = odt.fallbacks()
    print("  opendnn fallbacks to PyTorch:", fell_back or "none")


if __name__ == "__main__":
    main()
