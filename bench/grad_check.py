"""Conformance check of training through opendnn.torch: one forward + backward of ResNet-50
(train mode, channels_last, N=16, 224x224) and the parameter gradients of opendnn
(converted modules, eager; and the torch.compile backend) and of PyTorch itself against a
float64 PyTorch model, in fp32 (TF32 off) and under bf16 autocast. Prints the loss, the
median relative error of the parameters' gradients and the five worst parameters; opendnn's
errors should sit at PyTorch's own.

Run (GPU; about two minutes): PYTHONPATH=src python bench/grad_check.py"""

import copy

import torch

import opendnn.torch as odt
import opendnn.torch.compile  # noqa: F401
from opendnn.bench import models as bm


def grads(model, x, target, autocast):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        loss = torch.nn.functional.cross_entropy(model(x), target)
    loss.backward()
    named = getattr(model, "_orig_mod", model).named_parameters()
    return loss.item(), {n: p.grad.double() for n, p in named}


def main():
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    base, _ = bm.resnet50()
    base = base.to(memory_format=bm.CL).train()
    x = torch.randn(16, 3, 224, 224, device="cuda").contiguous(memory_format=bm.CL)
    target = torch.randint(0, bm.CLASSES, (16,), device="cuda")
    exact_loss, exact = grads(copy.deepcopy(base).double(), x.double(), target, False)
    for autocast in (False, True):
        for name, model in (
            ("pytorch", copy.deepcopy(base)),
            ("eager", odt.convert(copy.deepcopy(base))),
            ("compile", torch.compile(copy.deepcopy(base), backend="opendnn")),
        ):
            ref_loss, ref = exact_loss, exact
            loss, g = grads(model, x, target, autocast)
            errs = sorted(
                (((g[k] - v).norm() / (v.norm() + 1e-12)).item(), k) for k, v in ref.items()
            )
            print(
                f"{'bf16' if autocast else 'fp32'} {name}: loss {loss:.5f} vs {ref_loss:.5f}"
                f"; median rel err {errs[len(errs) // 2][0]:.2e}; worst:",
                flush=True,
            )
            for e, k in errs[-5:][::-1]:
                print(f"     {e:.2e}  {k}  |g| {ref[k].norm().item():.3e}")


if __name__ == "__main__":
    main()
