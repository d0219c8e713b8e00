"""Sweep fusion-engine reduction knobs on the H100 (row and column sums, 8192^2)."""
import itertools
import torch
from triton.testing import do_bench
import opendnn.frontend as cudnn

for (shape, oshape), dt in itertools.product([((8192, 8192), (1, 8192))],
                                             (torch.bfloat16,)):
    x = torch.randn(shape, device="cuda", dtype=dt)
    out = torch.empty(oshape, device="cuda")
    g = cudnn.pygraph()
    tx = g.tensor_like(x)
    y = g.reduction(tx, mode=cudnn.reduction_mode.ADD).set_dim(list(oshape)).set_output(True)
    y.set_data_type(cudnn.data_type.FLOAT)
    g.validate()
    row = oshape[1] == 1
    grid = ([(bk, br, sp, w, st) for bk in (1,) for br in (2048,) for sp in (1,)
             for w in (16,) for st in (1,) if bk * br <= 16384] if row else
            [(bk, br, sp, w, st) for bk in (32, 64, 128) for br in (8, 16, 32) for sp in (8, 16, 32)
             for w in (1, 2, 4) for st in (1,) if bk * br <= 8192])
    res = []
    for bk, br, sp, w, st in grid:
        g2 = cudnn.pygraph(); tx2 = g2.tensor_like(x)
        y2 = g2.reduction(tx2, mode=cudnn.reduction_mode.ADD).set_dim(list(oshape)).set_output(True)
        y2.set_data_type(cudnn.data_type.FLOAT)
        g2.create_execution_plan(1, dict(BLOCK_KEPT=bk, BLOCK_RED=br, SPLIT=sp, num_warps=w, num_stages=st))
        ws = torch.empty(g2.get_workspace_size(), device="cuda", dtype=torch.uint8)
        ms = do_bench(lambda: g2.execute({tx2: x, y2: out}, ws), warmup=5, rep=25, return_mode="median")
        gbs = (x.numel() * x.element_size()) / ms / 1e6
        res.append((gbs, bk, br, sp, w, st))
    res.sort(reverse=True)
    print(shape, oshape, dt, "best:", [f"{g:.0f}GB/s bk{bk} br{br} sp{sp} w{w} st{st}"
                                       for g, bk, br, sp, w, st in res[:4]], flush=True)
