"""Where opendnn eager's host time goes on the GPU machine (real launches): cProfile of a
converted ResNet-50 (bench/models.py's set-up), N=64 bf16 channels_last, inference
(no_grad) and a training step (bf16 autocast, SGD). Prints the functions with the most
own time and the most cumulative time; full listings under $OUT.
Run (GPU): PYTHONPATH=src python bench/models_host_profile.py [infer|train ...]"""
import cProfile
import io
import os
import pstats
import sys
import time

import torch

from opendnn.bench import models as bm
import opendnn.torch as odt


def _profile(name: str, step, iters: int = 5) -> None:
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    host = (time.perf_counter() - t0) / iters
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / iters
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(iters):
        step()
    pr.disable()
    torch.cuda.synchronize()
    print(f"== {name}: host {host * 1e3:.2f} ms / step, wall {wall * 1e3:.2f} ms")
    for key, n in (("tottime", 30), ("cumulative", 45)):
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats(key).print_stats(n)
        text = s.getvalue()
        print(text[text.find("   ncalls"):][:9000])
        with open(os.path.join(os.environ.get("OUT", "."), f"host_{name}_{key}.txt"), "w") as f:
            s2 = io.StringIO()
            pstats.Stats(pr, stream=s2).sort_stats(key).print_stats(200)
            f.write(s2.getvalue())


def main(modes) -> None:
    base, _ = bm.resnet50()
    base = base.to(memory_format=bm.CL)
    for mode in modes:
        m = base.to(torch.bfloat16) if mode == "infer" else base
        model = odt.convert(__import__("copy").deepcopy(m))
        x = torch.randn(64, 3, 224, 224, device="cuda",
                        dtype=torch.bfloat16 if mode == "infer" else torch.float32)
        x = x.contiguous(memory_format=bm.CL)
        target = torch.randint(0, bm.CLASSES, (64,), device="cuda")
        _profile(mode, bm._steps(mode, model, x, target))
        print("fallbacks:", odt.fallbacks())


if __name__ == "__main__":
    main(sys.argv[1:] or ["infer", "train"])
