"""Sweep of the softmax engine's one-read path (PASSES=4) at 256 x 262144 bf16, forward
and backward, softmax and log-softmax: chunk length and warps (issue 4's goals: forward
>= 2.0 TB/s, backward >= 2.4).
Run (GPU): PYTHONPATH=src python bench/softmax_coop_sweep.py"""
import torch
from triton.testing import do_bench

import opendnn.frontend as cudnn

SMS = torch.cuda.get_device_properties(0).multi_processor_count


def _plan(g, pack, knobs):
    g.validate()
    g.build_operation_graph()
    g.create_execution_plan(25, knobs)
    g.check_support()
    g.build_plans()
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    return lambda: g.execute(pack, ws)


def main():
    R, L = 256, 262144
    x = torch.randn(R, L, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    res = []
    for log in (False, True):
        y = torch.log_softmax(x, -1) if log else torch.softmax(x, -1)
        for backward in (False, True):
            for block in (4096, 8192, 16384):
                split = L // block
                if split > 64:
                    continue
                for warps in (8, 16):
                    for per_sm in (1, 2):
                        progs = (per_sm * SMS // split) * split
                        if progs < split:
                            continue
                        kn = dict(PASSES=4, BLOCK_L=block, BLOCK_ROWS=1, SPLIT=split,
                                  num_warps=warps, PROGRAMS=progs)
                        g = cudnn.pygraph()
                        if backward:
                            tdy, ty = g.tensor_like(dy), g.tensor_like(y)
                            out = g.softmax_backward(tdy, ty, axis=-1, log=log)
                            pack = {tdy: dy, ty: y}
                            nb = 3 * x.numel() * 2
                        else:
                            tx = g.tensor_like(x)
                            out = g.softmax(tx, axis=-1, log=log)
                            pack = {tx: x}
                            nb = 2 * x.numel() * 2
                        out.set_output(True)
                        pack[out] = torch.empty_like(x)
                        try:
                            fn = _plan(g, pack, kn)
                            fn()
                            torch.cuda.synchronize()
                        except Exception as e:   # noqa: BLE001 -- reported
                            print("FAILED", log, backward, kn, str(e)[:80])
                            continue
                        ms = do_bench(fn, warmup=5, rep=30, return_mode="median")
                        res.append((nb / ms / 1e6, log, backward, block, warps, per_sm))
                        print(f"  log={log} bwd={backward} block {block} warps {warps} "
                              f"per_sm {per_sm}: {nb / ms / 1e6:.0f} GB/s", flush=True)
    for log in (False, True):
        for backward in (False, True):
            best = sorted((r for r in res if r[1] == log and r[2] == backward), reverse=True)
            for r in best[:2]:
                print(f"log={log} bwd={backward}: {r[0]:.0f} GB/s block {r[3]} warps {r[4]} "
                      f"per_sm {r[5]}")


if __name__ == "__main__":
    main()
