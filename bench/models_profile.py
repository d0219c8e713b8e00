"""Where ResNet-50's time goes in opendnn eager (bench/results/h100-2026-11-22-s10-models-a:
41.6 ms vs PyTorch's 5.8 ms at N=64 bf16 inference): host time per forward against the
GPU's kernel time (torch.profiler), and the ten costliest kernels.
Run (GPU): PYTHONPATH=src python bench/models_profile.py"""
import importlib.util
import os
import time

import torch
from torch.profiler import ProfilerActivity, profile

import opendnn.torch as odnn

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "resnet.py")
spec = importlib.util.spec_from_file_location("resnet_example", path)
resnet = importlib.util.module_from_spec(spec)
spec.loader.exec_module(resnet)

for batch in (64, 1):
    model = resnet.resnet50().cuda().to(torch.bfloat16).to(memory_format=torch.channels_last)
    model.eval()
    odnn.convert(model)
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.bfloat16).to(
        memory_format=torch.channels_last)
    with torch.no_grad():
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            model(x)
        t_launch = (time.perf_counter() - t0) / 10
        torch.cuda.synchronize()
        t_wall = (time.perf_counter() - t0) / 10
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            model(x)
            torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    gpu = sum(e.self_device_time_total for e in events) / 1e3
    print(f"N={batch}: host (launch loop) {t_launch * 1e3:.2f} ms / forward, wall "
          f"{t_wall * 1e3:.2f} ms, GPU kernels {gpu:.2f} ms", flush=True)
    for e in sorted(events, key=lambda e: -e.self_device_time_total)[:10]:
        print(f"   {e.self_device_time_total / 1e3:8.3f} ms  {e.count:4d}x  {e.key[:90]}")
