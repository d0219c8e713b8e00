"""Sweep of the norm engine's one-pass backward (PATH=1) at 8192 x 8192 bf16: rows per
tile, warps, persistent programs and PREFETCH, layer norm and RMS norm (issue 4's goal: >= 2.4 TB/s
counting dy, x and dx once).
Run (GPU): PYTHONPATH=src python bench/norm_bwd_sweep.py"""
import torch
from triton.testing import do_bench

import opendnn.bench.norm as N
import opendnn.frontend as cudnn
from opendnn.bench.norm import _backward

SMS = torch.cuda.get_device_properties(0).multi_processor_count


def main():
    R = L = 8192
    x = torch.randn(R, L, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    w = torch.randn(1, L, device="cuda", dtype=torch.bfloat16)
    xf = x.float()
    mean = xf.mean(1, keepdim=True)
    rstd = torch.rsqrt(xf.var(1, unbiased=False, keepdim=True) + 1e-5)
    nb = 3 * x.numel() * 2
    res = []
    for kind in ("layernorm", "rmsnorm"):
        fn, plan = _backward(cudnn, kind, dy, x, w, mean, rstd)
        ms = do_bench(fn, warmup=10, rep=50, return_mode="median")
        print(f"{kind} heuristic {plan}: {nb / ms / 1e6:.0f} GB/s", flush=True)
        for br, warps, pre in ((1, 32, 0), (1, 32, 1), (2, 32, 0), (2, 32, 1)):
            for progs in (SMS, 2 * SMS):
                orig = N._build

                def build(g, cd, pack, _k=dict(PATH=1, BLOCK_L=L, BLOCK_ROWS=br, SPLIT=1,
                                               PROGRAMS=progs, num_warps=warps,
                                               PREFETCH=pre)):
                    g.validate()
                    g.build_operation_graph()
                    g.create_execution_plan(26, _k)
                    g.check_support()
                    g.build_plans()
                    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda",
                                     dtype=torch.uint8)
                    return (lambda: g.execute(pack, ws)), g.get_plan_name_at_index(0)
                N._build = build
                try:
                    f2, name = _backward(cudnn, kind, dy, x, w, mean, rstd)
                    f2()
                    torch.cuda.synchronize()
                    ms = do_bench(f2, warmup=10, rep=50, return_mode="median")
                    res.append((nb / ms / 1e6, kind, br, warps, progs, pre))
                    print(f"  {kind} rows {br} warps {warps} programs {progs} prefetch {pre}: "
                          f"{nb / ms / 1e6:.0f} GB/s", flush=True)
                except Exception as e:   # noqa: BLE001 -- reported
                    print(f"  {kind} rows {br} warps {warps} programs {progs}: {str(e)[:90]}")
                finally:
                    N._build = orig
    for kind in ("layernorm", "rmsnorm"):
        for r in sorted((r for r in res if r[1] == kind), reverse=True)[:3]:
            print(f"{kind}: {r[0]:.0f} GB/s rows {r[2]} warps {r[3]} programs {r[4]} "
                  f"prefetch {r[5]}")


if __name__ == "__main__":
    main()
