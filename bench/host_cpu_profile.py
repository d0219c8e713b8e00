"""opendnn.torch's host time per call, on the CPU with every kernel launch stubbed out
(so only Python runs): a converted ResNet-50 at batch 2, 64x64 (the layer count of the
real thing, small tensors), eval forward under no_grad and a training step (forward,
backward, SGD) with and without bf16 autocast. Prints ms per step and, with ``-p``, the
functions with the most own time.
Run (CPU): PYTHONPATH=src python bench/host_cpu_profile.py [-p]"""
import cProfile
import importlib.util
import io
import os
import pstats
import sys
import time

import torch

import opendnn.torch as odt
from opendnn.runtime import launch

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "resnet.py")
spec = importlib.util.spec_from_file_location("resnet_example", path)
resnet = importlib.util.module_from_spec(spec)
spec.loader.exec_module(resnet)


def _steps(model, x, target):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def infer():
        model.eval()
        with torch.no_grad():
            model(x)

    def train(autocast):
        model.train()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = torch.nn.functional.cross_entropy(model(x), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()     # no optimizer step: on the CPU it is real work, not host time
    return {"infer": infer, "train": lambda: train(False),
            "train-autocast": lambda: train(True)}


def main(prof: bool) -> None:
    launch.LaunchList.run_launches = lambda self, buffers, workspace, stream=None: None
    launch.DualKernel.__call__ = lambda self, grid, *args, **constexprs: None
    torch.manual_seed(0)
    model = odt.convert(resnet.resnet50(num_classes=10).to(memory_format=torch.channels_last))
    x = torch.randn(2, 3, 64, 64).contiguous(memory_format=torch.channels_last)
    target = torch.randint(0, 10, (2,))
    for name, step in _steps(model, x, target).items():
        step()
        step()
        t0 = time.perf_counter()
        for _ in range(5):
            step()
        ms = (time.perf_counter() - t0) / 5 * 1e3
        print(f"{name:15s} {ms:8.2f} ms host per step (launches stubbed)")
        if prof:
            pr = cProfile.Profile()
            pr.enable()
            step()
            pr.disable()
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
            print(s.getvalue()[:6000])
    print("fallbacks:", odt.fallbacks())


if __name__ == "__main__":
    main("-p" in sys.argv)
