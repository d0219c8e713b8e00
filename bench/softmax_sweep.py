"""Sweep the softmax engine's (25) configs on an H100, bf16, each config timed through the
graph API (do_bench medians; GB/s counting one read and one write forward, two reads and
one write backward). What it decides, in src/opendnn/engines/softmax/engine.py:

    passes   ``SoftmaxEngine.configs``: the two-kernel (PASSES=2: 4096-wide tiles, a SPLIT
             filling the GPU) and two-loop (PASSES=3: 8192-wide tiles, 8 warps forward, 16
             backward) configs for long rows -- 1024 x 65536 and 256 x 262144, forward and
             backward, PASSES 2 / 3 x BLOCK_L x SPLIT x warps; the best four per case
    8192     the one-pass config (PASSES=1) for 8192 x 8192 softmax / log-softmax forward:
             rows per program and warps, against the heuristic's plan; outputs checked
    coop     ``_coop_knobs`` (PASSES=4, one read of the input): 256 x 262144, softmax and
             log-softmax, forward and backward -- chunk length, warps, programs per SM and
             PREFETCH against the heuristic's plan; outputs checked against PyTorch.
             Options: fwd / bwd / logfwd / logbwd (some cases), long (8192- and
             16384-element chunks only), repeat=N (N interleaved runs of every config, the
             median kept: run-to-run spread is several percent)

Run (GPU): PYTHONPATH=src python bench/softmax_sweep.py [passes | 8192 | coop [options]]
(default ``passes``; each mode takes a few minutes).
"""

import sys

import torch
from _common import planned  # bench/ (the script's folder)
from triton.testing import do_bench

import opendnn.frontend as cudnn

SOFTMAX = 25


def passes():
    """PASSES 2 and 3 on the long rows: the best four configs per case."""
    for rows, width in ((1024, 65536), (256, 262144)):
        x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
        dy, out = torch.randn_like(x), torch.empty_like(x)
        for bwd in (False, True):
            g = cudnn.pygraph()
            if bwd:
                ta, tb = g.tensor_like(dy), g.tensor_like(x)
                t = g.softmax_backward(ta, tb, axis=-1)
                pack, nbytes = {ta: dy, tb: x, t: out}, 3 * x.numel() * 2
            else:
                ta = g.tensor_like(x)
                t = g.softmax(ta, axis=-1)
                pack, nbytes = {ta: x, t: out}, 2 * x.numel() * 2
            t.set_output(True)
            g.validate()
            res = []
            for npass, bl, split, w in [
                (p, bl, s, w)
                for p in (2, 3)
                for bl in (2048, 4096, 8192)
                for s in ((1, 4, 16, 64) if p == 2 else (1,))
                for w in (4, 8, 16)
            ]:
                knobs = dict(PASSES=npass, BLOCK_L=bl, BLOCK_ROWS=1, SPLIT=split, num_warps=w)
                try:
                    g.create_execution_plan(SOFTMAX, knobs)
                except Exception as e:  # noqa: BLE001 -- a config the engine declines
                    print("declined", knobs, str(e)[:80])
                    continue
                g.build_plan_at_index(0)
                ws = torch.empty(
                    max(g.get_workspace_size_plan_at_index(0), 1), device="cuda", dtype=torch.uint8
                )
                ms = do_bench(lambda: g.execute_plan_at_index(pack, ws, 0), return_mode="median")
                res.append((nbytes / ms / 1e6, npass, bl, split, w))
            res.sort(reverse=True)
            for gbs, *cfg in res[:4]:
                print(
                    f"({rows}, {width}) {'bwd' if bwd else 'fwd'} {gbs:6.0f} GB/s "
                    f"[PASSES, BLOCK_L, SPLIT, warps] = {cfg}",
                    flush=True,
                )


def rows8192():
    """Softmax / log-softmax forward at 8192 x 8192: one program per row or two, 4-16
    warps, a fresh graph per config; output checked against PyTorch."""
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for log in (False, True):
        want = (torch.log_softmax if log else torch.softmax)(x.float(), -1)
        for knobs in [None] + [
            dict(PASSES=1, BLOCK_L=8192, BLOCK_ROWS=r, SPLIT=1, num_warps=w)
            for r in (1, 2)
            for w in (4, 8, 16)
        ]:
            g = cudnn.pygraph()
            ta = g.tensor_like(x)
            t = g.softmax(ta, axis=-1, log=log)
            t.set_output(True)
            out = torch.empty_like(x)
            fn = planned(g, SOFTMAX, knobs, {ta: x, t: out})
            fn()
            err = (out.float() - want).abs().max().item()
            ms = do_bench(fn, return_mode="median")
            name = knobs or g.get_plan_name_at_index(0)
            print(
                f"{'log_' if log else ''}softmax fwd 8192^2 {name}: "
                f"{2 * x.numel() * 2 / ms / 1e6:.0f} GB/s max err {err:.1e}",
                flush=True,
            )


def _want(y, dy, log, backward):
    if not backward:
        return y.float()
    if log:
        return dy.float() - torch.exp(y.float()) * dy.float().sum(-1, keepdim=True)
    yf = y.float()
    return yf * (dy.float() - (dy.float() * yf).sum(-1, keepdim=True))


def coop(args):
    """PASSES=4 at 256 x 262144: (chunk, warps, programs per SM, PREFETCH) against the
    heuristic's plan; prints every config, then the best three medians per case."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cases = [
        (lg, bw)
        for lg in (False, True)
        for bw in (False, True)
        if not any(a in ("fwd", "bwd", "logfwd", "logbwd") for a in args)
        or ("log" if lg else "") + ("bwd" if bw else "fwd") in args
    ]
    repeat = int(next((a.split("=")[1] for a in args if a.startswith("repeat=")), 1))
    blocks = (8192, 16384) if "long" in args else (4096, 8192, 16384)
    R, L = 256, 262144
    x = torch.randn(R, L, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    res = []
    grid = [None] + [(b, w, s, f) for b in blocks for w in (8, 16) for s in (1, 2) for f in (0, 1)]
    for log, backward in cases:
        y = torch.log_softmax(x.float(), -1) if log else torch.softmax(x.float(), -1)
        y = y.to(torch.bfloat16)
        want = _want(y, dy, log, backward)
        for cfg in grid * repeat:
            kn = None
            if cfg is not None:
                block, warps, per_sm, pre = cfg
                split = L // block
                progs = (per_sm * sms // split) * split
                if split > 64 or progs < split:
                    continue
                kn = dict(
                    PASSES=4,
                    BLOCK_L=block,
                    BLOCK_ROWS=1,
                    SPLIT=split,
                    num_warps=warps,
                    PROGRAMS=progs,
                    PREFETCH=pre,
                )
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
            pack[out] = torch.full_like(x, float("nan"))
            try:
                fn = planned(g, SOFTMAX, kn, pack)
                fn()
                torch.cuda.synchronize()
                err = ((pack[out].float() - want).abs().max() / want.abs().max()).item()
            except Exception as e:  # noqa: BLE001 -- reported
                print("FAILED", log, backward, kn, str(e)[:80])
                continue
            ms = do_bench(fn, warmup=5, rep=30, return_mode="median")
            err = max(
                err, ((pack[out].float() - want).abs().max() / want.abs().max()).item()
            )  # the last run's too
            name = g.get_plan_name_at_index(0) if cfg is None else ""
            res.append((nb / ms / 1e6, log, backward, cfg, err))
            print(
                f"  log={log} bwd={backward} {cfg} {name}: {nb / ms / 1e6:.0f} GB/s err {err:.1e}",
                flush=True,
            )
    print("\nbest medians (GB/s, (block, warps, per_sm, prefetch), rel.err):")
    for log in (False, True):
        for backward in (False, True):
            sel = [r for r in res if r[1] == log and r[2] == backward]
            if not sel:
                continue
            heur = [r for r in sel if r[3] is None]
            med = {}
            for r in sel:
                med.setdefault(r[3], []).append(r)
            sel = [sorted(v, key=lambda r: r[0])[len(v) // 2] for v in med.values()]
            best = sorted((r for r in sel if r[3] is not None), key=lambda r: -r[0])[:3]
            print(
                f"log={log} bwd={backward}: heuristic "
                f"{heur[0][0] if heur else 0:.0f} | "
                + " | ".join(f"{r[0]:.0f} {r[3]} err {r[4]:.0e}" for r in best)
            )


def main(argv):
    mode = argv[0] if argv else "passes"
    if mode == "passes":
        passes()
    elif mode == "8192":
        rows8192()
    elif mode == "coop":
        coop(argv[1:])
    else:
        sys.exit(f"unknown mode {mode!r}: passes, 8192 or coop")


if __name__ == "__main__":
    main(sys.argv[1:])
