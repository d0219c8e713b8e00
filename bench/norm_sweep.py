"""Sweep the norm engine's (26) layer / RMS norm configs on an H100, bf16, each config built
through the runner's norm graphs (src/opendnn/bench/norm.py) and timed with do_bench
(GB/s counting x and y once forward; dy, x and dx once backward). What it decides, in
src/opendnn/engines/norm/engine.py:

    onepass  ``NormEngine.configs``, the persistent one-pass backward (PATH=1) at 8192 x
             8192: rows per tile, 32 warps, programs (one or two per SM) and PREFETCH
             against the heuristic's plan; the best three per kind
    coop     ``_coop_knobs``, ``_coop_backward_knobs`` and ``_prefetch``: the one-read path
             (PATH=4) for long rows (512 x 262144 and 2048 x 65536), forward and backward
             -- chunk length, warps, programs per SM and PREFETCH against the heuristic's
             choice; each config's Y / DX checked against PyTorch. Options:
               quick   a short grid
               8192    the backward at 8192 x 8192 in 2-4 chunks a row, against the
                       heuristic's one-pass plan
               262144  that width only
               chunk   chunks shorter than their tile (CHUNK) and PREFETCH=2
               lag     the backward's meeting a row late (LAG; adds 1024 x 131072)
               bwd     (with chunk) the backward only

Run (GPU): PYTHONPATH=src python bench/norm_sweep.py [onepass | coop [options]]
(default ``coop``; a few minutes per mode, the full coop grid about ten).
"""

import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import opendnn.bench.norm as N
import opendnn.frontend as cudnn

NORM = 26
SMS = torch.cuda.get_device_properties(0).multi_processor_count
# (block, warps, prefetch, per_sm[, chunk[, lag]])
GRID = [
    (b, w, pre, per)
    for b in (4096, 8192, 16384)
    for w in (8, 16)
    for pre in (0, 1)
    for per in (1, 2)
]
SHORT = [
    (4096, 8, 1, 1),
    (4096, 4, 1, 2),
    (2048, 4, 1, 2),
    (2048, 8, 1, 2),
    (2048, 4, 1, 1),
    (4096, 8, 1, 2),
]  # 8192-wide rows: 2 or 4 chunks
# chunks below the tile let SPLIT x groups fill all 132 SMs (262144: 33 x 4); PREFETCH 2
# loads the next row first
CHUNKS = {
    65536: [(8192, 8, 1, 1), (8192, 8, 2, 1)],
    262144: [
        (8192, 8, 1, 1, 7944),
        (8192, 8, 2, 1, 7944),
        (8192, 8, 1, 1, 8128),
        (8192, 8, 2, 1, 8128),
        (8192, 8, 2, 1, 8064),
    ],
}
# the backward's meeting one or two rows late (LAG)
LAGS = {
    65536: [(8192, 8, 2, 1, 0, 0)] + [(8192, 8, 0, 1, 0, g) for g in (1, 2)],
    131072: [(8192, 8, p, 1, 0, 0) for p in (1, 2)] + [(8192, 8, 0, 1, 0, 2)],
    262144: [(8192, 8, 1, 1, 7944, 0), (8192, 8, 1, 1, 0, 0)]
    + [
        (b, w, 0, per, c, g)
        for g in (1, 2)
        for b, w, per, c in ((8192, 8, 1, 7944), (8192, 8, 1, 0), (4096, 4, 2, 0))
    ],
}
FWD_CHUNKS = [(16384, 8, 1, 1), (16384, 8, 2, 1)]  # PREFETCH 2: the next row loaded first
QUICK = [
    (4096, 8, 1, 2),
    (4096, 4, 1, 2),
    (8192, 16, 1, 1),
    (8192, 8, 1, 1),
    (8192, 8, 0, 1),
    (8192, 8, 0, 2),
    (16384, 8, 1, 1),
    (16384, 8, 0, 2),
]


def _run(kind, bwd, x, w, b, dy, mean, rstd, knobs):
    """The runner's norm graph built with ``knobs`` (None: the heuristic's plan): (run
    callable, plan name and registers, the output tensor)."""
    orig, seen = N._build, {}

    def build(g, cd, pack):
        if knobs is None:
            fn, name = orig(g, cd, pack)
        else:
            g.validate()
            g.build_operation_graph()
            g.create_execution_plan(NORM, knobs)
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
    out = [v for k, v in seen["pack"].items() if v.shape == x.shape and v is not x and v is not dy][
        0
    ]
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


def onepass():
    """PATH=1 backward at 8192 x 8192: rows per tile, programs and PREFETCH."""
    R = L = 8192
    x = torch.randn(R, L, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    w = torch.randn(1, L, device="cuda", dtype=torch.bfloat16)
    nb = 3 * x.numel() * 2
    res = []
    for kind in ("layernorm", "rmsnorm"):
        mean, rstd = row_stats(kind, x.float())
        fn, name, _ = _run(kind, True, x, w, None, dy, mean, rstd, None)
        ms = do_bench(fn, warmup=10, rep=50, return_mode="median")
        print(f"{kind} heuristic {name}: {nb / ms / 1e6:.0f} GB/s", flush=True)
        for br, warps, pre in ((1, 32, 0), (1, 32, 1), (2, 32, 0), (2, 32, 1)):
            for progs in (SMS, 2 * SMS):
                kn = dict(
                    PATH=1,
                    BLOCK_L=L,
                    BLOCK_ROWS=br,
                    SPLIT=1,
                    PROGRAMS=progs,
                    num_warps=warps,
                    PREFETCH=pre,
                )
                try:
                    fn, _, _ = _run(kind, True, x, w, None, dy, mean, rstd, kn)
                    ms = do_bench(fn, warmup=10, rep=50, return_mode="median")
                except Exception as e:  # noqa: BLE001 -- reported
                    print(f"  {kind} rows {br} warps {warps} programs {progs}: {str(e)[:90]}")
                    continue
                res.append((nb / ms / 1e6, kind, br, warps, progs, pre))
                print(
                    f"  {kind} rows {br} warps {warps} programs {progs} prefetch {pre}: "
                    f"{nb / ms / 1e6:.0f} GB/s",
                    flush=True,
                )
    for kind in ("layernorm", "rmsnorm"):
        for r in sorted((r for r in res if r[1] == kind), reverse=True)[:3]:
            print(
                f"{kind}: {r[0]:.0f} GB/s rows {r[2]} warps {r[3]} programs {r[4]} prefetch {r[5]}"
            )


def coop(args):
    """PATH=4 on long rows (see the module docstring for ``args``)."""
    quick = "quick" in args
    res = []
    shapes = (
        ((8192, 8192),)
        if "8192" in args
        else ((512, 262144),)
        if "262144" in args
        else ((512, 262144), (2048, 65536)) + (((1024, 131072),) if "lag" in args else ())
    )
    for R, L in shapes:
        x = torch.randn(R, L, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        w = torch.randn(1, L, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(1, L, device="cuda", dtype=torch.bfloat16)
        xf = x.float()
        for kind in ("layernorm", "rmsnorm"):
            mean, rstd = row_stats(kind, xf)
            want_y = (
                F.layer_norm(xf, (L,), w[0].float(), b[0].float(), 1e-5)
                if kind == "layernorm"
                else F.rms_norm(xf, (L,), w[0].float(), 1e-5)
            )
            xr = xf.clone().requires_grad_(True)
            (
                F.layer_norm(xr, (L,), w[0].float(), None, 1e-5)
                if kind == "layernorm"
                else F.rms_norm(xr, (L,), w[0].float(), 1e-5)
            ).backward(dy.float())
            want_dx = xr.grad
            for bwd in (False, True) if L != 8192 else (True,):
                nb = (3 if bwd else 2) * x.numel() * 2
                want = want_dx if bwd else want_y
                if not bwd and ("lag" in args or ("chunk" in args and "bwd" in args)):
                    continue
                grid = [None] + (
                    SHORT
                    if L == 8192
                    else LAGS[L]
                    if "lag" in args
                    else (CHUNKS[L] if bwd else FWD_CHUNKS)
                    if "chunk" in args
                    else QUICK
                    if quick or L == 65536
                    else GRID
                )
                for cfg in grid:
                    kn = None
                    if cfg is not None:
                        block, warps, pre, per = cfg[:4]
                        chunk = cfg[4] if len(cfg) > 4 else 0
                        lag = cfg[5] if len(cfg) > 5 else 0
                        split = -(-L // (chunk or block))
                        if split > 64 or per * SMS < split or (bwd and block > 8192):
                            continue
                        kn = dict(
                            PATH=4,
                            BLOCK_L=block,
                            BLOCK_ROWS=1,
                            SPLIT=split,
                            PROGRAMS=(per * SMS // split) * split,
                            num_warps=warps,
                            PREFETCH=pre,
                            CHUNK=chunk,
                            LAG=lag,
                        )
                    try:
                        fn, name, out = _run(kind, bwd, x, w, b, dy, mean, rstd, kn)
                        err = ((out.float() - want).abs().max() / want.abs().max()).item()
                        ms = do_bench(fn, warmup=5, rep=30, return_mode="median")
                        err = max(
                            err, ((out.float() - want).abs().max() / want.abs().max()).item()
                        )  # the last run's
                    except Exception as e:  # noqa: BLE001 -- reported
                        print(f"  {kind} {L} bwd={bwd} {cfg}: FAILED {str(e)[:100]}")
                        continue
                    gbs = nb / ms / 1e6
                    res.append((gbs, kind, L, bwd, cfg, err))
                    print(
                        f"  {kind} {L} bwd={bwd} {cfg} {name}: {gbs:.0f} GB/s rel.err {err:.1e}",
                        flush=True,
                    )
    print("\nbest (GB/s, kind, L, backward, (block, warps, prefetch, per_sm), rel.err):")
    for kind in ("layernorm", "rmsnorm"):
        for L in (262144, 131072, 65536, 8192):
            for bwd in (False, True):
                sel = [r for r in res if r[1] == kind and r[2] == L and r[3] == bwd]
                heur = [r for r in sel if r[4] is None]
                best = sorted((r for r in sel if r[4] is not None), key=lambda r: -r[0])[:2]
                h = f"heuristic {heur[0][0]:.0f}" if heur else "heuristic --"
                print(
                    f"{kind:9s} {L:6d} {'bwd' if bwd else 'fwd'} {h} | "
                    + " | ".join(f"{r[0]:.0f} {r[4]} err {r[5]:.0e}" for r in best)
                )


def main(argv):
    mode = argv[0] if argv and argv[0] in ("onepass", "coop") else "coop"
    if mode == "onepass":
        onepass()
    else:
        coop(argv[1:] if argv and argv[0] == "coop" else argv)


if __name__ == "__main__":
    main(sys.argv[1:])
