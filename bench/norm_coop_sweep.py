"""Sweep of the norm engine's one-read path (PATH=4) for long rows, layer norm and RMS
norm, forward and backward, bf16: chunk length, warps, programs per SM and PREFETCH,
against the engine's heuristic choice in the same run (issue 4's goals: forward >= 2.0
TB/s at 262144, backward >= 2.4). Each config's Y / DX is checked against PyTorch.
Run (GPU): PYTHONPATH=src python bench/norm_coop_sweep.py [quick] [8192: backward at
8192 x 8192, 2-4 chunks a row, against the heuristic's one-pass plan] [chunk: chunks shorter
than their tile, and PREFETCH=2] [lag: the backward's late meeting] [bwd: the backward only]
[262144: that width only]"""
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import opendnn.bench.norm as N
import opendnn.frontend as cudnn

SMS = torch.cuda.get_device_properties(0).multi_processor_count
GRID = [(b, w, pre, per) for b in (4096, 8192, 16384) for w in (8, 16) for pre in (0, 1)
        for per in (1, 2)]
SHORT = [(4096, 8, 1, 1), (4096, 4, 1, 2), (2048, 4, 1, 2), (2048, 8, 1, 2), (2048, 4, 1, 1),
         (4096, 8, 1, 2)]      # 8192-wide rows: 2 or 4 chunks
# session 12: (block, warps, prefetch, per_sm, chunk); chunks below the tile let SPLIT x
# groups fill all 132 SMs (262144: 33 x 4); PREFETCH 2 loads the next row first
CHUNKS = {65536: [(8192, 8, 1, 1), (8192, 8, 2, 1)],
          262144: [(8192, 8, 1, 1, 7944), (8192, 8, 2, 1, 7944), (8192, 8, 1, 1, 8128),
                   (8192, 8, 2, 1, 8128), (8192, 8, 2, 1, 8064)]}
# session 13: (block, warps, prefetch, per_sm, chunk, lag): the meeting one step late
LAGS = {65536: [(8192, 8, 2, 1, 0, 0)] + [(8192, 8, 0, 1, 0, g) for g in (1, 2)],
        131072: [(8192, 8, p, 1, 0, 0) for p in (1, 2)] + [(8192, 8, 0, 1, 0, 2)],
        262144: [(8192, 8, 1, 1, 7944, 0), (8192, 8, 1, 1, 0, 0)] +
        [(b, w, 0, per, c, g) for g in (1, 2) for b, w, per, c in
         ((8192, 8, 1, 7944), (8192, 8, 1, 0), (4096, 4, 2, 0))]}
FWD_CHUNKS = [(16384, 8, 1, 1), (16384, 8, 2, 1)]     # PREFETCH 2: the next row loaded first
QUICK = [(4096, 8, 1, 2), (4096, 4, 1, 2), (8192, 16, 1, 1), (8192, 8, 1, 1),
         (8192, 8, 0, 1), (8192, 8, 0, 2), (16384, 8, 1, 1), (16384, 8, 0, 2)]


def _run(kind, bwd, x, w, b, dy, mean, rstd, knobs):
    orig, seen = N._build, {}

    def build(g, cd, pack):
        if knobs is None:
            fn, name = orig(g, cd, pack)
        else:
            g.validate()
            g.build_operation_graph()
            g.create_execution_plan(26, knobs)
            g.check_support()
            g.build_plans()
            ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
            fn, name = (lambda: g.execute(pack, ws)), g.get_plan_name_at_index(0)
        seen["pack"], seen["g"] = pack, g
        return fn, name
    N._build = build
    try:
        if bwd:
            fn, name = N._backward(cudnn, kind, dy, x, w, mean, rstd)
        else:
            fn, name = N._forward(cudnn, kind, x, w, b if kind == "layernorm" else None)
    finally:
        N._build = orig
    fn()
    torch.cuda.synchronize()
    out = [v for k, v in seen["pack"].items() if v.shape == x.shape and v is not x and
           v is not dy][0]
    regs = []
    for launcher, _ in seen["g"]._plans[0].stages[0].executable.launches:
        k = launcher._compiled
        regs.append(f"{k.n_regs}r{'+spill' if k.n_spills else ''}" if k is not None else "?")
    return fn, f"{name if knobs is None else ''} regs {'/'.join(regs)}", out


def row_stats(kind, xf):
    """The forward's saved statistics of float32 rows ``xf``: (mean, 1 / sqrt(var + eps)),
    the mean zero for RMS norm (its variance is the mean square)."""
    if kind == "layernorm":
        mean, var = xf.mean(1, keepdim=True), xf.var(1, unbiased=False, keepdim=True)
    else:
        mean, var = torch.zeros(xf.shape[0], 1, device=xf.device), (xf * xf).mean(1, keepdim=True)
    return mean, torch.rsqrt(var + 1e-5)


def main():
    quick = "quick" in sys.argv
    res = []
    shapes = ((8192, 8192),) if "8192" in sys.argv else ((512, 262144),) if "262144" in \
        sys.argv else ((512, 262144), (2048, 65536)) + (((1024, 131072),) if "lag" in sys.argv
                                                          else ())
    for R, L in shapes:
        x = torch.randn(R, L, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        w = torch.randn(1, L, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(1, L, device="cuda", dtype=torch.bfloat16)
        xf = x.float()
        for kind in ("layernorm", "rmsnorm"):
            mean, rstd = row_stats(kind, xf)
            want_y = (F.layer_norm(xf, (L,), w[0].float(), b[0].float(), 1e-5)
                      if kind == "layernorm" else F.rms_norm(xf, (L,), w[0].float(), 1e-5))
            xr = xf.clone().requires_grad_(True)
            (F.layer_norm(xr, (L,), w[0].float(), None, 1e-5) if kind == "layernorm" else
             F.rms_norm(xr, (L,), w[0].float(), 1e-5)).backward(dy.float())
            want_dx = xr.grad
            for bwd in (False, True) if L != 8192 else (True,):
                nb = (3 if bwd else 2) * x.numel() * 2
                want = want_dx if bwd else want_y
                if "chunk" in sys.argv and "bwd" in sys.argv and not bwd:
                    continue
                if "lag" in sys.argv and not bwd:
                    continue
                grid = [None] + (SHORT if L == 8192 else LAGS[L] if "lag" in sys.argv else
                                 (CHUNKS[L] if bwd else FWD_CHUNKS) if "chunk" in sys.argv else
                                 QUICK if quick or L == 65536 else GRID)
                for cfg in grid:
                    kn = None
                    if cfg is not None:
                        block, warps, pre, per = cfg[:4]
                        chunk = cfg[4] if len(cfg) > 4 else 0
                        lag = cfg[5] if len(cfg) > 5 else 0
                        split = -(-L // (chunk or block))
                        if split > 64 or per * SMS < split or (bwd and block > 8192):
                            continue
                        kn = dict(PATH=4, BLOCK_L=block, BLOCK_ROWS=1, SPLIT=split,
                                  PROGRAMS=(per * SMS // split) * split, num_warps=warps,
                                  PREFETCH=pre, CHUNK=chunk, LAG=lag)
                    try:
                        fn, name, out = _run(kind, bwd, x, w, b, dy, mean, rstd, kn)
                        err = ((out.float() - want).abs().max() / want.abs().max()).item()
                        ms = do_bench(fn, warmup=5, rep=30, return_mode="median")
                        err = max(err, ((out.float() - want).abs().max() /
                                        want.abs().max()).item())    # the last run's
                    except Exception as e:   # noqa: BLE001 -- reported
                        print(f"  {kind} {L} bwd={bwd} {cfg}: FAILED {str(e)[:100]}")
                        continue
                    gbs = nb / ms / 1e6
                    res.append((gbs, kind, L, bwd, cfg, err))
                    print(f"  {kind} {L} bwd={bwd} {cfg} {name}: {gbs:.0f} GB/s "
                          f"rel.err {err:.1e}", flush=True)
    print("\nbest (GB/s, kind, L, backward, (block, warps, prefetch, per_sm), rel.err):")
    for kind in ("layernorm", "rmsnorm"):
        for L in (262144, 131072, 65536, 8192):
            for bwd in (False, True):
                sel = [r for r in res if r[1] == kind and r[2] == L and r[3] == bwd]
                heur = [r for r in sel if r[4] is None]
                best = sorted((r for r in sel if r[4] is not None), key=lambda r: -r[0])[:2]
                h = f"heuristic {heur[0][0]:.0f}" if heur else "heuristic --"
                print(f"{kind:9s} {L:6d} {'bwd' if bwd else 'fwd'} {h} | " +
                      " | ".join(f"{r[0]:.0f} {r[4]} err {r[5]:.0e}" for r in best))


if __name__ == "__main__":
    main()
