"""Conformance check of ``torch.compile(backend="opendnn", mode="reduce-overhead")`` (the
rewritten graph replayed as CUDA graphs): ResNet-50, N=64, bf16 autocast, eight SGD steps
and ten inference calls each under PyTorch eager, the backend's default mode and
reduce-overhead, same weights and inputs. Prints the losses, ms per step, the worst
relative difference of the running statistics and conv1 weights against PyTorch after
training, and the first logits in eval mode: the three modes should agree.

Run (GPU; about three minutes, mostly compiling): PYTHONPATH=src python bench/cudagraphs_check.py"""

import copy
import time

import torch

import opendnn.torch.compile  # noqa: F401  (registers the backend)
from opendnn.bench import models as bm


def main():
    base, _ = bm.resnet50()
    base = base.to(memory_format=bm.CL)
    x = torch.randn(64, 3, 224, 224, device="cuda").contiguous(memory_format=bm.CL)
    target = torch.randint(0, bm.CLASSES, (64,), device="cuda")
    losses, stats = {}, {}
    for mode in ("pytorch", "default", "reduce-overhead"):
        raw = copy.deepcopy(base)
        model = raw if mode == "pytorch" else torch.compile(raw, backend="opendnn", mode=mode)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        ls = []
        for i in range(8):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            ls.append(loss.item())
            if i == 3:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) / 4 * 1e3
        losses[mode] = ls
        print(f"train {mode:16s} {ms:8.2f} ms/step losses {[round(v, 4) for v in ls]}", flush=True)
        stats[mode] = {
            k: v.detach().float().clone()
            for k, v in raw.state_dict().items()
            if "running" in k or k.endswith("conv1.weight")
        }
        if mode != "pytorch":
            worst = max(
                ((stats[mode][k] - v).abs().max().item() / (v.abs().max().item() + 1e-6), k)
                for k, v in stats["pytorch"].items()
            )
            print(f"   state vs pytorch: worst relative difference {worst[0]:.3g} ({worst[1]})")
        model.eval()
        xb = x.to(torch.bfloat16)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            for _ in range(3):
                y = model(xb)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(10):
                y = model(xb)
            torch.cuda.synchronize()
        print(
            f"infer {mode:16s} {(time.perf_counter() - t0) / 10 * 1e3:8.2f} ms  "
            f"out[0,:3] {y[0, :3].float().tolist()}",
            flush=True,
        )


if __name__ == "__main__":
    main()
