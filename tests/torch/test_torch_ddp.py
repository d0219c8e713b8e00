"""DistributedDataParallel over opendnn.torch: two processes (gloo, CPU, spawned, a free
local port) train a small converted CNN on halves of each global batch; the parameters
after the steps equal those of one process training the same model on the whole batches
(opendnn, and PyTorch itself).

Why they must agree: the loss is a batch mean and the model has no batch statistics
(GroupNorm normalizes each sample), so the mean of the two halves' gradients -- what
DDP's all-reduce forms -- is the whole batch's gradient; SGD then takes the same step.
The two ranks start from the same weights (DDP broadcasts rank 0's at construction).
"""

from __future__ import annotations

import copy
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

WORLD = 2
STEPS = 3
BATCH = 4  # global; BATCH // WORLD per rank
TOL = 1e-5


def small_cnn() -> nn.Module:
    """(N, 3, 8, 8) -> (N, 5): conv, group norm, ReLU, max pool, conv, GELU, average
    pool, linear (no batch statistics, so data parallelism is exact)."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.GroupNorm(2, 8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.GELU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 5),
    )


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    return [
        (torch.randn(BATCH, 3, 8, 8, generator=gen), torch.randint(0, 5, (BATCH,), generator=gen))
        for _ in range(STEPS)
    ]


def train(model: nn.Module, data, rank: int = 0, world: int = 1) -> list[float]:
    """SGD with momentum on cross entropy; rank ``rank`` of ``world`` takes its slice of
    every batch. Returns this process's losses."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    per = BATCH // world
    losses = []
    for x, target in data:
        x, target = x[rank * per : (rank + 1) * per], target[rank * per : (rank + 1) * per]
        loss = nn.functional.cross_entropy(model(x), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _worker(rank: int, world: int, port: int, out: str) -> None:
    """One DDP rank: converted model, gloo all-reduce; rank 0 saves the parameters."""
    from opendnn.torch import convert, fallbacks

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        model = convert(small_cnn())
        ddp = nn.parallel.DistributedDataParallel(model)
        train(ddp, batches(), rank, world)
        if fallbacks():
            raise RuntimeError(f"rank {rank}: opendnn fell back to PyTorch: {fallbacks()}")
        if rank == 0:
            torch.save(model.state_dict(), out)
        # the DDP reducer goes before its process group (a rank once aborted at exit,
        # "terminate called without an active exception", with it still alive)
        del ddp
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _relerr(a, b) -> float:
    return ((a.double() - b.double()).norm() / max(b.double().norm().item(), 1e-30)).item()


@pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="torch.distributed with gloo is not available",
)
def test_ddp_two_processes_match_single_process(tmp_path):
    from opendnn.torch import clear_fallbacks, convert, fallbacks

    out = str(tmp_path / "ddp_rank0.pt")
    mp.spawn(_worker, args=(WORLD, _free_port(), out), nprocs=WORLD, join=True)
    assert os.path.exists(out)
    ddp_state = torch.load(out)

    clear_fallbacks()
    start = small_cnn()
    single, plain = convert(copy.deepcopy(start)), copy.deepcopy(start)
    train(single, batches())
    train(plain, batches())
    assert fallbacks() == {}
    for name, p0 in start.state_dict().items():
        moved = {
            k: (s.state_dict()[name] - p0) for k, s in (("single", single), ("pytorch", plain))
        }
        ddp_moved = ddp_state[name] - p0
        assert _relerr(ddp_moved, moved["single"]) < TOL, f"{name}: DDP vs one process"
        assert _relerr(moved["single"], moved["pytorch"]) < 10 * TOL, f"{name}: vs PyTorch"
