"""Where ResNet-50's time goes in opendnn eager (bench/models.py's set-up, channels_last):
host time per step against the GPU's kernel time (torch.profiler), and the costliest
kernels. Modes: infer64 / infer1 (bf16, no_grad), train (N=64, bf16 autocast, SGD),
train-pytorch (the same step on PyTorch's own modules, for comparison).
Run (GPU): PYTHONPATH=src python bench/models_profile.py [infer64 infer1 train ...]"""
import copy
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

import opendnn.torch as odt
from opendnn.bench import models as bm


def _profile(name: str, step, top: int) -> None:
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        step()
    t_launch = (time.perf_counter() - t0) / 5
    torch.cuda.synchronize()
    t_wall = (time.perf_counter() - t0) / 5
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    gpu = sum(e.self_device_time_total for e in events) / 1e3
    print(f"{name}: host (launch loop) {t_launch * 1e3:.2f} ms / step, wall "
          f"{t_wall * 1e3:.2f} ms, GPU kernels {gpu:.2f} ms", flush=True)
    for e in sorted(events, key=lambda e: -e.self_device_time_total)[:top]:
        print(f"   {e.self_device_time_total / 1e3:8.3f} ms  {e.count:4d}x  {e.key[:100]}")


def main(modes) -> None:
    base, _ = bm.resnet50()
    base = base.to(memory_format=bm.CL)
    for mode in modes:
        kind, n = ("train", 64) if mode.startswith("train") else ("infer", int(mode[5:]))
        m = copy.deepcopy(base.to(torch.bfloat16) if kind == "infer" else base)
        model = m if mode == "train-pytorch" else odt.convert(m)
        x = torch.randn(n, 3, 224, 224, device="cuda",
                        dtype=torch.bfloat16 if kind == "infer" else torch.float32)
        x = x.contiguous(memory_format=bm.CL)
        target = torch.randint(0, bm.CLASSES, (n,), device="cuda")
        _profile(mode, bm._steps(kind, model, x, target), 25 if kind == "train" else 10)
        del model
        torch.cuda.empty_cache()
    print("fallbacks:", odt.fallbacks())


if __name__ == "__main__":
    main(sys.argv[1:] or ["infer64", "infer1"])
