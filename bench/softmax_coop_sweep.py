"""Sweep of the softmax engine's one-read path (PASSES=4) at 256 x 262144 bf16, forward
and backward, softmax and log-softmax: chunk length, warps, programs per SM and PREFETCH
(issue 4's goals: forward >= 2.0 TB/s, backward >= 2.4), against the heuristic's plan in
the same run; each config's output is checked against PyTorch.
Run (GPU): PYTHONPATH=src python bench/softmax_coop_sweep.py"""
import torch
from triton.testing import do_bench

import opendnn.frontend as cudnn
from probe_common import planned  # bench/ (the script's folder)

SMS = torch.cuda.get_device_properties(0).multi_processor_count


def _plan(g, pack, knobs):
    return planned(g, 25, knobs, pack)


def _want(x, y, dy, log, backward):
    if not backward:
        return y.float()
    if log:
        return dy.float() - torch.exp(y.float()) * dy.float().sum(-1, keepdim=True)
    yf = y.float()
    return yf * (dy.float() - (dy.float() * yf).sum(-1, keepdim=True))


def main():
    """argv: ``logbwd`` / ``bwd`` / ``fwd`` / ``logfwd`` picks one case (default all four);
    ``long`` only 8192- and 16384-element chunks; ``repeat=N`` times each config, N runs
    interleaved (run-to-run spread is several percent)."""
    import sys
    args = sys.argv[1:]
    cases = [(lg, bw) for lg in (False, True) for bw in (False, True)
             if not args or not any(a in ("fwd", "bwd", "logfwd", "logbwd") for a in args)
             or ("log" if lg else "") + ("bwd" if bw else "fwd") in args]
    repeat = int(next((a.split("=")[1] for a in args if a.startswith("repeat=")), 1))
    blocks = (8192, 16384) if "long" in args else (4096, 8192, 16384)
    R, L = 256, 262144
    x = torch.randn(R, L, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    res = []
    grid = [None] + [(b, w, s, f) for b in blocks for w in (8, 16)
                     for s in (1, 2) for f in (0, 1)]
    for log, backward in cases:
        y = torch.log_softmax(x.float(), -1) if log else torch.softmax(x.float(), -1)
        y = y.to(torch.bfloat16)
        if True:
            want = _want(x, y, dy, log, backward)
            for cfg in grid * repeat:
                kn = None
                if cfg is not None:
                    block, warps, per_sm, pre = cfg
                    split = L // block
                    progs = (per_sm * SMS // split) * split
                    if split > 64 or progs < split:
                        continue
                    kn = dict(PASSES=4, BLOCK_L=block, BLOCK_ROWS=1, SPLIT=split,
                              num_warps=warps, PROGRAMS=progs, PREFETCH=pre)
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
                    fn = _plan(g, pack, kn)
                    fn()
                    torch.cuda.synchronize()
                    err = ((pack[out].float() - want).abs().max() /
                           want.abs().max()).item()
                except Exception as e:   # noqa: BLE001 -- reported
                    print("FAILED", log, backward, kn, str(e)[:80])
                    continue
                ms = do_bench(fn, warmup=5, rep=30, return_mode="median")
                err = max(err, ((pack[out].float() - want).abs().max() /
                                want.abs().max()).item())      # the last run's too
                name = g.get_plan_name_at_index(0) if cfg is None else ""
                res.append((nb / ms / 1e6, log, backward, cfg, err))
                print(f"  log={log} bwd={backward} {cfg} {name}: {nb / ms / 1e6:.0f} GB/s "
                      f"err {err:.1e}", flush=True)
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
            print(f"log={log} bwd={backward}: heuristic "
                  f"{heur[0][0] if heur else 0:.0f} | " +
                  " | ".join(f"{r[0]:.0f} {r[3]} err {r[4]:.0e}" for r in best))


if __name__ == "__main__":
    main()
